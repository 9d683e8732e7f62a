//! `failure.mode = "local"`: while Redis is down each instance answers from
//! its own embedded store with the same algorithms, so an outage admits at
//! most `limit` per instance (`limit × instances` in all) instead of
//! everything (open) or nothing (closed), still saying `degraded: true`.
//! When Redis is back its state is authoritative again.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratekeeper::domain::FailureMode;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

const REQUESTS: usize = 400;
const LIMIT: u64 = 100;
const ALGORITHMS: [&str; 5] = [
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "token_bucket",
    "gcra",
];

async fn spawn(redis: &RedisServer) -> Arc<TestApp> {
    let mut config = settings(Some(&redis.url()));
    let r = config.redis.as_mut().unwrap();
    // Long enough that 400 checks at once on a busy 2-core box do not time
    // out while Redis is up (a timeout would be answered locally too).
    r.timeout = Duration::from_secs(1);
    r.probe_interval = Duration::from_millis(50);
    r.reconnect_max_delay = Duration::from_millis(200);
    config.failure.mode = FailureMode::Local;
    config.deny_cache.capacity = 0;
    Arc::new(TestApp::spawn(config).await)
}

/// A day: the bursts are counted exactly on the wall clock, and the
/// windows' ends are epoch-aligned (an hour's fell inside one now and then).
fn body(key: &str, algorithm: &str) -> Value {
    json!({"key": key, "limit": LIMIT, "window": "1d", "algorithm": algorithm})
}

/// REQUESTS checks on one key at once, alternating between `apps`; returns,
/// per app, (allowed, degraded).
async fn burst(apps: &[Arc<TestApp>], key: &str, algorithm: &str) -> Vec<(usize, usize)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(REQUESTS));
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let app = apps[i % apps.len()].clone();
            let body = body(key, algorithm);
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let (status, response) = app.check(body).await;
                assert_eq!(status, 200, "{response}");
                (
                    i % 2,
                    response["allowed"].as_bool().unwrap(),
                    response["degraded"].as_bool().unwrap(),
                )
            })
        })
        .collect();
    let mut per_app = vec![(0, 0); apps.len()];
    for task in tasks {
        let (app, allowed, degraded) = task.await.unwrap();
        per_app[app].0 += allowed as usize;
        per_app[app].1 += degraded as usize;
    }
    per_app
}

async fn wait_until_recovered(app: &TestApp) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, response) = app.check(body(&unique_key("probe"), "gcra")).await;
        if response["degraded"] == false {
            return;
        }
        assert!(Instant::now() < deadline, "did not recover: {response}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_under_load_each_instance_limits_on_its_own() {
    let mut redis = RedisServer::start();
    let apps = [spawn(&redis).await, spawn(&redis).await];
    let healthy = burst(&apps, &unique_key("before"), "sliding_window").await;
    assert_eq!(
        healthy.iter().map(|a| a.0).sum::<usize>(),
        LIMIT as usize,
        "shared limit while Redis is up: {healthy:?}"
    );
    assert!(healthy.iter().all(|a| a.1 == 0), "{healthy:?}");

    redis.kill();
    let mut outage_keys = Vec::new();
    for algorithm in ALGORITHMS {
        let key = unique_key(algorithm);
        let per_app = burst(&apps, &key, algorithm).await;
        for (app, (allowed, degraded)) in per_app.iter().enumerate() {
            assert_eq!(
                *degraded,
                REQUESTS / 2,
                "{algorithm}: every answer of instance {app} is degraded"
            );
            assert_eq!(
                *allowed, LIMIT as usize,
                "{algorithm}: instance {app} admits its own limit, no more"
            );
        }
        outage_keys.push((key, algorithm));
    }
    let metrics = apps[0].get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(&format!(
            "ratekeeper_degraded_total{{failure_mode=\"local\"}} {}",
            ALGORITHMS.len() * REQUESTS / 2
        )),
        "{metrics}"
    );

    // Back, empty (no persistence): Redis's state is authoritative again,
    // so a key limited locally during the outage starts over there.
    redis.restart();
    for app in &apps {
        wait_until_recovered(app).await;
    }
    for (key, algorithm) in &outage_keys {
        let (_, response) = apps[0].check(body(key, algorithm)).await;
        assert_eq!(
            (
                response["allowed"].as_bool(),
                response["degraded"].as_bool(),
                response["remaining"].as_u64()
            ),
            (Some(true), Some(false), Some(LIMIT - 1)),
            "{algorithm}: {response}"
        );
    }
    let recovered = burst(&apps, &unique_key("after"), "gcra").await;
    assert_eq!(
        recovered.iter().map(|a| a.0).sum::<usize>(),
        LIMIT as usize,
        "{recovered:?}"
    );
    assert!(recovered.iter().all(|a| a.1 == 0), "{recovered:?}");
}
