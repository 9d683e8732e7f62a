//! `POST /v1/settle`, black box, on the embedded store and on a real
//! Redis: an LLM gateway's flow (a check of an estimate that asks for a
//! reservation, then the true cost above or below it) in the three forms;
//! a settle applied once (the same again changes nothing, another `actual`
//! is 409); the old body 422 naming `reservation`; batches; and on one
//! Redis two instances: a reservation made on A settled on B, which ends
//! the denial A had cached.

use crate::policy_checks;
use crate::support;

use std::time::{Duration, Instant};

use policy_checks::{error, install, limit, policy};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

for_each_store!(app:
    a_gateway_settles_below_and_above_its_estimate,
    every_form_settles_once_and_answers_like_a_look,
    bad_settles_are_422_naming_the_field,
    only_an_allowed_check_gets_a_reservation,
    batch_items_get_reservations,
    a_reload_between_check_and_settle,
);

/// `body` with `fields` added.
pub fn with(body: &Value, fields: Value) -> Value {
    let mut body = body.clone();
    for (name, value) in fields.as_object().unwrap() {
        body[name] = value.clone();
    }
    body
}

/// A check of `body` at `cost` asking for a reservation of 10 minutes:
/// its answer, and the reservation's id if it got one.
pub async fn reserve(app: &TestApp, body: &Value, cost: u64) -> (Value, Option<String>) {
    let (status, answer) = app
        .check(with(body, json!({"cost": cost, "reservation_ttl": "10m"})))
        .await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["reservation"]["id"].as_str().map(str::to_owned);
    if id.is_some() {
        assert_eq!(answer["reservation"]["expires_in_ms"], 600_000, "{answer}");
    }
    (answer, id)
}

/// Settles reservation `id` as `actual`.
pub async fn settle(app: &TestApp, id: &str, actual: u64) -> (u16, Value) {
    app.post("/v1/settle", &json!({"reservation": id, "actual": actual}))
        .await
}

/// 1 000 tokens a minute for one API key: the gateway checks each
/// completion with its estimate, then settles with what it used.
async fn a_gateway_settles_below_and_above_its_estimate(app: &TestApp) {
    let key = unique_key("gateway");
    let body = json!({"key": key, "limit": 1000, "window": "1m", "algorithm": "token_bucket"});
    let (first, id) = reserve(app, &body, 400).await;
    assert_eq!(
        (first["allowed"].as_bool(), first["remaining"].as_u64()),
        (Some(true), Some(600))
    );
    // Used 150 of the 400 reserved: 250 come back.
    let (status, settled) = settle(app, &id.unwrap(), 150).await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(settled["allowed"], true);
    assert!(settled["remaining"].as_u64().unwrap() >= 850, "{settled}");
    let (second, id) = reserve(app, &body, 500).await;
    assert_eq!(second["allowed"], true, "{second}");
    // Used 1 500 of the 500 reserved: the key owes about 650 tokens, and
    // checks are denied until refills pay them back.
    let (status, over) = settle(app, &id.unwrap(), 1500).await;
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
/// reservation takes every limit past its capacity, the same settle again
/// changes nothing, another `actual` is 409; one below gives back; the
/// answer is a cost-0 check's body in the form's shape.
async fn every_form_settles_once_and_answers_like_a_look(app: &TestApp) {
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
        let (answer, id) = reserve(app, &body, 2).await;
        assert_eq!(answer["allowed"], true, "{answer}");
        let id = id.unwrap();
        let (status, over) = settle(app, &id, 5).await;
        assert_eq!(status, 200, "{over}");
        assert_eq!(over["allowed"], false, "{body}: 5 of 3 used: {over}");
        let (_, look) = app.check(with(&body, json!({"cost": 0}))).await;
        assert_eq!(
            untimed(over.clone()),
            untimed(look.clone()),
            "{body}: the answer is a look's"
        );
        // Again: 200, nothing changes.
        let (status, again) = settle(app, &id, 5).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(
            untimed(again),
            untimed(look.clone()),
            "{body}: settled once"
        );
        // Another actual: 409, nothing changes.
        let (status, conflict) = settle(app, &id, 0).await;
        assert_eq!(
            (status, error(&conflict).0),
            (409, "reservation_settled"),
            "{conflict}"
        );
        let (_, after) = app.check(with(&body, json!({"cost": 0}))).await;
        assert_eq!(
            untimed(after),
            untimed(look),
            "{body}: the 409 changed nothing"
        );
        // Below the reservation, on a fresh key: 3 reserved, 0 used.
        let mut fresh = body.clone();
        fresh["key"] = json!(unique_key("fresh"));
        let (full, id) = reserve(app, &fresh, 3).await;
        assert_eq!(full["remaining"], 0, "{full}");
        let (status, under) = settle(app, &id.unwrap(), 0).await;
        assert_eq!(status, 200, "{under}");
        assert_eq!(under["remaining"], 3, "{fresh}: all 3 back: {under}");
    }
}

