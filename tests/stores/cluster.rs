//! Against a real Redis Cluster of 3 primaries, each with a replica:
//! - each check's key lives in one slot (the client key is a hash tag),
//!   batches are split by slot, and limits hold exactly when the keys of
//!   one batch span every node;
//! - when one primary (the node the URL names) is SIGKILLed under load, its
//!   keys are answered by the replica once it is promoted, with no restart
//!   of ratekeeper, and keys on the other primaries are never degraded.
//!
//! One cluster per test binary (creating one takes seconds), so both run in
//! one test, the failover last. Prints one `FAILOVER cluster ...` line with
//! the measured times, which `bench/failover.sh` collects.

use crate::support;
use crate::support::StoreExt;
use crate::support::stores::redis_settings;
use ratekeeper::domain::Window;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratekeeper::domain::{Algorithm, Check, ManualClock};
use ratekeeper::store::Store;
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::redis::{RedisOptions, RedisSettings, RedisStore};
use serde_json::json;
use support::{
    Load, Outage, RedisCluster, TestApp, assert_answered_throughout, cached_scripts,
    failover_reconnect_max_delay, ms, redis_cli, settings, unique_key, wait_for,
};

fn check(key: &str, algorithm: Algorithm, cost: u64) -> Check {
    support::check(key, algorithm, 3, "1m", cost)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_batches_limits_and_failover() {
    let mut cluster = RedisCluster::start_with(3, 1);
    batches_and_limits(&cluster).await;
    failover(&mut cluster).await;
}

async fn batches_and_limits(cluster: &RedisCluster) {
    // 1. A batch whose keys span all slots answers like the embedded store.
    let clock = ManualClock::new(1_767_225_600_000_000);
    let redis = RedisStore::connect(RedisOptions {
        settings: RedisSettings {
            timeout: Duration::from_secs(5),
            reconnect_max_delay: Duration::from_millis(200),
            ..redis_settings(cluster.url())
        },
        clock: Some(Arc::new(clock.clone())),
        ttl_pad_ms: 600_000,
    })
    .unwrap();
    assert!(redis.wait_connected(Duration::from_secs(10)).await);
    redis.ping().await.unwrap();
    let memory = MemoryStore::new(Arc::new(clock.clone()), 10_000);
    let checks: Vec<Check> = (0..200)
        .map(|i| {
            let algorithm = Algorithm::RATES[i % 5];
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
    config.deny_cache.capacity = 0;
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
                // A day: an epoch-aligned window's end inside the burst would
                // give a key its 3 again.
                let body = json!({"key": format!("k{}", i % 40), "limit": 3, "window": "1d", "algorithm": algorithm});
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
    two_limit_checks_on_every_node(cluster).await;
}

/// 3. Checks of two limits (tight 3, loose 5 per day; different
///    algorithms) on 40 keys spread over the nodes, 10 concurrent checks
///    per key from two batching instances (independent stores, each its
///    own pools): exactly 3 allowed per key, and the loose limit of every
///    key spent exactly 3.
async fn two_limit_checks_on_every_node(cluster: &RedisCluster) {
    use ratekeeper::domain::{Limit, Rule};
    let mut stores = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(RedisSettings {
            timeout: Duration::from_secs(5),
            pool_size: 2,
            reconnect_max_delay: Duration::from_millis(200),
            batch_window: Duration::from_micros(200),
            ..redis_settings(cluster.url())
        })
        .unwrap();
        assert!(store.wait_connected(Duration::from_secs(10)).await);
        store.ping().await.unwrap();
        stores.push(Arc::new(store));
    }
    let limit = |name: &str, algorithm, limit| Limit {
        name: name.into(),
        rule: Rule {
            algorithm,
            limit,
            // A day, not an hour: the windows' ends are epoch-aligned.
            window: Window::Length(86_400_000_000),
            burst: limit,
        },
        scope: None,
        level: None,
    };
    let pairs = [
        (Algorithm::FixedWindow, Algorithm::SlidingLog),
        (Algorithm::SlidingWindow, Algorithm::Gcra),
        (Algorithm::Gcra, Algorithm::TokenBucket),
        (Algorithm::TokenBucket, Algorithm::FixedWindow),
        (Algorithm::SlidingLog, Algorithm::SlidingWindow),
    ];
    for (tight, loose) in pairs {
        let keys: Vec<String> = (0..40).map(|_| unique_key("multi")).collect();
        let slots: std::collections::HashSet<u16> = keys.iter().map(|k| slot_of(k)).collect();
        let owners: std::collections::HashSet<u16> =
            slots.iter().filter_map(|s| cluster.owner_of(*s)).collect();
        assert_eq!(owners.len(), 3, "the keys span every primary");
        let limits = vec![limit("tight", tight, 3), limit("loose", loose, 5)];
        let multi = |key: &str, limits: Vec<Limit>, cost| {
            let mut c = Check::multi(key, limits, cost);
            c.policy = Some("api".into());
            c
        };
        let barrier = Arc::new(tokio::sync::Barrier::new(400));
        let tasks: Vec<_> = (0..400)
            .map(|i| {
                let store = stores[i % 2].clone();
                let c = multi(&keys[i % 40], limits.clone(), 1);
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    let outcomes = store.check(&c).await.unwrap();
                    (i % 40, outcomes.iter().all(|o| o.allowed))
                })
            })
            .collect();
        let mut allowed = [0; 40];
        for task in tasks {
            let (key, ok) = task.await.unwrap();
            allowed[key] += ok as usize;
        }
        assert!(
            allowed.iter().all(|&n| n == 3),
            "{tight}+{loose}: {allowed:?}"
        );
        for key in &keys {
            let probe = stores[0]
                .check(&multi(key, limits[1..].to_vec(), 0))
                .await
                .unwrap();
            assert_eq!(
                probe[0].remaining, 2,
                "{tight}+{loose} {key}: loose spent 3"
            );
        }
    }
    // A client key that starts with `}` (an empty hash tag as written)
    // still keeps all its limits in one slot: no CROSSSLOT.
    let limits = vec![
        limit("tight", Algorithm::Gcra, 3),
        limit("loose", Algorithm::SlidingLog, 5),
    ];
    for key in [
        format!("}}{}", unique_key("")),
        "}x{y}".into(),
        String::new(),
    ] {
        let mut c = Check::multi(key.clone(), limits.clone(), 1);
        c.policy = Some("api".into());
        let outcomes = stores[0].check(&c).await.unwrap();
        assert!(outcomes.iter().all(|o| o.allowed), "{key:?}: {outcomes:?}");
    }
    for store in stores {
        store.quit().await;
    }
}

