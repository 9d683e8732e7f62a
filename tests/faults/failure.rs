//! Redis outages: a dead (SIGKILL) or frozen (SIGSTOP) Redis never hangs a
//! caller, the failure policy answers with `degraded: true`, the circuit
//! breaker opens, readiness drops with a reason, and the service recovers
//! on its own when Redis comes back on the same port with an empty script
//! cache.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings};

const TIMEOUT: Duration = Duration::from_millis(100);
/// How far past the timeout a caller may wait on this noisy 2-core machine.
/// A hang would blow through it by orders of magnitude.
const SLACK: Duration = Duration::from_millis(900);

#[derive(Clone, Copy, Debug)]
enum Outage {
    Killed,
    Frozen,
}

async fn spawn(redis: &RedisServer, mode: &str) -> TestApp {
    let mut config = settings(Some(&redis.url()));
    let r = config.redis.as_mut().unwrap();
    r.timeout = TIMEOUT;
    r.probe_interval = Duration::from_millis(50);
    r.reconnect_max_delay = Duration::from_millis(200);
    // Fail-open runs go through single EVALSHAs, fail-closed runs through the
    // batcher (the default), so both paths meet both kinds of outage.
    if mode == "open" {
        r.batch_window = Duration::ZERO;
    }
    config.failure.mode = match mode {
        "open" => ratekeeper::domain::FailureMode::Open,
        _ => ratekeeper::domain::FailureMode::Closed,
    };
    config.failure.closed_retry_after = Duration::from_millis(1500);
    TestApp::spawn(config).await
}

/// A day: `remaining` is counted across checks on the wall clock, and a
/// sliding window's weighting shifts at its epoch-aligned end (a minute's
/// came between two checks now and then).
fn body() -> Value {
    json!({"key": "outage", "limit": 1000, "window": "1d", "algorithm": "sliding_window"})
}

/// A check, and how long it took.
async fn timed_check(app: &TestApp) -> (Value, Duration) {
    let started = Instant::now();
    let (status, response) = app.check(body()).await;
    assert_eq!(status, 200, "{response}");
    (response, started.elapsed())
}

/// Checks until one is answered by the store again; that answer.
async fn wait_until_recovered(app: &TestApp) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (response, _) = timed_check(app).await;
        if response["degraded"] == false {
            assert_eq!(app.get("/readyz").await.status(), 200);
            return response;
        }
        assert!(Instant::now() < deadline, "did not recover: {response}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn outage_then_recovery(outage: Outage, mode: &str) {
    let mut redis = RedisServer::start();
    let app = spawn(&redis, mode).await;
    let (healthy, _) = timed_check(&app).await;
    assert_eq!(
        (healthy["allowed"].as_bool(), healthy["degraded"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(app.get("/readyz").await.status(), 200);

    match outage {
        Outage::Killed => redis.kill(),
        Outage::Frozen => redis.freeze(),
    }
    for i in 0..5 {
        let (response, took) = timed_check(&app).await;
        assert!(took < TIMEOUT + SLACK, "{outage:?} check {i} took {took:?}");
        assert_eq!(
            response["degraded"], true,
            "{outage:?} check {i}: {response}"
        );
        if mode == "open" {
            assert_eq!(response["allowed"], true);
            assert_eq!(response["retry_after_ms"], 0);
            assert_eq!(response["remaining"], 999, "as for a key never seen");
        } else {
            assert_eq!(response["allowed"], false);
            assert_eq!(response["retry_after_ms"], 1500);
        }
    }
    assert_eq!(
        app.get("/healthz").await.status(),
        200,
        "alive while degraded"
    );
    let readyz = app.get("/readyz").await;
    assert_eq!(readyz.status(), 503, "not ready while degraded");
    let readyz: Value = readyz.json().await.unwrap();
    assert_eq!(readyz["status"], "not_ready");
    // The kind says the cause: a killed Redis refuses connections, a
    // frozen one keeps them and answers nothing.
    let cause = match outage {
        Outage::Killed => "unavailable",
        Outage::Frozen => "timeout",
    };
    assert_eq!(readyz["reason"]["kind"], cause, "{readyz}");
    assert!(!readyz["reason"]["message"].as_str().unwrap().is_empty());
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(&format!(
            "ratekeeper_degraded_total{{failure_mode=\"{mode}\"}} 5"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("ratekeeper_store_up 0"));
    // Five failed calls in a row: a sustained failure, so the breaker opened.
    assert!(
        metrics.contains("ratekeeper_breaker_opened_total 1"),
        "{metrics}"
    );

    match outage {
        // A new, empty server on the same port: the scripts must be reloaded.
        Outage::Killed => redis.restart(),
        Outage::Frozen => redis.thaw(),
    }
    wait_until_recovered(&app).await;
    let readyz: Value = app.get("/readyz").await.json().await.unwrap();
    assert!(readyz.get("reason").is_none(), "{readyz}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("ratekeeper_store_up 1"));
    assert!(
        metrics.contains("ratekeeper_breaker_state{state=\"closed\"} 1"),
        "{metrics}"
    );
    app.stop().await;
}

#[tokio::test]
async fn fails_open_when_redis_is_killed_and_recovers_after_restart() {
    outage_then_recovery(Outage::Killed, "open").await;
}

#[tokio::test]
async fn fails_closed_when_redis_is_killed_and_recovers_after_restart() {
    outage_then_recovery(Outage::Killed, "closed").await;
}

#[tokio::test]
async fn fails_open_when_redis_is_frozen_and_recovers_after_thaw() {
    outage_then_recovery(Outage::Frozen, "open").await;
}

#[tokio::test]
async fn fails_closed_when_redis_is_frozen_and_recovers_after_thaw() {
    outage_then_recovery(Outage::Frozen, "closed").await;
}

#[tokio::test]
async fn starts_without_redis_and_connects_when_it_appears() {
    let mut redis = RedisServer::start();
    redis.kill();
    let app = spawn(&redis, "closed").await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    let readyz = app.get("/readyz").await;
    assert_eq!(readyz.status(), 503);
    // Refused connections, not a slow Redis (a newcomer saw "timeout").
    let readyz: Value = readyz.json().await.unwrap();
    assert_eq!(readyz["reason"]["kind"], "unavailable", "{readyz}");
    let (response, took) = timed_check(&app).await;
    assert!(took < TIMEOUT + SLACK, "took {took:?}");
    assert_eq!(
        (
            response["allowed"].as_bool(),
            response["degraded"].as_bool()
        ),
        (Some(false), Some(true))
    );

    redis.restart();
    let recovered = wait_until_recovered(&app).await;
    // A check that timed out while the server came up may have been
    // applied all the same (its answer was the degraded one), so the count
    // is judged from the first answer Redis gave, not from the limit.
    let first = recovered["remaining"].as_u64().unwrap();
    assert!(first <= 999, "{recovered}");
    let (response, _) = timed_check(&app).await;
    assert_eq!(response["remaining"], first - 1, "counts resume in Redis");
}
