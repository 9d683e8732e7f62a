//! Blocking acquire (`wait_ms` on `POST /v1/check`) through the real
//! server: fairness and store load on Redis, the `max_waiters` bound,
//! clients that hang up while waiting, and validation. The decisions on a
//! controlled clock are unit tests (`src/limiter/wait/tests.rs`); these
//! run in real time and are kept short.

use crate::policy_checks;
use crate::support;

use std::time::{Duration, Instant};

use policy_checks::{install, limit, policy};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, script_calls, settings, unique_key};
use tokio::io::AsyncWriteExt;

/// A metric's value from `/metrics` (0 when absent).
async fn metric(app: &TestApp, name: &str) -> f64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls `name` until `done` holds; panics after 5 s.
async fn wait_for_metric(app: &TestApp, name: &str, done: impl Fn(f64) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let value = metric(app, name).await;
        if done(value) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {value}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A token bucket of `limit` per `window` with `burst`, single-rule form.
fn bucket(key: &str, limit: u64, window: &str, burst: u64, wait_ms: u64) -> Value {
    json!({"key": key, "limit": limit, "window": window, "algorithm": "token_bucket",
           "burst": burst, "wait_ms": wait_ms})
}

/// 50 waiters on 10/s (burst 5), arriving one after another on one
/// instance: the first 5 pass at once, the other 45 one per freed unit, in
/// arrival order, all within 5 s; Redis sees fewer than 3 script calls per
/// granted waiter.
#[tokio::test]
async fn fifty_waiters_on_a_token_bucket_are_admitted_in_arrival_order_on_redis() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(settings(Some(&redis.url()))).await;
    let app = std::sync::Arc::new(app);
    let key = unique_key("fifty");
    let body = bucket(&key, 10, "1s", 5, 10_000);
    let calls_before = script_calls(&redis).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    // Answered on their first try (they never stood in line).
    let at_once = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for i in 0..50 {
        let (client, body, at_once_) = (app.clone(), body.clone(), at_once.clone());
        tasks.push(tokio::spawn(async move {
            let (status, answer) = client.check(body).await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["allowed"], true, "waiter {i}: {answer}");
            let waited = answer["waited_ms"].as_u64().unwrap();
            if waited == 0 {
                at_once_.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            (Instant::now(), i, waited)
        }));
        // Arrived (answered at once, standing in line, or served from the
        // line) before the next one is sent.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let waiting = metric(&app, "ratekeeper_waiters").await;
            let served = metric(&app, "ratekeeper_wait_duration_seconds_count").await;
            let answered = at_once.load(std::sync::atomic::Ordering::SeqCst) as f64;
            if answered + waiting + served > i as f64 {
                break;
            }
            assert!(Instant::now() < deadline, "waiter {i} never arrived");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    let calls = script_calls(&redis).await - calls_before;
    done.sort_by_key(|(at, _, _)| *at);
    let order: Vec<usize> = done.iter().map(|(_, i, _)| *i).collect();
    let per_waiter = calls as f64 / 50.0;
    println!(
        "50 waiters on 10/s burst 5: all admitted in {elapsed:?}; {calls} script calls, \
         {per_waiter:.2} per granted waiter; longest waited_ms {}",
        done.iter().map(|(_, _, w)| *w).max().unwrap()
    );
    assert_eq!(order, (0..50).collect::<Vec<_>>(), "arrival order");
    assert!(
        elapsed < Duration::from_secs(5),
        "all admitted in {elapsed:?}"
    );
    assert!(per_waiter < 3.0, "{calls} script calls for 50 waiters");
    assert_eq!(metric(&app, "ratekeeper_waiters").await, 0.0);
}

#[tokio::test]
async fn wait_ms_is_validated_and_waited_ms_is_sent_only_to_those_who_asked() {
    let app = TestApp::spawn(settings(None)).await;
    let key = unique_key("valid");
    for body in [
        bucket(&key, 1, "1h", 1, 10_001),
        json!({"key": key, "limits": [{"limit": 1, "window": "1h"}], "wait_ms": 60_000}),
    ] {
        let (status, answer) = app.check(body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_request");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("wait_ms: "), "{message}");
    }
    let (status, answer) = app.check(bucket(&key, 1, "1h", 1, 10_001)).await;
    assert_eq!(status, 422);
    assert_eq!(
        answer["error"]["message"],
        "wait_ms: must be between 0 and 10000 (limits.max_wait), got 10001"
    );
    for bad in [json!(-1), json!(1.5), json!("10")] {
        let (status, answer) = app
            .check(json!({"key": key, "limit": 1, "window": "1h", "wait_ms": bad}))
            .await;
        assert_eq!(status, 422, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("wait_ms"),
            "{answer}"
        );
    }
    // wait_ms 0 is the same as no wait_ms: the six fields, nothing more.
    let response = app
        .http
        .post(app.url("/v1/check"))
        .json(
            &json!({"key": unique_key("zero"), "limit": 5, "window": "1h",
                      "algorithm": "token_bucket", "wait_ms": 0}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"allowed":true,"limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":720000,"degraded":false}"#
    );
    // Asked to wait: waited_ms, also when the first try answered.
    let (_, answer) = app
        .check(bucket(&unique_key("asked"), 5, "1h", 5, 100))
        .await;
    assert_eq!(answer["waited_ms"], 0, "{answer}");
}

#[tokio::test]
async fn the_policy_and_inline_forms_wait_too() {
    let app = TestApp::spawn(settings(None)).await;
    // One per second: the second of each pair must wait, however slow the
    // machine (a faster refill could come before the second asks).
    install(
        &app,
        vec![policy(
            "api",
            vec![limit("l", Algorithm::TokenBucket, 1, "1s", Some(1))],
        )],
    );
    let (status, answer) = app
        .check(json!({"policy": "api", "key": "k", "wait_ms": 10_001}))
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "wait_ms: must be between 0 and 10000 (limits.max_wait), got 10001"
    );
    let key = unique_key("forms");
    for body in [
        json!({"policy": "api", "key": key, "wait_ms": 2000}),
        json!({"policy": "api", "key": key, "wait_ms": 2000}),
        json!({"key": key, "limits": [{"algorithm": "gcra", "limit": 1, "window": "1s", "burst": 1}], "wait_ms": 2000}),
        json!({"key": key, "limits": [{"algorithm": "gcra", "limit": 1, "window": "1s", "burst": 1}], "wait_ms": 2000}),
    ] {
        let (status, answer) = app.check(body.clone()).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["allowed"], true, "{body}: {answer}");
        assert!(answer["limits"].is_array());
        assert!(answer["waited_ms"].as_u64().unwrap() <= 2000, "{answer}");
    }
    // The second of each pair waited about one refill (1 s).
    assert_eq!(
        metric(&app, "ratekeeper_wait_duration_seconds_count").await,
        2.0
    );
}

