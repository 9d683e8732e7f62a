//! `POST /v1/checks` against the real service, on the embedded store and
//! on a real redis-server: invalid checks are answered in their place, the
//! envelope is judged whole, checks on one key apply in order, and the
//! metrics count each check. (That each check is answered as it would be
//! alone is `batch_parity`.)

use serde_json::{Value, json};

use crate::batch_support::{ALGORITHMS, START_US, batch, results, send, spawn_on, split};
use crate::support::{self, RedisServer, TestApp, settings};
use ratekeeper::domain::ManualClock;

for_each_store!(app: invalid_checks_are_answered_in_their_place, the_envelope_is_judged_whole);

/// Each invalid check gets the status, code and message `POST /v1/check`
/// gives it, in its place; the others are decided.
async fn invalid_checks_are_answered_in_their_place(app: &TestApp) {
    let key = support::unique_key("batch-errors");
    // Windows of a day: the counts below run across requests on the wall
    // clock, and the windows' ends are epoch-aligned.
    let valid = json!({"key": key, "limit": 10, "window": "1d"});
    let checks = [
        valid.clone(),
        json!({"key": key, "limit": 0, "window": "1d"}),
        json!({"key": key, "limits": [{"limit": 1, "window": "1d"}], "limit": 3}),
        json!({"policy": "nope", "key": key}),
        json!({"key": key, "limit": 10, "window": "1d", "algorithm": "leaky"}),
        json!("not a check"),
        valid.clone(),
    ];
    let answers = results(batch(app, &checks).await);
    let codes: Vec<(u16, &str)> = answers
        .iter()
        .map(|a| {
            let code = a["error"]["code"].as_str().unwrap_or("");
            (a["status"].as_u64().unwrap() as u16, code)
        })
        .collect();
    assert_eq!(
        codes,
        [
            (200, ""),
            (422, "invalid_request"),
            (422, "mixed_forms"),
            (422, "unknown_policy"),
            (422, "invalid_request"),
            (422, "invalid_request"),
            (200, ""),
        ]
    );
    assert_eq!(answers[0]["remaining"], 9);
    assert_eq!(answers[6]["remaining"], 8, "decided after the invalid ones");
    for (check, answer) in checks.iter().zip(&answers).skip(1).take(5) {
        let (status, body) = split(answer);
        assert_eq!(app.check(check.clone()).await, (status, body), "{check}");
    }

    // wait_ms above 0 is that check's 422, saying why; 0 is no wait.
    let waiting = json!({"key": key, "limit": 10, "window": "1d", "wait_ms": 500});
    let no_wait = json!({"key": key, "limit": 10, "window": "1d", "wait_ms": 0});
    let answers = results(batch(app, &[waiting, no_wait, valid]).await);
    assert_eq!(answers[0]["status"], 422);
    assert_eq!(answers[0]["error"]["code"], "invalid_request");
    let message = answers[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("wait_ms: a check in a batch cannot wait"),
        "{message}"
    );
    assert_eq!(
        (
            answers[1]["status"].clone(),
            answers[1]["remaining"].clone()
        ),
        (json!(200), json!(7))
    );
    assert!(answers[1].get("waited_ms").is_none(), "{}", answers[1]);
    assert_eq!(answers[2]["remaining"], 6);
}

