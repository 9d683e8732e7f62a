//! `POST /v1/reset` and `POST /v1/refund`, black box, on the embedded store
//! and on a real Redis: the three forms, the answer (a cost-0 check's
//! body), refunds never beyond capacity, a key without state, validation
//! shared with `/v1/check`, and a 503 when the store is down.

use crate::policy_checks;
use crate::support;

use std::time::{Duration, Instant};

use policy_checks::{error, install, limit, policy};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

for_each_store!(app:
    reset_brings_back_full_capacity_in_every_form,
    refund_never_goes_beyond_capacity,
    refund_of_a_key_without_state_is_a_noop,
    validation_is_the_checks,
);

/// `body` with `cost` set (or removed, for `None`).
fn costing(body: &Value, cost: Option<u64>) -> Value {
    let mut body = body.clone();
    let object = body.as_object_mut().unwrap();
    match cost {
        Some(cost) => object.insert("cost".into(), json!(cost)),
        None => object.remove("cost"),
    };
    body
}

/// The three forms on one fresh key, each with a capacity of 3. The
/// windows are a day long: the tests count across requests on the wall
/// clock, and a window's end is epoch-aligned (an hour's came between two
/// requests now and then).
fn forms(app: &TestApp) -> Vec<Value> {
    install(
        app,
        vec![policy(
            "api",
            vec![
                limit("burst", Algorithm::TokenBucket, 1, "1h", Some(3)),
                limit("daily", Algorithm::SlidingLog, 10, "1d", None),
            ],
        )],
    );
    vec![
        json!({"key": unique_key("single"), "limit": 3, "window": "1d", "algorithm": "fixed_window"}),
        json!({"key": unique_key("inline"), "limits": [
            {"name": "tight", "algorithm": "sliding_window", "limit": 3, "window": "1d"},
            {"name": "day", "algorithm": "gcra", "limit": 100, "window": "1d", "burst": 5}
        ]}),
        json!({"policy": "api", "key": unique_key("policy")}),
    ]
}

/// Denied (and so cached by the deny cache, on by default), reset, and
/// allowed at once: the answer is a cost-0 check's, at full capacity.
async fn reset_brings_back_full_capacity_in_every_form(app: &TestApp) {
    for body in forms(app) {
        for _ in 0..3 {
            assert!(app.check(costing(&body, Some(1))).await.1["allowed"] == true);
        }
        for _ in 0..2 {
            let (_, denied) = app.check(costing(&body, Some(1))).await;
            assert_eq!(denied["allowed"], false, "{body}");
        }
        let (status, reset) = app.post("/v1/reset", &body).await;
        assert_eq!(status, 200, "{reset}");
        let (_, look) = app.check(costing(&body, Some(0))).await;
        assert_eq!(reset, look, "the answer of a cost-0 check");
        assert_eq!(reset["allowed"], true);
        assert_eq!(reset["remaining"], 3, "{reset}");
        for _ in 0..3 {
            let (_, again) = app.check(costing(&body, Some(1))).await;
            assert_eq!(again["allowed"], true, "{body}: {again}");
        }
    }
}

async fn refund_never_goes_beyond_capacity(app: &TestApp) {
    for body in forms(app) {
        app.check(costing(&body, Some(2))).await;
        let (status, refunded) = app.post("/v1/refund", &costing(&body, Some(3))).await;
        assert_eq!(status, 200, "{refunded}");
        assert_eq!(refunded["remaining"], 3, "{body}: {refunded}");
        let (_, look) = app.check(costing(&body, Some(0))).await;
        assert_eq!(refunded, look, "the answer of a cost-0 check");
        for _ in 0..3 {
            assert_eq!(app.check(costing(&body, Some(1))).await.1["allowed"], true);
        }
        assert_eq!(app.check(costing(&body, Some(1))).await.1["allowed"], false);
        // The default cost is 1, as for a check.
        let (_, one) = app.post("/v1/refund", &costing(&body, None)).await;
        assert_eq!(
            (one["allowed"].clone(), one["remaining"].clone()),
            (json!(true), json!(1))
        );
    }
}

async fn refund_of_a_key_without_state_is_a_noop(app: &TestApp) {
    for body in forms(app) {
        let (status, refunded) = app.post("/v1/refund", &costing(&body, Some(2))).await;
        assert_eq!(status, 200, "{refunded}");
        assert_eq!(refunded["remaining"], 3, "{refunded}");
        assert_eq!(refunded["reset_after_ms"], 0, "{refunded}");
        let (status, reset) = app.post("/v1/reset", &body).await;
        assert_eq!((status, &reset), (200, &refunded));
    }
}

