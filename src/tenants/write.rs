//! One change to the entries: checked against the caps, recorded where the
//! entries live (Redis, or the embedded store's file) with its audit
//! record, then applied to this instance's view and logged.

use super::audit;
use super::{Changed, Held, Tenants, TenantsError, file, now_ms};
use crate::domain::tenants::{Entry, Kind};
use crate::store::redis::RedisStore;
use crate::store::redis::tenants::{AUDIT_KEPT, Change as RedisChange, Written};

/// What one change is, before it is recorded.
pub(super) struct Write<'a> {
    pub id: &'a str,
    pub after: Option<Entry>,
    /// `override.set`, `block.delete`...
    pub action: &'a str,
    /// The name of the token that asked.
    pub token: &'a str,
    /// Only if the entry is still this one (the expiry sweep).
    pub expected: Option<&'a Entry>,
}

/// The audit record of a change, split around the `before` it will hold
/// (Redis fills it in inside its script, from what it replaced).
struct Record {
    head: String,
    tail: String,
}

impl Tenants {
    /// One change: recorded where the entries live with its audit record,
    /// then applied here. A race lost (the entry gone, or no longer the
    /// `expected` one) answers `NotFound`.
    pub(super) async fn write(&self, w: Write<'_>) -> Result<Changed, TenantsError> {
        let mut held = self.held.lock().await;
        let kind = kind_of(w.action);
        let old = held.entries.get(w.id).cloned();
        if let Some(entry) = &w.after
            && !held.entries.contains_key(w.id)
        {
            let now = now_ms();
            let live = held.entries.values().filter(|e| !e.expired(now));
            self.caps.admit(entry, live).map_err(TenantsError::Full)?;
        }
        let subject = w.after.as_ref().or(held.entries.get(w.id)).or(w.expected);
        let Some(subject) = subject else {
            return Err(TenantsError::NotFound(kind));
        };
        let (policy, key, reason) = (
            subject.policy.clone(),
            subject.key.clone(),
            subject.reason.clone(),
        );
        let after_json = w.after.as_ref().map(audit::json);
        let (head, tail) = audit::parts(&audit::Record {
            at_ms: now_ms(),
            token: w.token,
            action: w.action,
            policy: policy.as_deref(),
            key: &key,
            after: after_json.as_deref(),
            reason: reason.as_deref(),
        });
        let record = Record { head, tail };
        let (before, reloaded) = match &self.redis {
            Some(redis) => {
                let json = after_json.as_deref();
                self.record_in_redis(redis, &mut held, &w, json, &record, kind)
                    .await?
            }
            None => (self.record_in_file(&mut held, &w, &record, kind)?, false),
        };
        if !reloaded {
            self.patch(&mut held, old.as_ref(), w.after.as_ref());
        }
        drop(held);
        let changed = Changed {
            before,
            after: w.after,
        };
        let policy = policy.as_deref();
        audit::log(w.action, w.token, policy, &key, &changed, reason.as_deref());
        self.metrics.tenants.changed(w.action);
        Ok(changed)
    }

    /// Records the change in Redis (one script: the cap, the entry, the
    /// version, the audit record and the message to other instances), then
    /// in `held`. Returns the entry it replaced, and whether `held` was
    /// reloaded whole (another instance changed something meanwhile).
    async fn record_in_redis(
        &self,
        redis: &RedisStore,
        held: &mut Held,
        w: &Write<'_>,
        json: Option<&str>,
        record: &Record,
        kind: &'static str,
    ) -> Result<(Option<Entry>, bool), TenantsError> {
        let expected_json = w.expected.map(audit::json);
        let change = RedisChange {
            id: w.id,
            json,
            audit_head: &record.head,
            audit_tail: &record.tail,
            max_entries: self.caps.max_entries,
            expected: expected_json.as_deref().map(Some),
        };
        let (version, before) = match redis.tenants_write(change).await? {
            Written::Changed(version, before) => (version, before),
            Written::Absent | Written::Moved => return Err(TenantsError::NotFound(kind)),
            Written::Full => return Err(TenantsError::Full(self.full())),
        };
        let before = before.and_then(|t| serde_json::from_str::<Entry>(&t).ok());
        if version == held.version + 1 {
            apply(held, w.id, w.after.clone());
            held.version = version;
            return Ok((before, false));
        }
        // Another instance changed something meanwhile: read all.
        self.reload_locked(held).await?;
        Ok((before, true))
    }

    /// Records the change in `held` and the embedded store's file; undone
    /// in `held` when the file cannot be written (not kept on disk: not
    /// kept at all). Returns the entry it replaced.
    fn record_in_file(
        &self,
        held: &mut Held,
        w: &Write<'_>,
        record: &Record,
        kind: &'static str,
    ) -> Result<Option<Entry>, TenantsError> {
        let before = held.entries.get(w.id).cloned();
        if before.is_none() && w.after.is_none() {
            return Err(TenantsError::NotFound(kind));
        }
        if w.expected.is_some() && before.as_ref() != w.expected {
            return Err(TenantsError::NotFound(kind));
        }
        let before_json = before.as_ref().map(audit::json);
        let before_text = before_json.as_deref().unwrap_or("null");
        apply(held, w.id, w.after.clone());
        held.version += 1;
        held.audit
            .push_front(format!("{}{before_text}{}", record.head, record.tail));
        held.audit.truncate(AUDIT_KEPT);
        if let Err(e) = self.persist(held) {
            apply(held, w.id, before.clone());
            held.version -= 1;
            held.audit.pop_front();
            return Err(e);
        }
        Ok(before)
    }

    fn persist(&self, held: &Held) -> Result<(), TenantsError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        file::save(path, held.version, held.entries.values(), held.audit.iter())?;
        Ok(())
    }

    fn full(&self) -> String {
        format!(
            "{} overrides, blocks and exemptions are set, the most allowed \
             (tenants.max_entries = {}): delete some first",
            self.caps.max_entries, self.caps.max_entries
        )
    }
}

/// Sets or removes `id` in `held`.
fn apply(held: &mut Held, id: &str, entry: Option<Entry>) {
    match entry {
        Some(entry) => {
            held.entries.insert(id.to_owned(), entry);
        }
        None => {
            held.entries.remove(id);
        }
    }
}

/// The kind named by an action (`override.set`), for messages.
fn kind_of(action: &str) -> &'static str {
    Kind::ALL
        .iter()
        .map(|k| k.as_str())
        .find(|k| action.starts_with(k))
        .unwrap_or("entry")
}
