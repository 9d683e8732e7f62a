//! The Redis store's own counts, brought up to date when `/metrics` is
//! read.

use prometheus::Registry;

use super::family::SyncedCounter;

pub struct RedisMetrics {
    /// Connections replaced because they stopped answering.
    pub connections_replaced: SyncedCounter,
    /// Script calls made for checks.
    pub check_calls: SyncedCounter,
}

impl RedisMetrics {
    pub fn register(registry: &Registry) -> RedisMetrics {
        RedisMetrics {
            connections_replaced: SyncedCounter::register(
                registry,
                "ratekeeper_redis_connections_replaced_total",
                "Redis connections replaced because they stopped answering (a call timed out and a \
                 PING on the same connection got no reply within redis.unresponsive_timeout): a \
                 silently dead path, or a frozen Redis.",
            ),
            check_calls: SyncedCounter::register(
                registry,
                "ratekeeper_redis_check_calls_total",
                "Redis script calls that decided checks: one per check sent alone, one per \
                 micro-batch of checks. ratekeeper_store_duration_seconds_count over this is the \
                 mean number of checks a call carried.",
            ),
        }
    }
}