/// Every invalid body gets the very error `/v1/check` gives it; a reset
/// also refuses a `cost`.
async fn validation_is_the_checks(app: &TestApp) {
    let [single, inline, policy]: [Value; 3] = forms(app).try_into().unwrap();
    let invalid = [
        costing(&single, Some(4)),
        json!({"key": "k", "limit": 0, "window": "1m"}),
        json!({"key": "", "limit": 1, "window": "1m"}),
        json!({"limit": 1, "window": "1m"}),
        json!({"key": "k", "limit": 1, "window": "1m", "cost": -1}),
        json!({"key": "k", "limit": 1, "window": "1m", "limits": []}),
        json!({"policy": "nope", "key": "k"}),
        costing(&policy, Some(4)),
        costing(&inline, Some(4)),
        json!({"key": "k", "limits": [{"limit": 1, "window": "1m"}, {"limit": 2, "window": "1m"}]}),
    ];
    for body in &invalid {
        let (status, want) = app.check(body.clone()).await;
        assert!(status == 422, "{body}: {status} {want}");
        let (status, got) = app.post("/v1/refund", body).await;
        assert_eq!((status, &got), (422, &want), "refund {body}");
        let reset = costing(body, None);
        let (_, want) = app.check(reset.clone()).await;
        let (status, got) = app.post("/v1/reset", &reset).await;
        if want.get("error").is_some() {
            assert_eq!((status, &got), (422, &want), "reset {reset}");
        }
    }
    for body in [&single, &inline, &policy] {
        let (status, got) = app.post("/v1/reset", &costing(body, Some(1))).await;
        assert_eq!(status, 422, "{got}");
        assert_eq!(error(&got).0, "invalid_request");
        assert!(error(&got).1.starts_with("cost:"), "{got}");
    }
    let response = app
        .http
        .post(app.url("/v1/refund"))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}

/// With Redis gone, a reset or refund is a 503 `store_unavailable` within
/// the store's timeout (one call: the script publishes the invalidation
/// itself, so nothing else waits for a dead store), never an answer by the
/// failure policy, and counted.
#[tokio::test]
async fn a_store_outage_is_a_503_not_a_fake_answer() {
    let mut redis = RedisServer::start();
    let settings = settings(Some(&redis.url()));
    let timeout = settings.redis.as_ref().unwrap().timeout;
    // 1.5 timeouts, plus slack for a loaded test machine's scheduling.
    let bound = timeout * 3 / 2 + Duration::from_millis(150);
    let app = TestApp::spawn(settings).await;
    let body = json!({"key": unique_key("down"), "limit": 3, "window": "1h"});
    assert_eq!(app.post("/v1/refund", &body).await.0, 200);
    redis.kill();
    for path in ["/v1/refund", "/v1/reset"] {
        let started = Instant::now();
        let (status, got) = app.post(path, &body).await;
        assert_eq!(status, 503, "{path}: {got}");
        assert_eq!(error(&got).0, "store_unavailable");
        assert!(!error(&got).1.contains("redis"), "no detail: {got}");
        let took = started.elapsed();
        assert!(took < bound, "{path} answered in {took:?}, over {bound:?}");
    }
    // The check itself is still answered, by the failure policy.
    assert_eq!(app.check(body.clone()).await.0, 200);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        "ratekeeper_invalidations_sent_total{result=\"ok\"} 1",
        "ratekeeper_adjustments_total{op=\"refund\",result=\"ok\"} 1",
        "ratekeeper_adjustments_total{op=\"refund\",result=\"error\"} 1",
        "ratekeeper_adjustments_total{op=\"reset\",result=\"error\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

/// Redis frozen until the circuit breaker opened: a reset is refused at
/// once, as documented, with no call to the frozen store (no publish
/// waiting out a timeout either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_breaker_open_a_reset_is_refused_at_once() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(settings(Some(&redis.url()))).await;
    let body = json!({"key": unique_key("open"), "limit": 3, "window": "1h"});
    assert_eq!(app.post("/v1/reset", &body).await.0, 200);
    redis.freeze();
    // A degraded check answered at once: the breaker is open.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let started = Instant::now();
        let (_, got) = app.check(body.clone()).await;
        if got["degraded"] == true && started.elapsed() < Duration::from_millis(20) {
            break;
        }
        assert!(Instant::now() < deadline, "the breaker never opened");
    }
    let started = Instant::now();
    let (status, got) = app.post("/v1/reset", &body).await;
    let took = started.elapsed();
    redis.thaw();
    assert_eq!(status, 503, "{got}");
    // Far below redis.timeout (100 ms), which a call would wait out.
    assert!(took < Duration::from_millis(50), "answered in {took:?}");
}