/// `answer` without its times (`*_ms`), which a real clock moves between
/// two requests.
pub fn untimed(mut answer: Value) -> Value {
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
    let (_, id) = reserve(app, &body, 5).await;
    let id = id.unwrap();
    let cases = [
        // The body of earlier versions: refused, naming the new field.
        (
            with(&body, json!({"reserved": 5, "actual": 0})),
            "reservation",
        ),
        (json!({"actual": 5}), "reservation"),
        (json!({"reservation": id}), "actual"),
        (json!({"reservation": id, "actual": 1001}), "actual"),
        (json!({"reservation": id, "actual": -1}), "actual"),
        (json!({"reservation": id, "actual": 2.5}), "actual"),
        (
            json!({"reservation": id, "actual": 1, "reserved": 5}),
            "reserved",
        ),
        (json!({"reservation": id, "actual": 1, "key": "k"}), "key"),
    ];
    for (fields, field) in cases {
        let (status, answer) = app.post("/v1/settle", &fields).await;
        assert_eq!(status, 422, "{fields}: {answer}");
        let (code, message) = error(&answer);
        assert_eq!(code, "invalid_request", "{fields}");
        assert!(
            message.starts_with(field) || message.contains(&format!("`{field}`")),
            "{fields}: {message}"
        );
    }
    // The cap is 100 × the smallest limit of the check: 1 000 here.
    let (status, answer) = settle(app, &id, 1000).await;
    assert_eq!(status, 200, "{answer}");
    // reservation_ttl: bounded, never with wait_ms, never on a check that
    // only leases, never on a reset.
    let concurrency =
        json!({"key": unique_key("cc"), "limit": 2, "algorithm": "concurrency", "lease_ttl": "1m"});
    let cases = [
        (
            "/v1/check",
            with(&body, json!({"reservation_ttl": "2h"})),
            "1h",
        ),
        (
            "/v1/check",
            with(&body, json!({"reservation_ttl": "10m", "wait_ms": 100})),
            "wait_ms",
        ),
        (
            "/v1/check",
            with(&concurrency, json!({"reservation_ttl": "10m"})),
            "concurrency",
        ),
        (
            "/v1/reset",
            with(&body, json!({"reservation_ttl": "10m"})),
            "only a check",
        ),
        (
            "/v1/refund",
            with(&body, json!({"reservation_ttl": "10m"})),
            "only a check",
        ),
    ];
    for (path, fields, says) in cases {
        let (status, answer) = app.post(path, &fields).await;
        assert_eq!(status, 422, "{path} {fields}: {answer}");
        let (code, message) = error(&answer);
        assert_eq!(code, "invalid_request", "{fields}");
        assert!(
            message.starts_with("reservation_ttl") && message.contains(says),
            "{fields}: {message}"
        );
    }
}

/// A denial carries no reservation, nor does a check that did not ask.
async fn only_an_allowed_check_gets_a_reservation(app: &TestApp) {
    let body = json!({"key": unique_key("denied"), "limit": 2, "window": "1h"});
    let (allowed, id) = reserve(app, &body, 2).await;
    assert!(id.is_some(), "{allowed}");
    let (denied, id) = reserve(app, &body, 1).await;
    assert_eq!(
        (denied["allowed"].as_bool(), id),
        (Some(false), None),
        "{denied}"
    );
    assert!(denied.get("reservation").is_none(), "{denied}");
    let (_, plain) = app.check(with(&body, json!({"cost": 0}))).await;
    assert!(plain.get("reservation").is_none(), "{plain}");
}

