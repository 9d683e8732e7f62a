//! Failure domains on a real 3-primary Redis Cluster: checks whose keys
//! live on different primaries get different domains, so the limiter can
//! keep one circuit breaker per node. (Its own binary: `tests/stores/cluster.rs`
//! starts its own cluster.)

use crate::support;
use crate::support::StoreExt;
use crate::support::stores::redis_settings;
use ratekeeper::domain::Window;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fred::prelude::*;
use ratekeeper::domain::{Algorithm, Check, Rule};
use ratekeeper::store::Store;
use ratekeeper::store::redis::{RedisSettings, RedisStore};
use support::{RedisCluster, RedisServer};

fn check(key: &str) -> Check {
    Check::single(
        key,
        Rule {
            algorithm: Algorithm::FixedWindow,
            limit: 10,
            window: Window::Length(60_000_000),
            burst: 10,
        },
        1,
    )
}

fn options(url: String) -> RedisSettings {
    RedisSettings {
        timeout: Duration::from_secs(5),
        pool_size: 2,
        reconnect_max_delay: Duration::from_millis(200),
        ..redis_settings(url)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_on_different_primaries_get_different_domains() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect(options(cluster.url())).unwrap();
    assert!(store.wait_connected(Duration::from_secs(10)).await);
    store.ping().await.unwrap();

    // Which node owns each key, as Redis itself says (CLUSTER KEYSLOT and
    // the slot table), against the domain the store reports.
    let mut by_domain: BTreeMap<u64, BTreeSet<u16>> = BTreeMap::new();
    for i in 0..60 {
        let c = check(&format!("user:{i}"));
        let domain = store.failure_domain(&c);
        assert_ne!(domain, 0, "routing is known once connected");
        assert_eq!(domain, store.failure_domain(&c), "stable");
        let port = owner(&cluster, &store.key_for(&c));
        by_domain.entry(domain).or_default().insert(port);
    }
    assert_eq!(by_domain.len(), 3, "one domain per primary: {by_domain:?}");
    for ports in by_domain.values() {
        assert_eq!(ports.len(), 1, "a domain is one node: {by_domain:?}");
    }
    store.quit().await;

    // A single server is one domain.
    let single = RedisServer::start();
    let store = RedisStore::connect(options(single.url())).unwrap();
    assert_eq!(store.failure_domain(&check("user:1")), 0);
}

/// The port of the primary owning `key`, from `redis-cli CLUSTER` replies.
fn owner(cluster: &RedisCluster, key: &str) -> u16 {
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(support::redis_cli_binary())
            .args(["-p", &cluster.ports[0].to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8(out.stdout).unwrap()
    };
    let slot: u16 = cli(&["CLUSTER", "KEYSLOT", key]).trim().parse().unwrap();
    // CLUSTER SHARDS is 7.0+; CLUSTER SLOTS lines: start, end, ip, port, id...
    let slots = cli(&["CLUSTER", "SLOTS"]);
    let lines: Vec<&str> = slots.lines().collect();
    let mut i = 0;
    while i + 3 < lines.len() {
        let (start, end) = (lines[i].parse::<u16>(), lines[i + 1].parse::<u16>());
        if let (Ok(start), Ok(end)) = (start, end)
            && (start..=end).contains(&slot)
        {
            return lines[i + 3].parse().unwrap();
        }
        i += 1;
    }
    panic!("no owner for slot {slot} in {slots}");
}

/// A node whose pool lost one of its connections (and cannot get it back)
/// still serves its keys through the others, even while the shared cluster
/// client, which sends nothing while it reconnects to any node, is stuck
/// on a dead one. Before, a node pool served only if every one of its
/// connections was up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lost_connection_does_not_degrade_a_healthy_node() {
    let mut cluster = RedisCluster::start(3);
    let store = RedisStore::connect(RedisSettings {
        timeout: Duration::from_millis(500),
        reconnect_max_delay: Duration::from_millis(50),
        unresponsive_timeout: Duration::from_millis(500),
        ..options(cluster.url())
    })
    .unwrap();
    assert!(store.wait_connected(Duration::from_secs(10)).await);
    store.ping().await.unwrap();
    let key = "user:flaky";
    let healthy = owner(&cluster, &store.key_for(&check(key)));
    let doomed = *cluster.ports.iter().find(|&&p| p != healthy).unwrap();
    // Let the node pools connect, then use both of the healthy node's.
    store.check(&check(key)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..10 {
        store.check(&check(key)).await.unwrap();
    }

    let admin =
        Builder::from_config(Config::from_url(&format!("redis://127.0.0.1:{healthy}")).unwrap())
            .build()
            .unwrap();
    admin.init().await.unwrap();
    let clients: String = admin
        .custom(fred::cmd!("CLIENT"), vec!["LIST"])
        .await
        .unwrap();
    // The node pool connected last (the cluster client's own connections
    // may have run the first check).
    let mut ids: Vec<u64> = clients
        .lines()
        .filter(|line| line.contains(" cmd=fcall ") || line.contains(" cmd=evalsha "))
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect();
    ids.sort_unstable();
    assert!(ids.len() >= 2, "the node pool's two: {clients}");
    let pool_ids = [ids[ids.len() - 1].to_string()];
    // No new connection gets in (the admin's stays); drop one of the pool's.
    let _: () = admin
        .custom(fred::cmd!("CONFIG"), vec!["SET", "maxclients", "1"])
        .await
        .unwrap();
    let _: i64 = admin
        .custom(
            fred::cmd!("CLIENT"),
            vec!["KILL", "ID", pool_ids[0].as_str()],
        )
        .await
        .unwrap();
    // The cluster client now reconnects to a dead node for good.
    cluster.kill(doomed);
    tokio::time::sleep(Duration::from_millis(300)).await;

    for i in 0..10 {
        let result = store.check(&check(key)).await;
        assert!(result.is_ok(), "check {i}: {result:?}");
    }
    let _: () = admin
        .custom(fred::cmd!("CONFIG"), vec!["SET", "maxclients", "10000"])
        .await
        .unwrap();
    store.quit().await;
}

/// The node pools are set up by the listener of fred's cluster events, not
/// by the first checks: before any check (or `wait_connected`), every
/// primary gets the node pool's connections besides the cluster client's.
/// Before, the first lookup set them up, under write locks, on a request's
/// path, and those first checks went through the cluster client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pools_connect_before_the_first_check() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect(options(cluster.url())).unwrap();
    let primaries: Vec<u16> = cluster.ports.clone();
    // Connections from this store: 2 of the cluster client, 2 of the pool.
    let clients = |port: u16| {
        support::redis_cli(port, &["CLIENT", "LIST"])
            .lines()
            .filter(|line| !line.contains("cmd=client|list"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counts: Vec<usize> = primaries.iter().map(|&p| clients(p)).collect();
        if counts.iter().all(|&n| n >= 4) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node pools not connected: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.quit().await;
}
