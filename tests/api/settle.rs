//! `POST /v1/settle`, black box, on the embedded store and on a real
//! Redis: an LLM gateway's flow (a check of an estimate, then the true
//! cost above or below it) in the three forms, the 422s naming their
//! field, and on one Redis two instances: a settle through one ends the
//! denial the other had cached.

use crate::policy_checks;
use crate::support;

use std::time::{Duration, Instant};

use policy_checks::{error, install, limit, policy};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

for_each_store!(app:
    a_gateway_settles_below_and_above_its_estimate,
    every_form_settles_and_answers_like_a_look,
    bad_settles_are_422_naming_the_field,
);

/// `body` with `fields` added.
fn with(body: &Value, fields: Value) -> Value {
    let mut body = body.clone();
    for (name, value) in fields.as_object().unwrap() {
        body[name] = value.clone();
    }
    body
}

/// 1 000 tokens a minute for one API key: the gateway checks each
/// completion with its estimate, then settles with what it used.
async fn a_gateway_settles_below_and_above_its_estimate(app: &TestApp) {
    let key = unique_key("gateway");
    let body = json!({"key": key, "limit": 1000, "window": "1m", "algorithm": "token_bucket"});
    let (_, first) = app.check(with(&body, json!({"cost": 400}))).await;
    assert_eq!(
        (first["allowed"].as_bool(), first["remaining"].as_u64()),
        (Some(true), Some(600))
    );
    // Used 150 of the 400 reserved: 250 come back.
    let (status, settled) = app
        .post(
            "/v1/settle",
            &with(&body, json!({"reserved": 400, "actual": 150})),
        )
        .await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(settled["allowed"], true);
    assert!(settled["remaining"].as_u64().unwrap() >= 850, "{settled}");
    let (_, second) = app.check(with(&body, json!({"cost": 500}))).await;
    assert_eq!(second["allowed"], true, "{second}");
    // Used 1 500 of the 500 reserved: the key owes about 650 tokens, and
    // checks are denied until refills pay them back.
    let (status, over) = app
        .post(
            "/v1/settle",
            &with(&body, json!({"reserved": 500, "actual": 1500})),
        )
        .await;
    assert_eq!(status, 200, "{over}");
    assert_eq!(
        (over["allowed"].as_bool(), over["remaining"].as_u64()),
        (Some(false), Some(0)),
        "{over}"
    );
    let retry = over["retry_after_ms"].as_u64().unwrap();
    assert!(
        (38_000..=40_000).contains(&retry),
        "650 tokens at 60 ms each: {over}"
    );
    let (_, denied) = app.check(with(&body, json!({"cost": 1}))).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    assert!(
        denied["retry_after_ms"].as_u64().unwrap() + 100 >= retry,
        "{denied}"
    );
}

/// The three forms, each with a capacity of 3: a settle above the
/// reservation takes every limit past its capacity, and one below gives
/// back; the answer is a cost-0 check's body in the form's shape.
async fn every_form_settles_and_answers_like_a_look(app: &TestApp) {
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
    let forms = [
        json!({"key": unique_key("single"), "limit": 3, "window": "1d", "algorithm": "fixed_window"}),
        json!({"key": unique_key("inline"), "limits": [
            {"name": "tight", "algorithm": "sliding_window", "limit": 3, "window": "1d"},
            {"name": "day", "algorithm": "gcra", "limit": 100, "window": "1d", "burst": 5}
        ]}),
        json!({"policy": "api", "key": unique_key("policy")}),
    ];
    for body in forms {
        assert_eq!(
            app.check(with(&body, json!({"cost": 2}))).await.1["allowed"],
            true
        );
        let (status, over) = app
            .post(
                "/v1/settle",
                &with(&body, json!({"reserved": 2, "actual": 5})),
            )
            .await;
        assert_eq!(status, 200, "{over}");
        assert_eq!(over["allowed"], false, "{body}: 5 of 3 used: {over}");
        let (_, look) = app.check(with(&body, json!({"cost": 0}))).await;
        assert_eq!(
            untimed(over),
            untimed(look),
            "{body}: the answer is a look's"
        );
        // Back under: 5 used, 3 of them given back.
        let (status, under) = app
            .post(
                "/v1/settle",
                &with(&body, json!({"reserved": 3, "actual": 0})),
            )
            .await;
        assert_eq!(status, 200, "{under}");
        assert_eq!(under["allowed"], true, "{body}: 2 of 3 used: {under}");
        assert_eq!(
            app.check(with(&body, json!({"cost": 1}))).await.1["allowed"],
            true,
            "{body}"
        );
    }
}

