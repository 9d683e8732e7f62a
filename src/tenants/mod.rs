//! Overrides, blocks and exemptions at runtime (`/v1/overrides`,
//! `/v1/blocks`, `/v1/exemptions`): where they are kept, how every
//! instance learns of a change, and the audit trail. What an entry is and
//! how a check reads it is the domain's (`domain::tenants`).
//!
//! - **With Redis** they live in Redis beside the counters
//!   (`store/redis/tenants.rs`), so a restart keeps them and every
//!   instance reads the same. A change raises a version counter in the
//!   same script; every instance polls that counter every
//!   `tenants.poll_interval` (one GET) and reloads the entries when it
//!   moved, so a change reaches every instance within that interval plus
//!   one reload, with no message to lose.
//! - **With the embedded store** they are kept in `tenants.file`, replaced
//!   atomically at every change (`file.rs`), and read at startup.
//!
//! A check never waits for any of this: it reads the [`View`] in force
//! from memory, one lookup by key.

mod audit;
mod file;
mod settings;
mod sync;
mod write;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::{ArcSwap, Guard};
use serde_json::Value;
use tracing::info;

pub use audit::rfc3339;
pub use file::FileError;
pub use settings::TenantsSettings;
use write::Write;

use crate::domain::tenants::{Caps, Entry, Kind, View, entry_id};
use crate::domain::{Bounds, PolicySet, ValidationError};
use crate::metrics::Metrics;
use crate::store::StoreError;
use crate::store::redis::RedisStore;
use crate::store::redis::tenants::AUDIT_KEPT;

/// Why a change or a read of the entries failed.
#[derive(Debug, thiserror::Error)]
pub enum TenantsError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// A cap (`tenants.max_entries`, `tenants.max_per_policy`).
    #[error("{0}")]
    Full(String),
    #[error("no {0} is set there")]
    NotFound(&'static str),
    #[error("the store could not record the change: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    File(#[from] FileError),
}

/// What a change did: the entry before and after it.
#[derive(Debug, Clone)]
pub struct Changed {
    pub before: Option<Entry>,
    pub after: Option<Entry>,
}

/// One page of a listing.
#[derive(Debug, Clone)]
pub struct Page {
    pub entries: Vec<Entry>,
    /// The cursor of the next page (`after`), when there is one.
    pub next: Option<String>,
}

/// The entries as this instance holds them.
#[derive(Default)]
struct Held {
    entries: BTreeMap<String, Entry>,
    version: u64,
    /// The embedded store's audit records, newest first (Redis keeps its own).
    audit: VecDeque<String>,
    /// The policy set the view was built under.
    policies: Option<Arc<PolicySet>>,
}

