//! A reset on another instance wakes this instance's waiters: the head of
//! a line sleeping out a one-a-minute denial is allowed as soon as the
//! invalidation arrives, not at its planned retry. Real redis-server only.
//! The limit is a sliding log's: its retry is a minute after the spend,
//! where an epoch-aligned window's end may come at any moment (then the
//! waiter was never denied, or woken by the window, not the reset).

use crate::support;
use crate::support::LimiterExt;

use std::time::{Duration, Instant};

use ratekeeper::domain::Algorithm;
use support::invalidation::instance;
use support::{RedisServer, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_through_b_wakes_a_waiter_on_a() {
    let server = RedisServer::start();
    let (a, b) = (instance(server.url()).await, instance(server.url()).await);
    let check = support::check(&unique_key("wake"), Algorithm::SlidingLog, 1, "1m", 1);
    assert!(a.limiter.check(&check).await.unwrap().allowed);
    let (limiter, c) = (a.limiter.clone(), check.clone());
    let waiter =
        tokio::spawn(async move { limiter.check_waiting(&c, Duration::from_secs(120)).await });
    while a.limiter.waiters() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    b.limiter.reset(&check).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken long before its retry (a minute)")
        .unwrap()
        .unwrap();
    assert!(waited.decision.allowed);
    println!(
        "waiter on A allowed {:?} after B's reset began",
        started.elapsed()
    );
}
