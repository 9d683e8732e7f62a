//! N parallel callers against limit L get exactly L: two instances sharing
//! one Redis (every decision is one atomic script), and one instance on
//! the embedded store (every decision holds its shard's lock).

use crate::support;
use crate::support::StoreExt;
use crate::support::stores::redis_settings;
use ratekeeper::domain::Window;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::{RedisServer, TestApp, settings, unique_key};

const ALGORITHMS: [&str; 5] = [
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "token_bucket",
    "gcra",
];
const REQUESTS: usize = 400;
const LIMIT: u64 = 100;

/// Sends REQUESTS checks on one key at once, alternating between `apps`,
/// and returns how many were allowed.
async fn allowed_of_concurrent_checks(apps: &[Arc<TestApp>], algorithm: &str) -> usize {
    let key = unique_key(algorithm);
    // A day: fixed and sliding windows end on epoch-aligned boundaries, so
    // an hour's could roll over during the test now and then; a day's
    // hardly ever does.
    let body = json!({"key": key, "limit": LIMIT, "window": "1d", "algorithm": algorithm});
    let barrier = Arc::new(tokio::sync::Barrier::new(REQUESTS));
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let app = apps[i % apps.len()].clone();
            let body = body.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let (status, response) = app.check(body).await;
                assert_eq!(status, 200, "{response}");
                assert_eq!(response["degraded"], false, "{response}");
                response["allowed"].as_bool().unwrap()
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap() as usize;
    }
    allowed
}

/// Two instances on one Redis, `batch_window` as given, the deny cache off
/// so every check reaches Redis. Returns the Redis script calls they made.
async fn two_instances_allow_exactly_the_limit(batch_window: Duration) -> u64 {
    let redis = RedisServer::start();
    let mut config = settings(Some(&redis.url()));
    let r = config.redis.as_mut().unwrap();
    // Generous: this test is about counting, not latency, on a busy 2-core box.
    r.timeout = Duration::from_secs(5);
    r.batch_window = batch_window;
    config.deny_cache.capacity = 0;
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    // Each instance's startup read of the runtime entries is a script
    // call too: counted before, so what is left is the checks'.
    let at_start = support::script_calls(&redis).await;
    for algorithm in ALGORITHMS {
        let allowed = allowed_of_concurrent_checks(&apps, algorithm).await;
        assert_eq!(
            allowed, LIMIT as usize,
            "{algorithm}: {REQUESTS} concurrent checks, limit {LIMIT}, batch window {batch_window:?}"
        );
    }
    support::script_calls(&redis).await - at_start
}