/// Two instances on one Redis: a reservation made on A is settled on B,
/// once, and the settle ends the denial A had cached (the script
/// publishes the key), not at its retry-after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_made_on_one_instance_settles_on_another() {
    let server = RedisServer::start();
    let a = TestApp::spawn(settings(Some(&server.url()))).await;
    let b = TestApp::spawn(settings(Some(&server.url()))).await;
    let body =
        json!({"key": unique_key("two"), "limit": 5, "window": "1d", "algorithm": "fixed_window"});
    let (answer, id) = reserve(&a, &body, 5).await;
    assert_eq!(answer["allowed"], true);
    let id = id.unwrap();
    for _ in 0..2 {
        assert_eq!(
            a.check(with(&body, json!({"cost": 1}))).await.1["allowed"],
            false
        );
    }
    let (status, settled) = settle(&b, &id, 2).await;
    assert_eq!(
        (status, &settled["allowed"], &settled["remaining"]),
        (200, &json!(true), &json!(3)),
        "{settled}"
    );
    // Settled once, whichever instance is asked again.
    assert_eq!(settle(&a, &id, 2).await.1["remaining"], 3);
    assert_eq!(settle(&a, &id, 1).await.0, 409);
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
    assert_eq!(
        a.check(with(&body, json!({"cost": 1}))).await.1["allowed"],
        false
    );
}

/// Items of `POST /v1/checks` ask for reservations as a check does: each
/// allowed one is answered its own, a denied one none, and each settles.
async fn batch_items_get_reservations(app: &TestApp) {
    let key = unique_key("batch");
    let item = |cost: u64| json!({"key": key, "limit": 3, "window": "1h", "cost": cost, "reservation_ttl": "1m"});
    let plain = json!({"key": unique_key("plain"), "limit": 3, "window": "1h"});
    let (status, batch) = app
        .post(
            "/v1/checks",
            &json!({"checks": [item(2), plain, item(2), item(1)]}),
        )
        .await;
    assert_eq!(status, 200, "{batch}");
    let results = batch["results"].as_array().unwrap();
    let ids: Vec<Option<&str>> = results
        .iter()
        .map(|r| r["reservation"]["id"].as_str())
        .collect();
    assert!(ids[0].is_some() && ids[3].is_some(), "{batch}");
    assert_eq!(
        (ids[1], ids[2]),
        (None, None),
        "a plain and a denied item: {batch}"
    );
    assert_eq!(results[3]["reservation"]["expires_in_ms"], 60_000);
    // 3 of 3 used; the first item used nothing, the last one all it reserved.
    assert_eq!(settle(app, ids[0].unwrap(), 0).await.1["remaining"], 2);
    assert_eq!(settle(app, ids[3].unwrap(), 1).await.1["remaining"], 2);
}

/// A reservation names its policy: a reload between check and settle
/// settles on the policy's limits as they are now, and a policy no longer
/// loaded is a 422 `unknown_policy` that changes nothing.
async fn a_reload_between_check_and_settle(app: &TestApp) {
    let hourly = |n| {
        policy(
            "api",
            vec![limit("hour", Algorithm::FixedWindow, n, "1h", None)],
        )
    };
    install(app, vec![hourly(5)]);
    let body = json!({"policy": "api", "key": unique_key("reload")});
    let (_, first) = reserve(app, &body, 4).await;
    let (_, second) = reserve(app, &body, 1).await;
    install(app, vec![hourly(8)]);
    let (status, settled) = settle(app, &first.unwrap(), 0).await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(
        (&settled["limit"], &settled["remaining"]),
        (&json!(8), &json!(7)),
        "the limit in force now: {settled}"
    );
    install(app, vec![]);
    let (status, answer) = settle(app, &second.unwrap(), 0).await;
    assert_eq!(
        (status, error(&answer).0),
        (422, "unknown_policy"),
        "{answer}"
    );
    install(app, vec![hourly(8)]);
    let (_, look) = app.check(with(&body, json!({"cost": 0}))).await;
    assert_eq!(look["remaining"], 7, "the 422 changed nothing: {look}");
}
