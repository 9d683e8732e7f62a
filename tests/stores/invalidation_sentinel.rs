//! The invalidation subscriber follows a Sentinel failover: the primary is
//! SIGKILLed, the cache is off until the subscriber is on the promoted
//! replica, and invalidations then reach it there.

use crate::support;
use crate::support::LimiterExt;

use std::time::{Duration, Instant};

use support::invalidation::{deny_and_cache, eventually, instance, one_a_day};
use support::{SentinelGroup, redis_cli, sentinel_primary, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_follows_the_primary_after_a_failover() {
    let mut group = SentinelGroup::start(3);
    let (a, b) = (instance(group.url()).await, instance(group.url()).await);
    let channel = a.store.invalidation_channel();
    let subscribers = |port| redis_cli(port, &["pubsub", "numsub", &channel]);
    assert!(
        subscribers(group.primary.port).ends_with('2'),
        "A and B on the primary"
    );

    let check = one_a_day(&unique_key("failover"));
    deny_and_cache(&a, &check).await;
    group.primary.kill();
    eventually(Duration::from_secs(5), "cache suspended", || {
        a.limiter.deny_cache_suspended()
    })
    .await;
    let new_primary = group.replica.port;
    let ports = group.sentinel_ports();
    eventually(Duration::from_secs(20), "replica promoted", || {
        ports
            .iter()
            .all(|&p| sentinel_primary(p) == Some(new_primary))
    })
    .await;
    for instance in [&a, &b] {
        eventually(
            Duration::from_secs(20),
            "subscribed on the new primary",
            || !instance.limiter.deny_cache_suspended(),
        )
        .await;
        eventually(Duration::from_secs(20), "store answers", || {
            instance.limiter.is_ready()
        })
        .await;
    }
    assert!(
        subscribers(new_primary).ends_with('2'),
        "{}",
        subscribers(new_primary)
    );

    // The state lived on the old primary and was replicated: the denial
    // may still hold; start afresh on a new key either way.
    let check = one_a_day(&unique_key("after"));
    deny_and_cache(&a, &check).await;
    let started = Instant::now();
    // A real reset through B: its script publishes the invalidation.
    assert!(b.limiter.reset(&check).await.unwrap().allowed);
    assert_eq!(b.metrics.invalidations.sent_ok.get(), 1);
    while !a.limiter.check(&check).await.unwrap().allowed {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "never delivered"
        );
    }
}