/// A bad envelope is one error for the whole request, and nothing is
/// decided; an empty batch is answered with no results.
async fn the_envelope_is_judged_whole(app: &TestApp) {
    let key = support::unique_key("batch-envelope");
    // A day: its count runs across requests (see above).
    let check = json!({"key": key, "limit": 1000, "window": "1d"});
    let code = |answer: &(u16, Value)| answer.1["error"]["code"].as_str().unwrap().to_string();

    let over = batch(app, &vec![check.clone(); 101]).await;
    assert_eq!((over.0, code(&over)), (422, "invalid_request".into()));
    assert_eq!(
        over.1["error"]["message"],
        "checks: at most 100 checks in a batch (limits.max_batch), got 101"
    );
    for (body, status, expected) in [
        ("{\"checks\": [", 400, "invalid_json"),
        ("{}", 422, "invalid_request"),
        ("{\"checks\": {}}", 422, "invalid_request"),
        ("{\"checks\": null}", 422, "invalid_request"),
        ("5", 422, "invalid_request"),
    ] {
        let answer = send(app, body.into()).await;
        assert_eq!(
            (answer.0, code(&answer)),
            (status, expected.into()),
            "{body}"
        );
    }
    assert_eq!(batch(app, &[]).await, (200, json!({"results": []})));
    // Nothing was spent by any of them.
    let alone = app.check(check.clone()).await;
    assert_eq!(alone.1["remaining"], 999, "{}", alone.1);

    // 100 checks of ~1 KiB (past one check's 64 KiB cap) are decided...
    let limits = json!([
        {"name": "second", "algorithm": "token_bucket", "limit": 5, "window": "1s"},
        {"name": "minute", "algorithm": "sliding_window", "limit": 50, "window": "1m"},
        {"name": "day", "algorithm": "fixed_window", "limit": 5000, "window": "1d"},
    ]);
    let big: Vec<Value> = (0..100)
        .map(|i| json!({"key": format!("{i}-{}", "x".repeat(480)), "limits": limits}))
        .collect();
    let body = json!({ "checks": big }).to_string();
    assert!(body.len() > 64 * 1024, "{}", body.len());
    let answers = results(send(app, body).await);
    assert!(
        answers
            .iter()
            .all(|a| a["status"] == 200 && a["allowed"] == true)
    );
    // ...and past 4 KiB a check, the body is refused whole, naming the cap.
    let huge = json!({"checks": [check], "padding": "y".repeat(400 * 1024)}).to_string();
    let answer = send(app, huge).await;
    assert_eq!((answer.0, code(&answer)), (413, "payload_too_large".into()));
    assert_eq!(
        answer.1["error"]["message"],
        "request body is larger than 409600 bytes"
    );
    let alone = app.check(check.clone()).await;
    assert_eq!(alone.1["remaining"], 998, "{}", alone.1);

    // One check may not be larger than POST /v1/check takes: that item
    // alone is refused, the others decided.
    let fat = json!({"key": "fat", "limit": 5, "window": "1m", "padding": "z".repeat(70 * 1024)});
    let answers = results(send(app, json!({"checks": [fat, check]}).to_string()).await);
    assert_eq!(answers[0]["status"], 413, "{}", answers[0]);
    assert_eq!(answers[0]["error"]["code"], "payload_too_large");
    assert_eq!(
        (
            answers[1]["status"].as_u64(),
            answers[1]["remaining"].as_u64()
        ),
        (Some(200), Some(997))
    );
}

/// Checks on one key apply in their order: five on a limit of 3, the
/// first three allowed, the last two denied, for every algorithm.
async fn five_on_a_limit_of_three(redis: Option<&RedisServer>) {
    let clock = ManualClock::new(START_US);
    let app = spawn_on(&clock, redis, "rk-order:", true).await;
    for algorithm in ALGORITHMS {
        let check = json!({"key": "k", "limit": 3, "window": "1h", "algorithm": algorithm});
        let answers = results(batch(&app, &vec![check; 5]).await);
        let seen: Vec<(bool, u64)> = answers
            .iter()
            .map(|a| {
                (
                    a["allowed"].as_bool().unwrap(),
                    a["remaining"].as_u64().unwrap(),
                )
            })
            .collect();
        let want = [(true, 2), (true, 1), (true, 0), (false, 0), (false, 0)];
        assert_eq!(seen, want, "{algorithm}");
        assert!(answers[3]["retry_after_ms"].as_u64().unwrap() > 0);
    }
}

#[tokio::test]
async fn checks_on_one_key_apply_in_order_memory() {
    five_on_a_limit_of_three(None).await;
}

#[tokio::test]
async fn checks_on_one_key_apply_in_order_redis() {
    let server = RedisServer::start();
    five_on_a_limit_of_three(Some(&server)).await;
}

