//! The stores under the limiter, and the limiter over them.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::warn;

use super::{Backend, STARTUP_CONNECT_WAIT, StartError};
use crate::config::Settings;
use crate::domain::{MonotonicClock, SystemClock};
use crate::limiter::Limiter;
use crate::limiter::breaker::BreakerConfig;
use crate::limiter::deny_cache::DenyCache;
use crate::limiter::lease::Leases;
use crate::limiter::top::Top;
use crate::limiter::wait::timer::TokioTimer;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;

/// What [`open_stores`] opened.
pub(super) struct Stores {
    pub(super) store: Arc<dyn Store>,
    /// The Redis handle, kept for shutdown and the invalidation listener.
    pub(super) redis: Option<RedisStore>,
    /// Redis answered within [`STARTUP_CONNECT_WAIT`].
    pub(super) redis_connected: bool,
    /// In front of Redis, the local fallback store.
    pub(super) local: Option<MemoryStore>,
    /// The embedded stores' sweepers, for the caller to tie to shutdown.
    pub(super) sweepers: Vec<JoinHandle<()>>,
}

/// The main store and, in front of Redis, the local fallback store, with
/// the embedded stores' sweepers running.
pub(super) async fn open_stores(backend: Backend, settings: &Settings) -> Stores {
    let mut sweepers = Vec::new();
    // Local fallback only makes sense in front of Redis: the embedded
    // store as the main store is never unreachable. Kept whenever Redis
    // is, since a policy may choose `local` whatever the service's mode
    // (it holds nothing until an outage).
    let local = matches!(backend, Backend::Redis(_)).then(|| {
        let store = MemoryStore::new(Arc::new(SystemClock), settings.memory.max_keys);
        sweepers.push(store.spawn_sweeper(settings.memory.sweep_interval));
        store
    });
    match backend {
        Backend::Memory(store) => {
            sweepers.push(store.spawn_sweeper(settings.memory.sweep_interval));
            Stores {
                store: Arc::new(store),
                redis: None,
                redis_connected: false,
                local,
                sweepers,
            }
        }
        Backend::Redis(store) => {
            let redis_connected = store.wait_connected(STARTUP_CONNECT_WAIT).await;
            if !redis_connected {
                warn!("redis not reachable at startup: serving by the failure policy until it is");
            }
            Stores {
                store: Arc::new(store.clone()),
                redis: Some(store),
                redis_connected,
                local,
                sweepers,
            }
        }
    }
}

/// With a deny cache in front of Redis, the listener that drops cached
/// denials when any instance resets or refunds a key.
pub(super) async fn listen_for_invalidations(
    redis: &RedisStore,
    limiter: &Limiter,
    redis_connected: bool,
    probe_interval: Duration,
) -> Result<Option<JoinHandle<()>>, StartError> {
    let Some(sink) = limiter.invalidation_sink() else {
        return Ok(None);
    };
    let mut listener = redis.spawn_invalidation_listener(sink, probe_interval)?;
    // Like the connection: a healthy instance uses its deny cache from the
    // first request.
    if redis_connected && !listener.wait_subscribed(STARTUP_CONNECT_WAIT).await {
        warn!("not subscribed to the invalidation channel yet: deny cache off until it is");
    }
    Ok(Some(listener.task))
}

/// The limiter over `store`: the breaker, the local fallback, the deny cache.
pub(super) fn build_limiter(
    store: Arc<dyn Store>,
    local: Option<MemoryStore>,
    settings: &Settings,
    probe_interval: Duration,
    metrics: &Arc<Metrics>,
) -> Limiter {
    let breaker = BreakerConfig {
        trial_interval: probe_interval,
        ..settings.breaker
    };
    let mut limiter = Limiter::new(store, settings.failure, metrics.clone())
        .with_breaker(breaker, Arc::new(MonotonicClock::default()))
        .with_waiting(
            settings.limits.bounds.max_waiters,
            settings.limits.bounds.max_waiters_per_key,
            Arc::new(TokioTimer::default()),
        );
    if let Some(local) = local {
        limiter = limiter.with_local_store(local);
    }
    if settings.deny_cache.capacity > 0 {
        let clock = Arc::new(MonotonicClock::default());
        let shared = settings.redis.as_ref().is_some_and(|r| r.legacy_keys);
        let cache = DenyCache::new(settings.deny_cache.capacity, clock);
        limiter = limiter.with_deny_cache(cache.with_shared_inline_buckets(shared));
    }
    // Leasing needs a store shared by instances (the embedded store is
    // already local) and the invalidation channel that voids chunks.
    if settings.limits.max_lease_keys > 0 && settings.redis.is_some() {
        let leases = Leases::new(settings.limits.max_lease_keys, metrics.clone());
        limiter = limiter.with_leases(leases);
    }
    if settings.top.capacity > 0 {
        let clock = Arc::new(MonotonicClock::default());
        let top = Top::new(settings.top.capacity, settings.top.max_sets, clock);
        limiter = limiter.with_top(Arc::new(top));
    }
    limiter
}
