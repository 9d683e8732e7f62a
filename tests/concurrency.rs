//! N parallel callers against limit L get exactly L: two instances sharing
//! one Redis (every decision is one atomic script), and one instance on
//! the embedded store (every decision holds its shard's lock).

mod support;

use std::sync::Arc;

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
    // A window long enough that it cannot roll over during the test.
    let body = json!({"key": key, "limit": LIMIT, "window": "1h", "algorithm": algorithm});
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_sharing_redis_allow_exactly_the_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut config = settings(Some(&url));
    let r = config.redis.as_mut().unwrap();
    // Generous: this test is about counting, not latency, on a busy 2-core box.
    r.timeout = std::time::Duration::from_secs(5);
    // One EVALSHA per check here; the next test covers the batcher.
    r.batch_window = std::time::Duration::ZERO;
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    for algorithm in ALGORITHMS {
        let allowed = allowed_of_concurrent_checks(&apps, algorithm).await;
        assert_eq!(
            allowed, LIMIT as usize,
            "{algorithm}: {REQUESTS} concurrent checks, limit {LIMIT}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_batching_instances_sharing_redis_allow_exactly_the_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut config = settings(Some(&url));
    let r = config.redis.as_mut().unwrap();
    r.timeout = std::time::Duration::from_secs(5);
    r.batch_window = std::time::Duration::from_micros(200);
    // Without the deny cache every check reaches Redis, so batches fill.
    config.deny_cache_capacity = 0;
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    for algorithm in ALGORITHMS {
        let allowed = allowed_of_concurrent_checks(&apps, algorithm).await;
        assert_eq!(allowed, LIMIT as usize, "{algorithm}: batched");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_store_allows_exactly_the_limit() {
    let apps = [Arc::new(TestApp::spawn(settings(None)).await)];
    for algorithm in ALGORITHMS {
        let allowed = allowed_of_concurrent_checks(&apps, algorithm).await;
        assert_eq!(allowed, LIMIT as usize, "{algorithm}");
    }
}
