//! N parallel callers against limit L get exactly L: two instances sharing
//! one Redis (every decision is one atomic script), and one instance on
//! the embedded store (every decision holds its shard's lock).

mod support;

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::InfoKind;

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

/// Two instances on one Redis, `batch_window` as given, the deny cache off
/// so every check reaches Redis. Returns the Redis script calls they made.
async fn two_instances_allow_exactly_the_limit(batch_window: Duration) -> u64 {
    let redis = RedisServer::start();
    let mut config = settings(Some(&redis.url()));
    let r = config.redis.as_mut().unwrap();
    // Generous: this test is about counting, not latency, on a busy 2-core box.
    r.timeout = Duration::from_secs(5);
    r.batch_window = batch_window;
    config.deny_cache_capacity = 0;
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    for algorithm in ALGORITHMS {
        let allowed = allowed_of_concurrent_checks(&apps, algorithm).await;
        assert_eq!(
            allowed, LIMIT as usize,
            "{algorithm}: {REQUESTS} concurrent checks, limit {LIMIT}, batch window {batch_window:?}"
        );
    }
    script_calls(&redis).await
}

/// EVALSHA and EVAL calls Redis has served (commandstats also counts the
/// commands scripts run inside, so only the entry points are summed).
async fn script_calls(redis: &RedisServer) -> u64 {
    let client = Builder::from_config(Config::from_url(&redis.url()).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    let info: String = client.info(Some(InfoKind::CommandStats)).await.unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
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
