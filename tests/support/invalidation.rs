//! Service instances with a deny cache and an invalidation subscriber,
//! each with its own Redis clients, for the invalidation tests.

use super::limiter_ext::LimiterExt;
use super::stores::redis_settings;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratekeeper::deny_cache::DenyCache;
use ratekeeper::domain::{Algorithm, Check, MonotonicClock};
use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
use ratekeeper::metrics::Metrics;
use ratekeeper::store::redis::{DEFAULT_MAX_IN_FLIGHT, RedisSettings, RedisStore};

use super::{check, unique_key};

/// One service instance: its own Redis clients, deny cache and subscriber.
pub struct Instance {
    pub limiter: Arc<Limiter>,
    pub metrics: Arc<Metrics>,
    pub store: RedisStore,
    listener: tokio::task::JoinHandle<()>,
    prober: tokio::task::JoinHandle<()>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.listener.abort();
        self.prober.abort();
    }
}

pub fn options(url: String) -> RedisSettings {
    RedisSettings {
        timeout: Duration::from_secs(1),
        ..redis_settings(url)
    }
}

/// An instance whose subscription is up.
pub async fn instance(url: String) -> Instance {
    let instance = instance_unsubscribed(url).await;
    let up = || !instance.limiter.deny_cache_suspended();
    eventually(Duration::from_secs(10), "subscribed", up).await;
    instance
}

/// An instance whose subscriber was started, subscribed or not.
pub async fn instance_unsubscribed(url: String) -> Instance {
    let store = RedisStore::connect(options(url)).unwrap();
    assert!(store.wait_connected(Duration::from_secs(10)).await);
    let metrics = Arc::new(Metrics::new());
    let policy = FailurePolicy {
        mode: FailureMode::Closed,
        closed_retry_after: Duration::from_secs(1),
    };
    let cache = DenyCache::new(1_000, Arc::new(MonotonicClock::default()));
    let limiter = Arc::new(
        Limiter::new(Arc::new(store.clone()), policy, metrics.clone()).with_deny_cache(cache),
    );
    limiter.probe().await;
    // As in the service: the prober notices when Redis is back.
    let prober = limiter.spawn_prober(Duration::from_millis(100));
    let sink = limiter.invalidation_sink().expect("a deny cache");
    let listener = store
        .spawn_invalidation_listener(sink, Duration::from_millis(100))
        .unwrap();
    Instance {
        limiter,
        metrics,
        store,
        listener: listener.task,
        prober,
    }
}

/// One unit a day: the second check is denied until the day ends. A fixed
/// window is epoch-aligned and these checks run on the wall clock: with a
/// minute's window, the checks of [`deny_and_cache`] straddled a minute's
/// end now and then and the second was allowed (issue 27). A day's end
/// falls inside a test run hardly ever.
pub fn one_a_day(key: &str) -> Check {
    check(key, Algorithm::FixedWindow, 1, "1d", 1)
}

/// Spends the one unit, gets denied, and proves the denial is cached: the
/// third check is answered without the store.
pub async fn deny_and_cache(a: &Instance, check: &Check) {
    assert!(a.limiter.check(check).await.unwrap().allowed);
    assert!(!a.limiter.check(check).await.unwrap().allowed);
    let hits = a.metrics.deny_cache.hits.get();
    assert!(!a.limiter.check(check).await.unwrap().allowed);
    assert_eq!(
        a.metrics.deny_cache.hits.get(),
        hits + 1,
        "answered from the cache"
    );
}

/// Polls `done` every 10 ms without blocking the runtime.
pub async fn eventually(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (up to 10 s) until `a`'s subscription is up and stays so, with no
/// further loss counted, for 300 ms: a reconnect the listener forced (or
/// fred's own) may cost one more round after it first came back.
pub async fn settled(a: &Instance) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lost = a.metrics.invalidations.subscription_lost.get();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = a.metrics.invalidations.subscription_lost.get();
        if now == lost && !a.limiter.deny_cache_suspended() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the subscription never settled (lost {now} times)"
        );
        lost = now;
    }
}

pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}
