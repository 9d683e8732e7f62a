//! Stores for scenario tests on a controlled clock.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::domain::ManualClock;
use ratekeeper::store::Store;
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::redis::{DEFAULT_MAX_IN_FLIGHT, RedisOptions, RedisSettings, RedisStore};

use super::RedisServer;

/// The settings the Redis tests share: a short timeout and reconnect, one
/// connection, no batching. A test names only what it changes, as
/// `RedisSettings { pool_size: 2, ..redis_settings(url) }`.
pub fn redis_settings(url: impl Into<String>) -> RedisSettings {
    RedisSettings {
        url: url.into(),
        key_prefix: "rk:".into(),
        timeout: Duration::from_secs(2),
        pool_size: 1,
        reconnect_max_delay: Duration::from_millis(100),
        unresponsive_timeout: Duration::from_millis(500),
        probe_interval: Duration::from_millis(250),
        batch_window: Duration::ZERO,
        max_in_flight: DEFAULT_MAX_IN_FLIGHT,
        legacy_keys: false,
        tls: None,
    }
}

/// `ttl_pad_ms`: the manual clock stands still while real time (which Redis
/// expires keys by) runs on, so scenario tests keep keys alive a minute longer.
pub fn redis_options(server: &RedisServer, clock: &ManualClock, ttl_pad_ms: u64) -> RedisOptions {
    RedisOptions {
        settings: redis_settings(server.url()),
        clock: Some(Arc::new(clock.clone())),
        ttl_pad_ms,
    }
}

/// The embedded store on `clock`.
pub fn memory(clock: &ManualClock) -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(Arc::new(clock.clone()), 1_000_000))
}

/// A Redis store on `server`, deciding on `clock`, its scripts loaded.
pub async fn redis(server: &RedisServer, clock: &ManualClock) -> Arc<dyn Store> {
    let redis = RedisStore::connect(redis_options(server, clock, 60_000)).unwrap();
    redis.ping().await.unwrap();
    Arc::new(redis)
}

/// Both stores (embedded and Redis) on one manual clock.
pub async fn stores(server: &RedisServer, clock: &ManualClock) -> Vec<Arc<dyn Store>> {
    let redis = RedisStore::connect(redis_options(server, clock, 60_000)).unwrap();
    redis.ping().await.unwrap();
    vec![
        Arc::new(MemoryStore::new(Arc::new(clock.clone()), 1_000_000)),
        Arc::new(redis),
    ]
}
