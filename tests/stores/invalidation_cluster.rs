//! The invalidation channel on a real 3-node Redis Cluster: classic PUBLISH
//! is broadcast over the cluster bus, so an instance subscribed on one node
//! hears invalidations published on any other.

use crate::support;
use crate::support::LimiterExt;

use std::time::{Duration, Instant};

use support::invalidation::{deny_and_cache, eventually, instance, one_a_day};
use support::{RedisCluster, redis_cli, unique_key};

/// How many subscribers of `channel` the node on `port` holds itself.
fn subscribers_on(port: u16, channel: &str) -> u64 {
    let reply = redis_cli(port, &["pubsub", "numsub", channel]);
    reply
        .lines()
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_published_on_any_node_reaches_a_subscriber_on_another() {
    let cluster = RedisCluster::start(3);
    let a = instance(cluster.url()).await;
    let channel = a.store.invalidation_channel();
    let on: Vec<u16> = cluster
        .ports
        .iter()
        .copied()
        .filter(|&port| subscribers_on(port, &channel) == 1)
        .collect();
    assert_eq!(on.len(), 1, "A subscribes on exactly one node");
    for &port in cluster.ports.iter().filter(|&&p| p != on[0]) {
        let received = a.metrics.invalidations.received.get();
        let published = Instant::now();
        let reached = redis_cli(port, &["publish", &channel, "some-key"]);
        assert_eq!(reached, "0", "no subscriber on node {port} itself");
        eventually(Duration::from_secs(5), "delivered over the bus", || {
            a.metrics.invalidations.received.get() > received
        })
        .await;
        println!(
            "published on node {port}, heard by A (subscribed on {}) after {:?}",
            on[0],
            published.elapsed()
        );
    }

    // End to end, B configured with another node: A's cached denial ends.
    let other = cluster
        .ports
        .iter()
        .find(|&&p| p != cluster.seed())
        .unwrap();
    let b = instance(format!("redis-cluster://127.0.0.1:{other}")).await;
    let check = one_a_day(&unique_key("cluster"));
    deny_and_cache(&a, &check).await;
    let started = Instant::now();
    // A real reset through B: the script publishes on the node owning the
    // key's slot, and the bus carries it to A's node.
    assert!(b.limiter.reset(&check).await.unwrap().allowed);
    assert_eq!(b.metrics.invalidations.sent_ok.get(), 1);
    while !a.limiter.check(&check).await.unwrap().allowed {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "never delivered"
        );
    }
    println!(
        "cluster: A allowed {:?} after B's reset call",
        started.elapsed()
    );
    // The heartbeat PING reaches the subscription's node: still up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(a.metrics.invalidations.subscription_lost.get(), 0);
    assert!(!a.limiter.deny_cache_suspended());
}
