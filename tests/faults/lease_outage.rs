//! Concurrency leases while Redis is down: no answer hands out a lease that
//! no store holds. `failure.mode = "open"` admits without a lease (nothing
//! to release) and a release is a 503; `"local"` takes real leases in the
//! instance's own store, and a release frees them there.

use crate::support;

use std::time::Duration;

use ratekeeper::domain::FailureMode;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

async fn spawn(redis: &RedisServer, mode: FailureMode) -> TestApp {
    let mut config = settings(Some(&redis.url()));
    let r = config.redis.as_mut().unwrap();
    r.timeout = Duration::from_millis(300);
    r.probe_interval = Duration::from_millis(50);
    r.reconnect_max_delay = Duration::from_millis(200);
    config.failure.mode = mode;
    TestApp::spawn(config).await
}

fn with_lease(body: &Value, lease: &str) -> Value {
    let mut body = body.clone();
    body["lease"] = json!(lease);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_open_admits_without_a_lease() {
    let mut redis = RedisServer::start();
    let app = spawn(&redis, FailureMode::Open).await;
    let body = json!({"key": unique_key("open"), "algorithm": "concurrency", "limit": 1, "lease_ttl": "1m"});
    let (_, held) = app.check(body.clone()).await;
    let lease = held["lease"]["id"].as_str().unwrap().to_string();
    redis.kill();
    for _ in 0..3 {
        let (status, answer) = app.check(body.clone()).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            (&answer["allowed"], &answer["degraded"], answer.get("lease")),
            (&json!(true), &json!(true), None),
            "admitted by the policy, with no lease to release: {answer}"
        );
    }
    let (status, answer) = app.post("/v1/release", &with_lease(&body, &lease)).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "store_unavailable", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_local_leases_from_the_local_store_and_releases_there() {
    let mut redis = RedisServer::start();
    let app = spawn(&redis, FailureMode::Local).await;
    redis.kill();
    let body = json!({"key": unique_key("local"), "algorithm": "concurrency", "limit": 2, "lease_ttl": "1m"});
    let mut leases = Vec::new();
    for _ in 0..2 {
        let (_, answer) = app.check(body.clone()).await;
        assert_eq!(
            (&answer["allowed"], &answer["degraded"]),
            (&json!(true), &json!(true)),
            "{answer}"
        );
        leases.push(answer["lease"]["id"].as_str().unwrap().to_string());
    }
    let (_, full) = app.check(body.clone()).await;
    assert_eq!(
        (&full["allowed"], full.get("lease")),
        (&json!(false), None),
        "the local store's limit: {full}"
    );
    let (status, released) = app
        .post("/v1/release", &with_lease(&body, &leases[0]))
        .await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(
        (&released["released"], &released["degraded"]),
        (&json!(true), &json!(true)),
        "{released}"
    );
    let (_, again) = app.check(body.clone()).await;
    assert_eq!(again["allowed"], true, "the freed local slot: {again}");
    assert!(again["lease"]["id"].is_string(), "{again}");
    // A lease no store holds is still an outage's 503, not `released: false`.
    let (status, answer) = app
        .post("/v1/release", &with_lease(&body, &"0".repeat(32)))
        .await;
    assert_eq!(status, 503, "{answer}");
}

/// Issue 27 D3: acquires written to a frozen Redis run when it wakes, after
/// their callers were answered (degraded, without a lease). Each instance
/// releases them once Redis answers again, however long the freeze: 12
/// freezes of 3 s, longer than the old guard's two tries a second apart, and
/// not one lease is left. (20 freezes took 77-107 s, the longest test on
/// each server of the matrix, for CI's 30-minute budget.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_queued_in_a_frozen_redis_are_released_after_it_wakes() {
    let redis = RedisServer::start();
    let apps = [
        spawn(&redis, FailureMode::Open).await,
        spawn(&redis, FailureMode::Open).await,
    ];
    let mut leaked = Vec::new();
    for run in 0..12 {
        // Both breakers closed, so the acquires below are really sent.
        for app in &apps {
            wait_for_store(app).await;
        }
        let body = json!({"key": unique_key("frozen"), "algorithm": "concurrency",
                          "limit": 5, "lease_ttl": "1h"});
        redis.freeze();
        let answers =
            futures_util::future::join_all((0..8).map(|i| apps[i % 2].check(body.clone()))).await;
        for (status, answer) in &answers {
            assert_eq!(status, &200, "{answer}");
            assert_eq!(
                (&answer["degraded"], answer.get("lease")),
                (&json!(true), None),
                "{answer}"
            );
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        redis.thaw();
        if !all_free(&apps[0], &body, Duration::from_secs(8)).await {
            leaked.push(run);
        }
    }
    assert!(leaked.is_empty(), "leases left held after runs {leaked:?}");
}

/// Until a check of another key is answered by Redis on `app`.
async fn wait_for_store(app: &TestApp) {
    let probe = json!({"key": unique_key("probe"), "limit": 1000, "window": "1h"});
    for _ in 0..200 {
        if app.check(probe.clone()).await.1["degraded"] == json!(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the store never answered again");
}

/// Whether every slot of `body`'s key is free again within `within`.
async fn all_free(app: &TestApp, body: &Value, within: Duration) -> bool {
    let mut look = body.clone();
    look["cost"] = json!(0);
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        let (_, answer) = app.check(look.clone()).await;
        if answer["degraded"] == json!(false) && answer["remaining"] == body["limit"] {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
