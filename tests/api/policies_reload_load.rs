//! Reloads under load, through the policy form of the check API
//! (`{"policy": "api", "key": ..., "cost": ...}` answered with `"policy"`
//! and a `"limits"` array): no check fails or sees a policy that is
//! neither the old nor the new during 100 reloads, and a changed `limit`
//! or `burst` keeps its counters. On the embedded store and on a real Redis.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratekeeper::domain::policy::sha256_hex;
use serde_json::{Value, json};

use crate::support;

use support::{RedisServer, TestApp, fresh_dir, settings, unique_key};

/// Two versions of one policy; every check must match one of them exactly.
const OLD: &str = r#"[policies.api]
limits = [
  { name = "burst", algorithm = "token_bucket", limit = 1000000, window = "1s", burst = 1000000 },
  { name = "daily", algorithm = "fixed_window", limit = 100000000, window = "1d" },
]
"#;
const NEW: &str = r#"[policies.api]
limits = [
  { name = "second", algorithm = "gcra", limit = 500000, window = "1s", burst = 500000 },
  { name = "daily", algorithm = "fixed_window", limit = 200000000, window = "1d" },
  { name = "hourly", algorithm = "sliding_window", limit = 50000000, window = "1h" },
]
"#;

async fn spawn(redis: Option<&RedisServer>, path: &Path) -> TestApp {
    let url = redis.map(RedisServer::url);
    let mut settings = settings(url.as_deref());
    if let Some(redis) = &mut settings.redis {
        redis.key_prefix = format!("{}:", unique_key("reload"));
    }
    settings.policies.file = Some(path.to_path_buf());
    settings.policies.poll_interval = Duration::from_secs(3600);
    TestApp::spawn(settings).await
}

