//! Shared by the batch tests: the service on a manual clock with a
//! policies file of every kind, and batches sent and read whole.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::app::Backend;
use ratekeeper::domain::ManualClock;
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::redis::RedisStore;
use serde_json::{Value, json};

use crate::support::{self, RedisServer, TestApp, fresh_dir, settings};

/// Every algorithm, as the API names them.
pub const ALGORITHMS: [&str; 5] = [
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "token_bucket",
    "gcra",
];

/// Policies of every kind the differential picks from: several limits of
/// different algorithms, an override, a shadow policy.
pub const POLICIES: &str = r#"
[policies.multi]
limits = [
  { name = "burst", algorithm = "token_bucket", limit = 3, window = "10s", burst = 4 },
  { name = "minute", algorithm = "sliding_window", limit = 5, window = "1m" },
]
[policies.multi.overrides."b"]
limits = [ { name = "minute", algorithm = "fixed_window", limit = 2, window = "1m" } ]

[policies.logs]
limits = [
  { name = "log", algorithm = "sliding_log", limit = 3, window = "10s" },
  { name = "gcra", algorithm = "gcra", limit = 2, window = "1s", burst = 3 },
]

[policies.trial]
shadow = true
limits = [ { name = "fixed", algorithm = "fixed_window", limit = 2, window = "1m" } ]
"#;

/// A Unix time in µs, to start the manual clock on (any would do).
pub const START_US: u64 = 1_800_000_123_456_789;

pub fn policies_file() -> PathBuf {
    let path = fresh_dir("batch-policies").join("policies.toml");
    std::fs::write(&path, POLICIES).unwrap();
    path
}

/// The service on `clock`: the embedded store, or `redis` under `prefix`
/// (two instances on one server keep apart), with the deny cache or not.
pub async fn spawn_on(
    clock: &ManualClock,
    redis: Option<&RedisServer>,
    prefix: &str,
    deny_cache: bool,
) -> TestApp {
    let url = redis.map(RedisServer::url);
    let mut settings = settings(url.as_deref());
    settings.policies.file = Some(policies_file());
    settings.deny_cache.capacity = if deny_cache { 100_000 } else { 0 };
    let backend = match redis {
        None => Backend::Memory(MemoryStore::new(Arc::new(clock.clone()), 1_000_000)),
        Some(server) => {
            let mut options = support::stores::redis_options(server, clock, 60_000);
            options.settings.key_prefix = prefix.into();
            Backend::Redis(RedisStore::connect(options).unwrap())
        }
    };
    TestApp::spawn_with(settings, backend, Duration::from_millis(250)).await
}

/// POSTs `{"checks": checks}`; returns the status and body, after making
/// sure a batch carries no rate-limit headers.
pub async fn batch(app: &TestApp, checks: &[Value]) -> (u16, Value) {
    send(app, json!({ "checks": checks }).to_string()).await
}

pub async fn send(app: &TestApp, body: String) -> (u16, Value) {
    let response = app
        .http
        .post(app.url("/v1/checks"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    for header in response.headers().keys() {
        let name = header.as_str();
        assert!(
            !name.contains("ratelimit") && name != "retry-after",
            "a batch has no rate-limit headers: {name}"
        );
    }
    (response.status().as_u16(), response.json().await.unwrap())
}

/// The results of a 200 batch answer.
pub fn results(answer: (u16, Value)) -> Vec<Value> {
    assert_eq!(answer.0, 200, "{}", answer.1);
    answer.1["results"].as_array().unwrap().clone()
}

/// A result without its `status`, and the status: what `POST /v1/check`
/// answers the same check with.
pub fn split(result: &Value) -> (u16, Value) {
    let mut body = result.clone();
    let status = body.as_object_mut().unwrap().remove("status").unwrap();
    (status.as_u64().unwrap() as u16, body)
}
