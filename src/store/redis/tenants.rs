//! Where the runtime overrides, blocks and exemptions live in Redis
//! (`crate::tenants`): three keys beside the counters, sharing one hash
//! tag so a Redis Cluster keeps them in one slot and one script changes
//! them together.
//! - `<prefix>{tenants}:entries`, a hash: entry id → the entry's JSON;
//! - `<prefix>{tenants}:version`, a counter raised by every change, which
//!   every instance polls to notice one it was not told of;
//! - `<prefix>{tenants}:audit`, a list of the last changes, newest first.
//!
//! A change also PUBLISHes `TENANTS_MESSAGE` on the invalidation channel,
//! so the other instances reload at once; their poll of the version is
//! the backstop for a message lost.
//!
//! These scripts are sent with EVAL: they run at a change and at a reload,
//! never on a check.

use fred::prelude::*;

use super::RedisStore;
use super::errors::classify;
use crate::store::StoreError;

/// How many changes the audit list keeps.
pub const AUDIT_KEPT: usize = 1000;

/// How long a call about the runtime entries may take: an operator's
/// write, a reload of up to 10 000 entries, a poll. Longer than
/// `redis.timeout`, which is sized for a check: none of these holds a
/// caller's check, and a write timed out on a busy server would be
/// refused (nothing changed) where it only needed a moment.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The version and every entry's JSON, read at one instant.
const LOAD: &str = r#"
return {tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('HVALS', KEYS[1])}
"#;

/// Sets (ARGV[2] not empty) or deletes entry ARGV[1]; refuses a new entry
/// beyond ARGV[5] entries, and (ARGV[6] = '1') a change to an entry that
/// is no longer ARGV[7] (an expiry sweep racing a new PUT). Records
/// ARGV[3] .. before .. ARGV[4] in the audit list, and tells every
/// instance on the invalidation channel ARGV[9] (a PUBLISH refused by an
/// ACL without the channel is left to the pollers). Answers the new
/// version (0: nothing changed, -1: full, -2: changed meanwhile) and the
/// entry's JSON before.
const WRITE: &str = r#"
local before = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[6] == '1' and before ~= ARGV[7] then return {-2, before} end
if ARGV[2] == '' then
  if not before then return {0, false} end
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  if not before and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then return {-1, false} end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
local version = redis.call('INCR', KEYS[2])
redis.call('LPUSH', KEYS[3], ARGV[3] .. (before or 'null') .. ARGV[4])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[8]) - 1)
pcall(redis.call, 'PUBLISH', ARGV[9], ARGV[10])
return {version, before}
"#;

/// The options of a call about the runtime entries: [`TIMEOUT`].
fn admin_call() -> Options {
    Options {
        timeout: Some(TIMEOUT),
        ..Default::default()
    }
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The new version, and the entry's JSON before.
    Changed(u64, Option<String>),
    /// A delete of an entry that was not there.
    Absent,
    /// A new entry beyond the cap.
    Full,
    /// The entry is no longer what the caller saw: not changed.
    Moved,
}

/// One change: the entry's id, its JSON (`None`: delete it), and the
/// audit record's text around the JSON before.
pub struct Change<'a> {
    pub id: &'a str,
    pub json: Option<&'a str>,
    pub audit_head: &'a str,
    pub audit_tail: &'a str,
    pub max_entries: usize,
    /// Only if the entry's JSON is still this (`Some(None)`: absent).
    pub expected: Option<Option<&'a str>>,
}

impl RedisStore {
    fn tenant_keys(&self) -> Vec<String> {
        let prefix = &self.inner.options.settings.key_prefix;
        ["entries", "version", "audit"]
            .iter()
            .map(|k| format!("{prefix}{{tenants}}:{k}"))
            .collect()
    }

    async fn tenants_eval<R: FromValue>(
        &self,
        script: &str,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<R, StoreError> {
        let client = self.inner.pool.next_connected();
        let client = client.with_options(&admin_call());
        client.eval(script, keys, args).await.map_err(classify)
    }

    /// The entries' version and every entry's JSON.
    pub async fn tenants_load(&self) -> Result<(u64, Vec<String>), StoreError> {
        let (version, entries): (i64, Vec<String>) =
            self.tenants_eval(LOAD, self.tenant_keys(), vec![]).await?;
        Ok((version.max(0) as u64, entries))
    }

    /// The entries' version alone: the backstop poll.
    pub async fn tenants_version(&self) -> Result<u64, StoreError> {
        let keys = self.tenant_keys();
        let client = self.inner.pool.next_connected();
        let client = client.with_options(&admin_call());
        let version: Option<i64> = client.get(&keys[1]).await.map_err(classify)?;
        Ok(version.unwrap_or(0).max(0) as u64)
    }

    /// Applies one change, atomically with its audit record.
    pub async fn tenants_write(&self, change: Change<'_>) -> Result<Written, StoreError> {
        let (check, expected) = match change.expected {
            Some(json) => ("1", json.unwrap_or_default()),
            None => ("0", ""),
        };
        let args = vec![
            change.id.to_owned(),
            change.json.unwrap_or_default().to_owned(),
            change.audit_head.to_owned(),
            change.audit_tail.to_owned(),
            change.max_entries.to_string(),
            check.to_owned(),
            expected.to_owned(),
            AUDIT_KEPT.to_string(),
            self.inner.channel.clone(),
            super::invalidation::TENANTS_MESSAGE.to_owned(),
        ];
        let (version, before): (i64, Option<String>) =
            self.tenants_eval(WRITE, self.tenant_keys(), args).await?;
        Ok(match version {
            -1 => Written::Full,
            -2 => Written::Moved,
            0 => Written::Absent,
            v => Written::Changed(v as u64, before),
        })
    }

    /// The last `limit` audit records, newest first.
    pub async fn tenants_audit(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let keys = self.tenant_keys();
        let client = self.inner.pool.next_connected();
        let client = client.with_options(&admin_call());
        let stop = limit.max(1) as i64 - 1;
        client.lrange(&keys[2], 0, stop).await.map_err(classify)
    }
}
