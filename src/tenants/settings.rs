//! `[tenants]`'s settings, defined beside what they configure (config reads
//! them, as it does the Redis store's), so the runtime entries do not
//! depend on the config module.

use std::path::PathBuf;
use std::time::Duration;

/// `[tenants]`: overrides, blocks and exemptions set at runtime by API.
#[derive(Debug, Clone)]
pub struct TenantsSettings {
    /// The embedded store's file of them; `None`: kept in memory only
    /// (lost at a restart). With Redis they live in Redis.
    pub file: Option<PathBuf>,
    /// The most entries of every kind in all.
    pub max_entries: usize,
    /// The most overrides of one policy.
    pub max_per_policy: usize,
    /// How often each instance asks Redis for the entries' version, to
    /// catch up a change it was not told of; and sweeps expired entries.
    pub poll_interval: Duration,
}
