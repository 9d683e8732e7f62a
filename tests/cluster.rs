//! Against a real 3-primary Redis Cluster: each check's key lives in one
//! slot (the client key is a hash tag), batches are split by slot, and
//! limits hold exactly when the keys of one batch span every node.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::domain::{Algorithm, Check, CheckInput, ManualClock, WindowInput};
use ratekeeper::store::Store;
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::redis::{RedisOptions, RedisStore};
use serde_json::json;
use support::{RedisCluster, TestApp, settings};

fn check(key: &str, algorithm: Algorithm, cost: u64) -> Check {
    Check::new(
        CheckInput {
            key: key.into(),
            limit: 3,
            window: WindowInput::Text("1m".into()),
            algorithm: Some(algorithm),
            cost: Some(cost),
            burst: None,
        },
        &Default::default(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_batches_and_limits() {
    let cluster = RedisCluster::start(3);

    // 1. A batch whose keys span all slots answers like the embedded store.
    let clock = ManualClock::new(1_767_225_600_000_000);
    let redis = RedisStore::connect(RedisOptions {
        url: cluster.url(),
        key_prefix: "rk:".into(),
        timeout: Duration::from_secs(5),
        pool_size: 1,
        reconnect_max_delay: Duration::from_millis(200),
        batch_window: Duration::ZERO,
        clock: Some(Arc::new(clock.clone())),
        ttl_pad_ms: 600_000,
    })
    .unwrap();
    assert!(redis.wait_connected(Duration::from_secs(10)).await);
    redis.ping().await.unwrap();
    let memory = MemoryStore::new(Arc::new(clock.clone()), 10_000);
    let checks: Vec<Check> = (0..200)
        .map(|i| {
            let algorithm = Algorithm::ALL[i % 5];
            check(&format!("user:{}", i % 40), algorithm, (i % 3) as u64)
        })
        .collect();
    let batched = redis.check_batch(&checks).await.unwrap();
    let alone: Vec<_> = checks
        .iter()
        .map(|c| memory.check_now(c).unwrap())
        .collect();
    assert_eq!(batched, alone);

    // 2. Two batching instances, 40 keys spread over the cluster, 10
    //    concurrent checks per key against limit 3: exactly 3 per key.
    let mut config = settings(Some(&cluster.url()));
    let r = config.redis.as_mut().unwrap();
    r.timeout = Duration::from_secs(5);
    r.batch_window = Duration::from_micros(200);
    config.deny_cache_capacity = 0;
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    for algorithm in [
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "token_bucket",
        "gcra",
    ] {
        let tasks: Vec<_> = (0..400)
            .map(|i| {
                let app = apps[i % 2].clone();
                let body = json!({"key": format!("k{}", i % 40), "limit": 3, "window": "1h", "algorithm": algorithm});
                tokio::spawn(async move {
                    let (status, response) = app.check(body).await;
                    assert_eq!(status, 200, "{response}");
                    assert_eq!(response["degraded"], false, "{response}");
                    (i % 40, response["allowed"].as_bool().unwrap())
                })
            })
            .collect();
        let mut allowed = [0; 40];
        for task in tasks {
            let (key, ok) = task.await.unwrap();
            allowed[key] += ok as usize;
        }
        assert!(allowed.iter().all(|&n| n == 3), "{algorithm}: {allowed:?}");
    }
}