/// The runtime entries of this instance, and where they are kept.
pub struct Tenants {
    view: ArcSwap<View>,
    held: tokio::sync::Mutex<Held>,
    redis: Option<RedisStore>,
    file: Option<PathBuf>,
    policies: Arc<ArcSwap<PolicySet>>,
    bounds: Bounds,
    caps: Caps,
    poll_interval: Duration,
    /// Rings when the invalidation channel says an entry changed.
    changed: tokio::sync::Notify,
    metrics: Arc<Metrics>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Tenants {
    /// The entries kept where `settings` and the store say: read now from
    /// the file (an unreadable or corrupt one is an error: nothing is
    /// written over it), or from Redis (unreachable now: empty until the
    /// first poll that reaches it).
    pub async fn open(
        settings: &TenantsSettings,
        redis: Option<RedisStore>,
        policies: Arc<ArcSwap<PolicySet>>,
        bounds: Bounds,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Tenants>, TenantsError> {
        let mut held = Held::default();
        let file = redis.is_none().then(|| settings.file.clone()).flatten();
        if let Some(path) = &file
            && let Some(saved) = file::load(path)?
        {
            held.version = saved.version;
            held.audit = saved.audit.into();
            held.entries = saved.entries.into_iter().map(|e| (e.id(), e)).collect();
            info!(
                file = %path.display(),
                entries = held.entries.len(),
                "loaded {} runtime overrides, blocks and exemptions from {}",
                held.entries.len(),
                path.display()
            );
        }
        metrics.tenants.max_entries.set(settings.max_entries as i64);
        let tenants = Arc::new(Tenants {
            view: ArcSwap::from_pointee(View::default()),
            held: tokio::sync::Mutex::new(held),
            redis,
            file,
            policies,
            bounds,
            caps: Caps {
                max_entries: settings.max_entries,
                max_per_policy: settings.max_per_policy,
            },
            poll_interval: settings.poll_interval,
            changed: tokio::sync::Notify::new(),
            metrics,
        });
        if let Some(redis) = &tenants.redis {
            // Read now when Redis is up, so the first check sees a block;
            // otherwise startup does not wait: the sync loop reads them
            // as soon as it answers.
            let up = redis.wait_connected(Duration::ZERO).await;
            let mut held = tenants.held.lock().await;
            if up && let Err(e) = tenants.reload_locked(&mut held).await {
                tracing::warn!(
                    "cannot read the runtime overrides from Redis yet ({e}); retrying every poll"
                );
            }
        } else {
            tenants.rebuild(&mut *tenants.held.lock().await);
        }
        Ok(tenants)
    }

    /// Another instance changed an entry (its message on the invalidation
    /// channel): the sync loop reloads now rather than at its next poll.
    pub fn wake(&self) {
        self.changed.notify_one();
    }

    /// The entries in force, for a check: one atomic load.
    pub fn view(&self) -> Guard<Arc<View>> {
        self.view.load()
    }

    /// Sets `entry` (replacing the one of the same kind, policy and key),
    /// validated against the policies in force and the caps.
    pub async fn put(&self, entry: Entry) -> Result<Changed, TenantsError> {
        entry.validate(&self.policies.load(), &self.bounds)?;
        let action = format!("{}.set", entry.kind.as_str());
        let id = entry.id();
        let token = entry.set_by.clone();
        self.write(Write {
            id: &id,
            after: Some(entry),
            action: &action,
            token: &token,
            expected: None,
        })
        .await
    }

    /// Deletes one entry; `NotFound` when there is none.
    pub async fn delete(
        &self,
        kind: Kind,
        policy: Option<&str>,
        key: &str,
        token: &str,
    ) -> Result<Changed, TenantsError> {
        let id = entry_id(kind, policy, key);
        let action = format!("{}.delete", kind.as_str());
        self.write(Write {
            id: &id,
            after: None,
            action: &action,
            token,
            expected: None,
        })
        .await
    }

    /// One entry, unless it expired.
    pub async fn get(&self, kind: Kind, policy: Option<&str>, key: &str) -> Option<Entry> {
        let held = self.held.lock().await;
        let entry = held.entries.get(&entry_id(kind, policy, key))?;
        (!entry.expired(now_ms())).then(|| entry.clone())
    }

    /// Up to `limit` live entries of `kind` (of `policy`, for overrides),
    /// in key order, from just after the key `after`.
    pub async fn list(
        &self,
        kind: Kind,
        policy: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Page {
        let held = self.held.lock().await;
        let prefix = entry_id(kind, policy, "");
        let start = match after {
            Some(key) => format!("{prefix}{key}\u{0}"),
            None => prefix.clone(),
        };
        let now = now_ms();
        let mut live = held
            .entries
            .range(start..)
            .take_while(|(id, _)| id.starts_with(&prefix))
            .map(|(_, e)| e)
            .filter(|e| !e.expired(now));
        let entries: Vec<Entry> = live.by_ref().take(limit).cloned().collect();
        let more = live.next().is_some();
        let next = more
            .then(|| entries.last().map(|e| e.key.clone()))
            .flatten();
        Page { entries, next }
    }

    /// The last `limit` changes, newest first.
    pub async fn audit(&self, limit: usize) -> Result<Vec<Value>, TenantsError> {
        let limit = limit.clamp(1, AUDIT_KEPT);
        let records = match &self.redis {
            Some(redis) => redis.tenants_audit(limit).await?,
            None => {
                let held = self.held.lock().await;
                held.audit.iter().take(limit).cloned().collect()
            }
        };
        Ok(records
            .iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect())
    }

    /// The view of `held` under the policies in force, swapped in.
    fn rebuild(&self, held: &mut Held) {
        let policies = self.policies.load_full();
        let view = View::build(held.entries.values(), &policies, &self.bounds, held.version);
        self.installed(&view);
        held.policies = Some(policies);
        self.view.store(Arc::new(view));
    }

    /// The view in force with one entry changed (`old` to `new`), unless the
    /// policies changed since it was built: then all of it is rebuilt.
    fn patch(&self, held: &mut Held, old: Option<&Entry>, new: Option<&Entry>) {
        let policies = self.policies.load_full();
        if !held
            .policies
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, &policies))
        {
            return self.rebuild(held);
        }
        let view = self
            .view
            .load()
            .patched(old, new, &policies, &self.bounds, held.version);
        self.installed(&view);
        self.view.store(Arc::new(view));
    }

    fn installed(&self, view: &View) {
        let metrics = &self.metrics.tenants;
        metrics.set_counts(view.counts);
        metrics.stale.set(view.stale as i64);
        metrics.version.set(view.version as i64);
    }

    /// Reads every entry from Redis into `held`, and rebuilds the view from
    /// them. Under `held`'s lock, so no change of this instance's falls
    /// between the read and the install (which would install an older
    /// version over a newer one).
    async fn reload_locked(&self, held: &mut Held) -> Result<(), TenantsError> {
        let Some(redis) = &self.redis else {
            return Ok(());
        };
        let (version, texts) = redis.tenants_load().await?;
        held.entries = texts
            .iter()
            .filter_map(|t| serde_json::from_str::<Entry>(t).ok())
            .map(|e| (e.id(), e))
            .collect();
        held.version = version;
        self.rebuild(held);
        Ok(())
    }
}