/// Replaces the file atomically (as a deploy would) and waits until the
/// service reports the new version.
async fn install(app: &TestApp, dir: &Path, path: &Path, text: &str) {
    let staged: PathBuf = dir.join("staged.toml");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
    let want = sha256_hex(text.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let body: Value = app.get("/v1/policies").await.json().await.unwrap();
        if body["sha256"] == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "reload not seen within 2 s: {body}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The (name, algorithm, limit, burst, window_ms) of each limit a check reports.
fn shape(limits: &Value) -> Vec<(String, String, u64, u64, u64)> {
    limits
        .as_array()
        .expect("a limits array")
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["algorithm"].as_str().unwrap().to_string(),
                l["limit"].as_u64().unwrap(),
                l["burst"].as_u64().unwrap(),
                l["window_ms"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The shape GET /v1/policies reports for the one policy in force.
async fn policy_shape(app: &TestApp) -> Vec<(String, String, u64, u64, u64)> {
    let body: Value = app.get("/v1/policies").await.json().await.unwrap();
    shape(&body["policies"][0]["limits"])
}

async fn reloads_under_load(redis: Option<&RedisServer>) {
    let dir = fresh_dir("policies-load");
    let path = dir.join("policies.toml");
    std::fs::write(&path, OLD).unwrap();
    let app = Arc::new(spawn(redis, &path).await);
    let old = policy_shape(&app).await;
    install(&app, &dir, &path, NEW).await;
    let new = policy_shape(&app).await;
    install(&app, &dir, &path, OLD).await;
    assert_ne!(old, new);

    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..8 {
        let (app, stop, checks) = (app.clone(), stop.clone(), checks.clone());
        let (old, new) = (old.clone(), new.clone());
        workers.push(tokio::spawn(async move {
            let mut seen = BTreeSet::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("k-{w}-{}", i % 16);
                i += 1;
                let (status, body) = app
                    .check(json!({"policy": "api", "key": key, "cost": 1}))
                    .await;
                assert_eq!(status, 200, "{body}");
                assert_eq!(body["allowed"], true, "{body}");
                assert_eq!(body["policy"], "api", "{body}");
                let got = shape(&body["limits"]);
                assert!(
                    got == old || got == new,
                    "a check saw neither version: {body}"
                );
                seen.insert(got == new);
                checks.fetch_add(1, Ordering::Relaxed);
            }
            seen
        }));
    }
    for i in 0..100 {
        let text = if i % 2 == 0 { NEW } else { OLD };
        install(&app, &dir, &path, text).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut seen = BTreeSet::new();
    for worker in workers {
        seen.extend(worker.await.expect("no check failed"));
    }
    assert!(checks.load(Ordering::Relaxed) >= 100, "too little load");
    assert_eq!(seen.len(), 2, "the checks saw both versions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reloads_under_load_embedded() {
    reloads_under_load(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reloads_under_load_redis() {
    let redis = RedisServer::start();
    reloads_under_load(Some(&redis)).await;
}

fn one_limit(algorithm: &str, limit: u64, burst: Option<u64>) -> String {
    let burst = burst.map_or(String::new(), |b| format!(", burst = {b}"));
    format!(
        "[policies.api]\nlimits = [{{ name = \"l\", algorithm = \"{algorithm}\", limit = {limit}, window = \"1d\"{burst} }}]\n"
    )
}

/// Reports without spending: `(allowed, remaining)` of the one limit.
async fn peek(app: &TestApp, key: &str) -> (bool, u64) {
    let (status, body) = app
        .check(json!({"policy": "api", "key": key, "cost": 0}))
        .await;
    assert_eq!(status, 200, "{body}");
    (
        body["limits"][0]["allowed"].as_bool().unwrap(),
        body["limits"][0]["remaining"].as_u64().unwrap(),
    )
}

async fn spend(app: &TestApp, key: &str, cost: u64) -> Value {
    let (status, body) = app
        .check(json!({"policy": "api", "key": key, "cost": cost}))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn changed_limits_keep_counters(redis: Option<&RedisServer>) {
    let dir = fresh_dir("policies-counters");
    let path = dir.join("policies.toml");
    let v = one_limit("fixed_window", 10, None);
    std::fs::write(&path, &v).unwrap();
    let app = spawn(redis, &path).await;
    let key = unique_key("counter");
    assert_eq!(spend(&app, &key, 6).await["remaining"], 4);

    // Raising the limit keeps the 6 spent.
    install(&app, &dir, &path, &one_limit("fixed_window", 20, None)).await;
    assert_eq!(peek(&app, &key).await.1, 14);
    // Lowering it under the usage: remaining 0, and a spend is denied.
    install(&app, &dir, &path, &one_limit("fixed_window", 4, None)).await;
    assert_eq!(peek(&app, &key).await.1, 0);
    let denied = spend(&app, &key, 1).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    assert_eq!(denied["remaining"], 0, "{denied}");
    // A changed algorithm starts afresh.
    install(&app, &dir, &path, &one_limit("sliding_window", 4, None)).await;
    assert_eq!(peek(&app, &key).await.1, 4);

    // A bucket: spend 6 of a burst of 10 (refilling 1 a day), then change
    // the burst. The spent tokens stay spent: never back to a full bucket.
    let key = unique_key("bucket");
    for algorithm in ["token_bucket", "gcra"] {
        let key = format!("{key}-{algorithm}");
        install(&app, &dir, &path, &one_limit(algorithm, 1, Some(10))).await;
        assert_eq!(spend(&app, &key, 6).await["remaining"], 4);
        install(&app, &dir, &path, &one_limit(algorithm, 1, Some(20))).await;
        let (_, remaining) = peek(&app, &key).await;
        assert!(
            remaining < 20,
            "{algorithm}: raising the burst reset the bucket ({remaining})"
        );
        install(&app, &dir, &path, &one_limit(algorithm, 1, Some(3))).await;
        let (_, remaining) = peek(&app, &key).await;
        assert!(
            remaining <= 3,
            "{algorithm}: {remaining} over the new burst"
        );
        let body = spend(&app, &key, 3).await;
        if remaining < 3 {
            assert_eq!(body["allowed"], false, "{algorithm}: {body}");
        }
    }
}

#[tokio::test]
async fn changed_limits_keep_counters_embedded() {
    changed_limits_keep_counters(None).await;
}

#[tokio::test]
async fn changed_limits_keep_counters_redis() {
    let redis = RedisServer::start();
    changed_limits_keep_counters(Some(&redis)).await;
}