/// `answer` without its times (`*_ms`), which a real clock moves between
/// two requests.
fn untimed(mut answer: Value) -> Value {
    match &mut answer {
        Value::Object(fields) => {
            fields.retain(|name, _| !name.ends_with("_ms"));
            for value in fields.values_mut() {
                *value = untimed(value.take());
            }
        }
        Value::Array(items) => {
            for item in items {
                *item = untimed(item.take());
            }
        }
        _ => {}
    }
    answer
}

async fn bad_settles_are_422_naming_the_field(app: &TestApp) {
    let body = json!({"key": unique_key("bad"), "limit": 10, "window": "1m"});
    let cases = [
        (json!({"actual": 5}), "reserved"),
        (json!({"reserved": 5}), "actual"),
        (json!({"reserved": 5, "actual": 1001}), "actual"),
        (json!({"reserved": 11, "actual": 5}), "reserved"),
        (json!({"reserved": 5, "actual": -1}), "actual"),
        (json!({"reserved": 5, "actual": 2.5}), "actual"),
        (json!({"reserved": 5, "actual": 7, "cost": 5}), "cost"),
        (
            json!({"reserved": 5, "actual": 7, "wait_ms": 100}),
            "wait_ms",
        ),
    ];
    for (fields, field) in cases {
        let (status, answer) = app.post("/v1/settle", &with(&body, fields.clone())).await;
        assert_eq!(status, 422, "{fields}: {answer}");
        let (code, message) = error(&answer);
        assert_eq!(code, "invalid_request", "{fields}");
        assert!(
            message.starts_with(field) || message.contains(&format!("`{field}`")),
            "{fields}: {message}"
        );
    }
    // The cap is 100 × the smallest limit of the check: 1 000 here.
    let (status, answer) = app
        .post(
            "/v1/settle",
            &with(&body, json!({"reserved": 5, "actual": 1000})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    // The check's own validation still applies, as for /v1/check.
    let (status, answer) = app
        .post(
            "/v1/settle",
            &json!({"key": "", "limit": 10, "window": "1m", "reserved": 1, "actual": 1}),
        )
        .await;
    assert_eq!(
        (status, error(&answer).0),
        (422, "invalid_request"),
        "{answer}"
    );
}

/// Two instances on one Redis: a denial A cached ends when B settles below
/// the reservation (the script publishes the key), not at its retry-after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_through_one_instance_ends_the_others_cached_denial() {
    let server = RedisServer::start();
    let a = TestApp::spawn(settings(Some(&server.url()))).await;
    let b = TestApp::spawn(settings(Some(&server.url()))).await;
    let body =
        json!({"key": unique_key("two"), "limit": 5, "window": "1d", "algorithm": "fixed_window"});
    assert_eq!(
        a.check(with(&body, json!({"cost": 5}))).await.1["allowed"],
        true
    );
    for _ in 0..2 {
        assert_eq!(
            a.check(with(&body, json!({"cost": 1}))).await.1["allowed"],
            false
        );
    }
    let (status, settled) = b
        .post(
            "/v1/settle",
            &with(&body, json!({"reserved": 5, "actual": 2})),
        )
        .await;
    assert_eq!(
        (status, &settled["allowed"]),
        (200, &json!(true)),
        "{settled}"
    );
    let started = Instant::now();
    loop {
        if a.check(with(&body, json!({"cost": 0}))).await.1["allowed"] == true {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "A still denies");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        a.check(with(&body, json!({"cost": 3}))).await.1["allowed"],
        true
    );
}
