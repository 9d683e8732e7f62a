//! `redis.max_in_flight`: past the cap a check waits for room instead of
//! joining the queue in Redis, and is decided by Redis once there is room;
//! nothing times out and the circuit breaker stays closed. (Waiting past
//! `redis.timeout` is refused as `overloaded`: the unit tests in
//! src/store/redis/in_flight_tests.rs.)

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

#[tokio::test]
async fn past_the_cap_a_check_waits_for_room_and_is_decided() {
    let redis = RedisServer::start();
    let mut config = settings(Some(&redis.url()));
    let r = config.redis.as_mut().unwrap();
    r.max_in_flight = 2;
    r.timeout = Duration::from_secs(3);
    let app = TestApp::spawn(config).await;
    // A warm connection and script first.
    let warm = json!({"key": "warm", "limit": 5, "window": "1m"});
    assert_eq!(app.check(warm).await.0, 200);

    // Redis stops answering; a batch of 3 checks is one call of 3
    // operations, sent (nothing else is in flight), and waits on Redis.
    redis.freeze();
    let post = |path: &str, body: Value| {
        let (http, url) = (app.http.clone(), app.url(path));
        tokio::spawn(async move {
            let started = Instant::now();
            let response = http.post(url).json(&body).send().await.unwrap();
            (started.elapsed(), response.json::<Value>().await.unwrap())
        })
    };
    let key = unique_key("over");
    let items: Vec<_> = (0..3)
        .map(|i| json!({"key": format!("{key}:{i}"), "limit": 5, "window": "1m"}))
        .collect();
    let batch = post("/v1/checks", json!({ "checks": items }));
    tokio::time::sleep(Duration::from_millis(200)).await;

    // 3 in flight, cap 2: this one waits, unsent, until the batch is
    // answered (Redis thaws 300 ms later), then is decided by Redis.
    let single = post(
        "/v1/check",
        json!({"key": unique_key("over"), "limit": 5, "window": "1m"}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.thaw();

    let (_, answered) = batch.await.unwrap();
    for item in answered["results"].as_array().unwrap() {
        let decided = (item["status"].as_u64(), item["degraded"].as_bool());
        assert_eq!(decided, (Some(200), Some(false)), "{answered}");
        assert_eq!(item["remaining"], 4);
    }
    let (took, single) = single.await.unwrap();
    let decided = (single["allowed"].as_bool(), single["degraded"].as_bool());
    assert_eq!(decided, (Some(true), Some(false)), "{single}");
    assert!(
        took >= Duration::from_millis(250),
        "it waited for room: {took:?}"
    );
    for series in [
        r#"ratekeeper_store_errors_total{kind="overloaded"}"#,
        r#"ratekeeper_store_errors_total{kind="timeout"}"#,
        r#"ratekeeper_breaker_state{state="open"}"#,
    ] {
        assert_eq!(app.metric(series).await, 0.0, "{series}");
    }
    app.stop().await;
}
