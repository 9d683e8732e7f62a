//! Breakers as cluster nodes come and go, on a manual clock without sleeps:
//! idle domains are forgotten, an unused domain 0 does not make an instance
//! look ready, a check answered on one node moves no other node's breaker,
//! and a failing check does not rewrite the readiness reason every time.

mod domains_store;

use std::sync::atomic::Ordering;

use domains_store::{Domains, MS, check_on, manual_limiter, reached};
use ratekeeper::domain::ManualClock;
use ratekeeper::limiter::domains::MAX_DOMAINS;
use ratekeeper::store::StoreError;

const S: u64 = 1_000 * MS;

fn gauge(text: &str, state: &str) -> String {
    let prefix = format!("ratekeeper_breaker_state{{state=\"{state}\"}} ");
    let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap();
    line[prefix.len()..].to_string()
}

/// A ping lands on the dead node, then a check on a live node answers:
/// that proves nothing about the dead node, whose breaker stays open (no
/// trial sent to it before `open_for` is over).
#[tokio::test]
async fn a_check_answered_on_one_node_leaves_the_other_breakers_alone() {
    let store = Domains::new(StoreError::Timeout("node down".into()));
    let clock = ManualClock::new(0);
    let (limiter, metrics) = manual_limiter(store.clone(), &clock).await;
    store.set_down(1, true);
    for i in 0..5 {
        assert!(!reached(&limiter, &format!("d1:k{i}")).await);
    }
    store.pings_fail.store(true, Ordering::SeqCst);
    limiter.probe().await;
    store.pings_fail.store(false, Ordering::SeqCst);
    clock.advance_us(10 * MS);
    assert!(reached(&limiter, "d2:k").await);
    assert_eq!(gauge(&metrics.render(), "half_open"), "0");
    let calls = store.calls_on_1.load(Ordering::SeqCst);
    assert!(!reached(&limiter, "d1:k").await);
    assert_eq!(
        store.calls_on_1.load(Ordering::SeqCst),
        calls,
        "no trial on the dead node"
    );
}