#[tokio::test]
async fn beyond_max_waiters_a_check_is_answered_at_once_and_counted() {
    let mut config = settings(None);
    config.limits.bounds.max_waiters = 1;
    let app = std::sync::Arc::new(TestApp::spawn(config).await);
    let key = unique_key("full");
    let body = bucket(&key, 1, "1s", 1, 5_000);
    assert_eq!(app.check(body.clone()).await.1["allowed"], true);
    let waiter = {
        let (app, body) = (app.clone(), body.clone());
        tokio::spawn(async move { app.check(body).await })
    };
    wait_for_metric(&app, "ratekeeper_waiters", |v| v == 1.0).await;
    let started = Instant::now();
    let (_, answer) = app.check(body).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["waited_ms"], 0, "{answer}");
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(metric(&app, "ratekeeper_wait_rejected_total").await, 1.0);
    let (_, first) = waiter.await.unwrap();
    assert_eq!(first["allowed"], true, "{first}");
}

/// A client that hangs up while waiting (FIN, then RST): its request is
/// dropped at once (hyper reads the EOF while the handler runs), it leaves
/// the line, and neither spends nor asks Redis again.
#[tokio::test]
async fn a_waiter_whose_client_hangs_up_stops_waiting_and_spends_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(settings(Some(&redis.url()))).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    for reset in [false, true] {
        let key = unique_key("hangup");
        let body = bucket(&key, 1, "1s", 1, 5_000);
        let spent_at = Instant::now();
        assert_eq!(app.check(body.clone()).await.1["allowed"], true);
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let text = body.to_string();
        let request = format!(
            "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{text}",
            text.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        wait_for_metric(&app, "ratekeeper_waiters", |v| v == 1.0).await;
        let calls = script_calls(&redis).await;
        let closed_at = Instant::now();
        if reset {
            stream.set_zero_linger().unwrap();
        }
        drop(stream);
        wait_for_metric(&app, "ratekeeper_waiters", |v| v == 0.0).await;
        let noticed = closed_at.elapsed();
        println!("hang-up (reset: {reset}) noticed after {noticed:?}");
        assert!(noticed < Duration::from_millis(500), "{noticed:?}");
        // Past the moment the waiter would have been allowed: Redis was not
        // asked again, and the unit is still there.
        tokio::time::sleep(Duration::from_millis(1_100).saturating_sub(spent_at.elapsed())).await;
        assert_eq!(
            script_calls(&redis).await,
            calls,
            "no try after the hang-up"
        );
        let (_, answer) = app
            .check(json!({"key": key, "limit": 1, "window": "1s", "algorithm": "token_bucket", "burst": 1}))
            .await;
        assert_eq!(answer["allowed"], true, "{answer}");
    }
}