/// The sum of the series of `text` whose line starts with `prefix` and
/// contains `part`.
fn sum(text: &str, prefix: &str, part: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(part))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Each decided check of a batch counts in `ratekeeper_checks_total`;
/// the batch counts once in its own histogram and never in the check
/// latency's.
#[tokio::test]
async fn the_metrics_count_each_check() {
    let app = TestApp::spawn(settings(None)).await;
    let metrics = || async { app.get("/metrics").await.text().await.unwrap() };
    let before = metrics().await;
    // Three on each of four algorithms' state, limit 2: one denied each.
    let mut checks: Vec<Value> = (0..12)
        .map(|i| json!({"key": "m", "limit": 2, "window": "1d", "algorithm": ALGORITHMS[i % 4]}))
        .collect();
    checks.push(json!({"key": "m", "limit": 0, "window": "1d"}));
    let answers = results(batch(&app, &checks).await);
    let denied = answers.iter().filter(|a| a["allowed"] == false).count();
    assert_eq!(denied, 4, "{answers:?}");
    let after = metrics().await;
    let rose = |prefix: &str, part: &str| sum(&after, prefix, part) - sum(&before, prefix, part);
    let checks_total = "ratekeeper_checks_total{";
    assert_eq!(
        rose(checks_total, ""),
        12.0,
        "12 decided, the invalid one not"
    );
    assert_eq!(rose(checks_total, "decision=\"denied\""), denied as f64);
    assert_eq!(rose("ratekeeper_batch_duration_seconds_count", ""), 1.0);
    assert_eq!(rose("ratekeeper_check_duration_seconds_count", ""), 0.0);
    app.stop().await;
}

/// `limits.max_batch` bounds a batch, and its body cap follows it (never
/// below one check's).
#[tokio::test]
async fn limits_max_batch_is_the_bound() {
    let mut settings = settings(None);
    settings.limits.max_batch = 3;
    let app = TestApp::spawn(settings).await;
    let check = json!({"key": "k", "limit": 10, "window": "1h"});
    assert_eq!(results(batch(&app, &vec![check.clone(); 3]).await).len(), 3);
    let over = batch(&app, &vec![check; 4]).await;
    assert_eq!(over.0, 422);
    assert_eq!(
        over.1["error"]["message"],
        "checks: at most 3 checks in a batch (limits.max_batch), got 4"
    );
    // 3 × 4 KiB is under one check's cap: the batch gets 64 KiB.
    let huge = json!({"checks": [], "padding": "y".repeat(70 * 1024)}).to_string();
    let answer = send(&app, huge).await;
    assert_eq!(answer.0, 413);
    assert_eq!(
        answer.1["error"]["message"],
        "request body is larger than 65536 bytes"
    );
    app.stop().await;
}

/// Issue 27 D6: an item that is not valid JSON on its own (a lone
/// surrogate escape, which the envelope's parser lets through) is its own
/// 400, and an item over 64 KiB its own 413; the others are still decided.
#[tokio::test]
async fn an_item_can_be_answered_400_or_413_in_its_place() {
    let app = TestApp::spawn(support::settings(None)).await;
    let key = support::unique_key("batch-raw");
    let valid = json!({"key": key, "limit": 10, "window": "1h"}).to_string();
    let surrogate = r#"{"key": "\ud800", "limit": 10, "window": "1h"}"#;
    let large = json!({"key": key, "limit": 10, "window": "1h", "pad": "x".repeat(70_000)});
    let body = format!(r#"{{"checks": [{valid}, {surrogate}, {large}, {valid}]}}"#);
    let response = app
        .http
        .post(app.url("/v1/checks"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answers: Value = response.json().await.unwrap();
    let got: Vec<(u64, &str)> = answers["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let code = a["error"]["code"].as_str().unwrap_or("");
            (a["status"].as_u64().unwrap(), code)
        })
        .collect();
    assert_eq!(
        got,
        [
            (200, ""),
            (400, "invalid_json"),
            (413, "payload_too_large"),
            (200, "")
        ],
        "{answers}"
    );
    app.stop().await;
}
