//! N parallel callers on a policy of two limits get exactly the tighter
//! limit, and the looser one spends exactly that many: two instances
//! sharing one Redis (one script call applies both limits), batched and
//! not, and one instance on the embedded store (both limits under one
//! lock). The policies come from a real file, as in production.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::{RedisServer, TestApp, fresh_dir, settings, unique_key};

const REQUESTS: usize = 400;
const TIGHT: u64 = 100;
const LOOSE: u64 = 150;

/// (policy, tight algorithm, loose algorithm): every algorithm on each side.
const PAIRS: [(&str, &str, &str); 5] = [
    ("fw_sw", "fixed_window", "sliding_window"),
    ("sw_sl", "sliding_window", "sliding_log"),
    ("sl_gcra", "sliding_log", "gcra"),
    ("tb_fw", "token_bucket", "fixed_window"),
    ("gcra_tb", "gcra", "token_bucket"),
];

/// One policy per pair. Windows of a day: nothing refills or rolls over
/// during a test (a bucket refills one unit every 9 minutes or more; the
/// windows' ends are epoch-aligned, and an hour's could fall inside it).
fn policies_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = String::new();
    for (name, tight, loose) in PAIRS {
        text.push_str(&format!(
            "[policies.{name}]\nlimits = [\n  \
             {{ name = \"tight\", algorithm = \"{tight}\", limit = {TIGHT}, window = \"1d\" }},\n  \
             {{ name = \"loose\", algorithm = \"{loose}\", limit = {LOOSE}, window = \"1d\" }},\n]\n\n"
        ));
    }
    let path = dir.join("policies.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// REQUESTS checks of `policy` on one key at once, alternating between
/// `apps`; returns how many were allowed and, afterwards, what the loose
/// limit has left (a cost-0 look).
async fn concurrent_checks(apps: &[Arc<TestApp>], policy: &str) -> (u64, u64) {
    let key = unique_key(policy);
    let body = json!({"policy": policy, "key": key});
    let barrier = Arc::new(tokio::sync::Barrier::new(REQUESTS));
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let app = apps[i % apps.len()].clone();
            let body = body.clone();
            let barrier = barrier.clone();
            let policy = policy.to_string();
            tokio::spawn(async move {
                barrier.wait().await;
                let (status, response) = app.check(body).await;
                assert_eq!(status, 200, "{response}");
                assert_eq!(response["degraded"], false, "{response}");
                assert_eq!(response["policy"], policy.as_str(), "{response}");
                response["allowed"].as_bool().unwrap()
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap() as u64;
    }
    let (status, look) = apps[0]
        .check(json!({"policy": policy, "key": key, "cost": 0}))
        .await;
    assert_eq!(status, 200, "{look}");
    assert_eq!(look["limits"][1]["name"], "loose", "{look}");
    (allowed, look["limits"][1]["remaining"].as_u64().unwrap())
}

async fn assert_exact(apps: &[Arc<TestApp>], label: &str) {
    for (policy, ..) in PAIRS {
        let (allowed, loose_left) = concurrent_checks(apps, policy).await;
        assert_eq!(
            (allowed, loose_left),
            (TIGHT, LOOSE - TIGHT),
            "{label} {policy}: {REQUESTS} concurrent checks; the tight limit ({TIGHT}) \
             must allow exactly that many and the loose one ({LOOSE}) spend exactly as many"
        );
    }
}

/// Two instances on one Redis with `batch_window`, the deny cache off so
/// every check reaches Redis. Returns the script calls they made.
async fn two_instances(batch_window: Duration) -> u64 {
    let redis = RedisServer::start();
    let mut config = settings(Some(&redis.url()));
    config.policies.file = Some(policies_file(&fresh_dir("policy-concurrency")));
    let r = config.redis.as_mut().unwrap();
    // Generous: this test is about counting, not latency, on a busy 2-core box.
    r.timeout = Duration::from_secs(5);
    r.batch_window = batch_window;
    config.deny_cache.capacity = 0;
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    // Each instance's startup read of the runtime entries is a script
    // call too: counted before, so what is left is the checks'.
    let at_start = support::script_calls(&redis).await;
    assert_exact(&apps, &format!("batch window {batch_window:?}")).await;
    support::script_calls(&redis).await - at_start
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_apply_a_two_limit_policy_exactly() {
    let calls = two_instances(Duration::ZERO).await;
    // One script call per check (and per look), both limits in it.
    assert_eq!(calls, (PAIRS.len() * (REQUESTS + 1)) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_batching_instances_apply_a_two_limit_policy_exactly() {
    let calls = two_instances(Duration::from_micros(200)).await;
    let checks = PAIRS.len() * (REQUESTS + 1);
    assert!(
        calls < (checks / 2) as u64,
        "{calls} script calls for {checks} checks: batches formed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_embedded_store_applies_a_two_limit_policy_exactly() {
    let mut config = settings(None);
    config.policies.file = Some(policies_file(&fresh_dir("policy-concurrency")));
    let apps = [Arc::new(TestApp::spawn(config).await)];
    assert_exact(&apps, "embedded").await;
}