/// Every algorithm: REQUESTS concurrent checks over `apps`, exactly LIMIT
/// allowed (also run over TLS, `tls.rs`).
pub(crate) async fn every_algorithm_allows_exactly_the_limit(apps: &[Arc<TestApp>]) {
    for algorithm in ALGORITHMS {
        let allowed = allowed_of_concurrent_checks(apps, algorithm).await;
        assert_eq!(allowed, LIMIT as usize, "{algorithm}: {REQUESTS} checks");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_sharing_redis_allow_exactly_the_limit() {
    let calls = two_instances_allow_exactly_the_limit(Duration::ZERO).await;
    assert_eq!(
        calls,
        (ALGORITHMS.len() * REQUESTS) as u64,
        "one script call per check"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_batching_instances_sharing_redis_allow_exactly_the_limit() {
    let calls = two_instances_allow_exactly_the_limit(Duration::from_micros(200)).await;
    // Proof that batches formed: far fewer calls than checks.
    assert!(
        calls < (ALGORITHMS.len() * REQUESTS / 2) as u64,
        "{calls} script calls for {} checks",
        ALGORITHMS.len() * REQUESTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_store_allows_exactly_the_limit() {
    let apps = [Arc::new(TestApp::spawn(settings(None)).await)];
    for algorithm in ALGORITHMS {
        let allowed = allowed_of_concurrent_checks(&apps, algorithm).await;
        assert_eq!(allowed, LIMIT as usize, "{algorithm}");
    }
}

/// Checks of two limits, all or nothing, at the store level (the HTTP forms
/// for several limits are tested in `tests/api/policies_api.rs`): a tight limit
/// of 100 and a loose one of 150 per day, of different algorithms, every
/// algorithm in both roles.
mod multi_limit {
    use super::*;
    use ratekeeper::domain::{Algorithm, Check, Limit, Rule};
    use ratekeeper::store::Store;
    use ratekeeper::store::memory::MemoryStore;
    use ratekeeper::store::redis::{RedisSettings, RedisStore};

    const TIGHT: u64 = 100;
    const LOOSE: u64 = 150;
    /// A day: the windows' ends are epoch-aligned (see above).
    const DAY_US: u64 = 86_400_000_000;

    /// (tight, loose): each algorithm once in each role.
    pub const PAIRS: [(Algorithm, Algorithm); 5] = [
        (Algorithm::FixedWindow, Algorithm::SlidingLog),
        (Algorithm::SlidingWindow, Algorithm::Gcra),
        (Algorithm::Gcra, Algorithm::TokenBucket),
        (Algorithm::TokenBucket, Algorithm::FixedWindow),
        (Algorithm::SlidingLog, Algorithm::SlidingWindow),
    ];

    fn limit(name: &str, algorithm: Algorithm, limit: u64) -> Limit {
        Limit {
            name: name.into(),
            rule: Rule {
                algorithm,
                limit,
                window: Window::Length(DAY_US),
                burst: limit,
            },
            scope: None,
            level: None,
        }
    }

    fn check(key: &str, limits: Vec<Limit>, cost: u64) -> Check {
        let mut check = Check::multi(key, limits, cost);
        check.policy = Some("api".into());
        check
    }

    /// REQUESTS concurrent two-limit checks on one key, alternating between
    /// `stores`, released together by a barrier; asserts exactly TIGHT were
    /// allowed and the loose limit spent exactly TIGHT (a cost-0 probe of it
    /// alone, in the same policy namespace).
    pub async fn exactly_the_tighter_limit(
        stores: &[Arc<dyn Store>],
        pair: (Algorithm, Algorithm),
    ) {
        let key = unique_key("multi");
        let tight = limit("tight", pair.0, TIGHT);
        let loose = limit("loose", pair.1, LOOSE);
        let c = check(&key, vec![tight, loose.clone()], 1);
        let barrier = Arc::new(tokio::sync::Barrier::new(REQUESTS));
        let tasks: Vec<_> = (0..REQUESTS)
            .map(|i| {
                let store = stores[i % stores.len()].clone();
                let (c, barrier) = (c.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let outcomes = store.check(&c).await.unwrap();
                    outcomes.iter().all(|o| o.allowed)
                })
            })
            .collect();
        let mut allowed = 0;
        for task in tasks {
            allowed += task.await.unwrap() as u64;
        }
        let what = format!("{} tight {} + loose {}", stores[0].name(), pair.0, pair.1);
        assert_eq!(allowed, TIGHT, "{what}: {REQUESTS} concurrent checks");
        let probe = stores[0].check(&check(&key, vec![loose], 0)).await.unwrap();
        assert_eq!(
            probe[0].remaining,
            LOOSE - TIGHT,
            "{what}: loose limit spent"
        );
    }

    /// Two independent stores (two instances: each its own pool) on one
    /// Redis, every pair; returns the script calls Redis served.
    async fn two_redis_instances(batch_window: Duration) -> u64 {
        let redis = RedisServer::start();
        let mut stores: Vec<Arc<dyn Store>> = Vec::new();
        for _ in 0..2 {
            let store = RedisStore::connect(RedisSettings {
                timeout: Duration::from_secs(5),
                pool_size: 4,
                batch_window,
                ..redis_settings(redis.url())
            })
            .unwrap();
            store.ping().await.unwrap();
            stores.push(Arc::new(store));
        }
        for pair in PAIRS {
            exactly_the_tighter_limit(&stores, pair).await;
        }
        support::script_calls(&redis).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_instances_apply_two_limits_exactly() {
        let calls = two_redis_instances(Duration::ZERO).await;
        // One per check, and one per probe.
        assert_eq!(calls, (PAIRS.len() * (REQUESTS + 1)) as u64, "script calls");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_batching_instances_apply_two_limits_exactly() {
        let calls = two_redis_instances(Duration::from_micros(200)).await;
        let checks = PAIRS.len() * (REQUESTS + 1);
        eprintln!("BATCHED two-limit checks: {calls} script calls for {checks} checks");
        assert!(
            calls < (checks / 2) as u64,
            "{calls} script calls for {checks} checks"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_embedded_store_applies_two_limits_exactly() {
        let clock = Arc::new(ratekeeper::domain::SystemClock);
        let stores: Vec<Arc<dyn Store>> = vec![Arc::new(MemoryStore::new(clock, 100_000))];
        for pair in PAIRS {
            exactly_the_tighter_limit(&stores, pair).await;
        }
    }
}