/// Keys per primary in the failover load.
const KEYS_PER_PRIMARY: usize = 4;
/// A limit never reached, so every answer carries the count in `remaining`.
const LIMIT: u64 = 1_000_000;
/// Allowed on top of the Redis timeout for an answer: the test machine is
/// shared with compilers, and a debug build is slow.
const SLACK: Duration = Duration::from_millis(900);

async fn failover(cluster: &mut RedisCluster) {
    let mut config = settings(Some(&cluster.url()));
    let redis = config.redis.as_mut().unwrap();
    redis.reconnect_max_delay = failover_reconnect_max_delay();
    let reconnect = redis.reconnect_max_delay;
    let timeout = redis.timeout;
    let app = Arc::new(TestApp::spawn(config).await);

    // The victim is the node the URL names, the harder case: the client
    // must find the cluster again through the nodes it learnt about.
    let victim = cluster.seed();
    let mut primaries: Vec<u16> = cluster
        .nodes_info()
        .into_iter()
        .filter(|n| n.primary)
        .map(|n| n.port)
        .collect();
    assert!(primaries.contains(&victim), "the URL names a primary");
    primaries.sort_by_key(|&p| p != victim);
    // Client keys spread evenly over the primaries: keys[i] lives on
    // owners[i], and keys[0] on the victim.
    let (keys, owners) = keys_on(cluster, &primaries);
    let bodies: Vec<_> = keys
        .iter()
        .map(|k| json!({"key": k, "limit": LIMIT, "window": "1h", "algorithm": "fixed_window"}))
        .collect();
    for body in &bodies {
        let (status, answer) = app.check(body.clone()).await;
        assert_eq!(
            (status, &answer["degraded"]),
            (200, &json!(false)),
            "{answer}"
        );
    }
    let replica = cluster
        .replica_of(victim)
        .expect("each primary has a replica");
    assert_eq!(cached_scripts(replica), 0, "scripts are not replicated");

    let load = Load::start(
        app.clone(),
        bodies.clone(),
        12,
        Duration::from_millis(2),
        20_000,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    cluster.kill(victim);

    let on_victim = {
        let owners = owners.clone();
        move |i: usize| owners[i] == victim
    };
    let slot = slot_of(&keys[0]);
    let ports = cluster.ports.clone();
    let promoted = wait_for(Duration::from_secs(45), move || {
        RedisCluster::owner_among(&ports, slot) == Some(replica)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the replica {replica} did not take over from {victim} within 45 s: {:#?}",
            cluster.nodes_info()
        )
    }) - killed;
    let recovered = wait_for(Duration::from_secs(45), {
        let samples = load.samples_handle();
        let on_victim = on_victim.clone();
        move || {
            Outage::measure(&samples(), killed, &on_victim)
                .recovered_after
                .is_some()
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = load.finish().await;
    let outage = Outage::measure(&samples, killed, &on_victim);
    let others = Outage::measure(&samples, killed, |i| !on_victim(i));
    let max_latency = samples.iter().map(|s| s.latency()).max().unwrap();
    println!(
        "FAILOVER cluster reconnect_max_delay_ms={} recovered_ms={} last_degraded_ms={} promoted_ms={} max_latency_ms={} checks={} degraded={} other_checks={} other_degraded={} other_last_degraded_ms={}",
        reconnect.as_millis(),
        ms(outage.recovered_after),
        ms(outage.last_degraded_after),
        promoted.as_millis(),
        max_latency.as_millis(),
        outage.checks,
        outage.degraded,
        others.checks,
        others.degraded,
        ms(others.last_degraded_after),
    );
    assert!(
        recovered.is_some(),
        "no check of the killed primary's keys was answered by its replica within 45 s: {outage:?}"
    );
    assert_answered_throughout(&samples, timeout, SLACK);

    // The killed primary's key lives on the promoted replica, with its scripts.
    let (status, answer) = app.check(bodies[0].clone()).await;
    assert_eq!(
        (status, &answer["degraded"]),
        (200, &json!(false)),
        "{answer}"
    );
    let count = LIMIT - answer["remaining"].as_u64().unwrap();
    let pattern = format!("*{{{}}}*", keys[0]);
    let stored = redis_cli(replica, &["--scan", "--pattern", &pattern]);
    let field = redis_cli(replica, &["hget", stored.trim(), "c"]);
    assert_eq!(
        field,
        count.to_string(),
        "the count of {stored} on the new primary"
    );
    // The function library came with replication (a script would have
    // been loaded again on NOSCRIPT).
    assert!(
        cached_scripts(replica) > 0
            || redis_cli(replica, &["FUNCTION", "LIST"]).contains("ratekeeper_"),
        "scripts loaded on the new primary"
    );

    // One circuit breaker per node, and one client pool per node (fred's
    // cluster client routes nothing while it reconnects to the dead node):
    // a failed node must not degrade the keys the other primaries serve.
    assert_eq!(
        others.degraded, 0,
        "keys on the healthy primaries were degraded: {others:?}"
    );
}

/// `KEYS_PER_PRIMARY` fresh client keys on each of `primaries`, and the
/// port of the primary serving each.
fn keys_on(cluster: &RedisCluster, primaries: &[u16]) -> (Vec<String>, Vec<u16>) {
    let mut per_primary = vec![Vec::new(); primaries.len()];
    while per_primary
        .iter()
        .any(|k: &Vec<String>| k.len() < KEYS_PER_PRIMARY)
    {
        let key = unique_key("failover");
        let owner = cluster
            .owner_of(slot_of(&key))
            .expect("every slot is served");
        let at = primaries.iter().position(|&p| p == owner).unwrap();
        if per_primary[at].len() < KEYS_PER_PRIMARY {
            per_primary[at].push(key);
        }
    }
    // Interleaved, so every worker of the load touches every primary.
    let mut keys = Vec::new();
    let mut owners = Vec::new();
    for round in 0..KEYS_PER_PRIMARY {
        for (on_primary, port) in per_primary.iter().zip(primaries) {
            keys.push(on_primary[round].clone());
            owners.push(*port);
        }
    }
    (keys, owners)
}

/// The cluster slot of a client key (it is the hash tag of its Redis key).
fn slot_of(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}