/// Degraded answers are the failure policy's, not the store's: waiting
/// would not change them, so they come at once.
#[tokio::test]
async fn degraded_answers_never_wait() {
    let nowhere = format!("redis://127.0.0.1:{}", support::free_port());
    let mut config = settings(Some(&nowhere));
    let redis = config.redis.as_mut().unwrap();
    redis.timeout = Duration::from_millis(100);
    redis.probe_interval = Duration::from_millis(50);
    config.failure.mode = ratekeeper::domain::FailureMode::Closed;
    let app = TestApp::spawn(config).await;
    let started = Instant::now();
    let (status, answer) = app
        .check(bucket(&unique_key("down"), 1, "1s", 1, 5_000))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["degraded"], true, "{answer}");
    assert_eq!(answer["waited_ms"], 0, "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        metric(&app, "ratekeeper_wait_duration_seconds_count").await,
        0.0
    );
}

/// Two instances, one Redis, 20 waiters each on one key: there is no line
/// across instances, so each freed unit is raced by both heads. Everyone
/// is still served, each instance's line in its own arrival order, and the
/// store load stays under 4 calls per granted waiter.
#[tokio::test]
async fn two_instances_share_the_units_without_a_common_line() {
    let redis = RedisServer::start();
    let apps = [
        std::sync::Arc::new(TestApp::spawn(settings(Some(&redis.url()))).await),
        std::sync::Arc::new(TestApp::spawn(settings(Some(&redis.url()))).await),
    ];
    let key = unique_key("two");
    let body = bucket(&key, 20, "1s", 1, 10_000);
    let calls_before = script_calls(&redis).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let (app, body) = (apps[i % 2].clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let (status, answer) = app.check(body).await;
            assert_eq!(status, 200, "{answer}");
            (answer["allowed"].as_bool().unwrap(), Instant::now())
        }));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut allowed = 0;
    let mut answered = [Vec::new(), Vec::new()];
    for (i, task) in tasks.into_iter().enumerate() {
        let (ok, at) = task.await.unwrap();
        allowed += ok as u32;
        answered[i % 2].push((at, i));
    }
    let elapsed = started.elapsed();
    let calls = script_calls(&redis).await - calls_before;
    println!(
        "2 instances, 40 waiters on 20/s burst 1: {allowed} admitted in {elapsed:?}; \
         {calls} script calls, {:.2} per granted waiter",
        calls as f64 / f64::from(allowed)
    );
    assert_eq!(allowed, 40);
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    assert!(calls < 4 * u64::from(allowed), "{calls} script calls");
    for (instance, mut line) in answered.into_iter().enumerate() {
        let arrived: Vec<usize> = line.iter().map(|(_, i)| *i).collect();
        line.sort_by_key(|(at, _)| *at);
        let served: Vec<usize> = line.iter().map(|(_, i)| *i).collect();
        assert_eq!(served, arrived, "instance {instance}: arrival order");
    }
}
