//! Breakers as cluster nodes come and go, on a manual clock without sleeps:
//! idle domains are forgotten, an unused domain 0 does not make an instance
//! look ready, a check answered on one node moves no other node's breaker,
//! and a failing check does not rewrite the readiness reason every time.

use crate::domains_store;
use crate::support::LimiterExt;

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

/// The old primary after a failover: its breaker opens, half-opens, and no
/// check reaches it again. It must not stay half-open for good.
#[tokio::test]
async fn the_breaker_of_a_node_that_went_away_is_forgotten() {
    let store = Domains::new(StoreError::Timeout("node down".into()));
    let clock = ManualClock::new(0);
    let (limiter, metrics) = manual_limiter(store.clone(), &clock).await;
    store.set_down(1, true);
    for i in 0..5 {
        assert!(!reached(&limiter, &format!("d1:k{i}")).await);
    }
    assert!(reached(&limiter, "d2:k").await);
    clock.advance_us(S);
    limiter.probe().await;
    assert_eq!(gauge(&metrics.render(), "half_open"), "1");

    // Only domain 2 sees checks from now on.
    for _ in 0..61 {
        clock.advance_us(S);
        assert!(reached(&limiter, "d2:k").await);
        limiter.probe().await;
    }
    let text = metrics.render();
    assert_eq!(gauge(&text, "half_open"), "0", "{text}");
    assert_eq!(gauge(&text, "open"), "0", "{text}");
    // Domain 0 and domain 2.
    assert_eq!(gauge(&text, "closed"), "2", "{text}");
    assert!(limiter.is_ready());
}

/// Pod IPs change: after many nodes came and went, a new node still gets a
/// breaker of its own, not the overflow one shared with another node.
#[tokio::test]
async fn nodes_that_went_away_leave_room_for_new_ones() {
    let store = Domains::new(StoreError::Timeout("node down".into()));
    let clock = ManualClock::new(0);
    let (limiter, _) = manual_limiter(store.clone(), &clock).await;
    for d in 100..100 + MAX_DOMAINS as u64 {
        assert!(reached(&limiter, &format!("d{d}:k")).await);
    }
    clock.advance_us(61 * S);
    store.set_down(1, true);
    for i in 0..5 {
        assert!(!reached(&limiter, &format!("d1:k{i}")).await);
    }
    assert!(
        reached(&limiter, "d2:k").await,
        "domain 2 does not share domain 1's open breaker"
    );
}

/// In a cluster no check goes to domain 0: its breaker, closed forever,
/// must not make the instance look ready when every primary's is open.
#[tokio::test]
async fn an_unused_domain_zero_does_not_make_a_dead_cluster_ready() {
    let store = Domains::new(StoreError::Timeout("node down".into()));
    let clock = ManualClock::new(0);
    let (limiter, _) = manual_limiter(store.clone(), &clock).await;
    assert!(reached(&limiter, "d1:k").await);
    assert!(reached(&limiter, "d2:k").await);
    assert!(limiter.is_ready());
    store.set_down(1, true);
    store.set_down(2, true);
    for i in 0..5 {
        assert!(!reached(&limiter, &format!("d1:k{i}")).await);
        assert!(!reached(&limiter, &format!("d2:k{i}")).await);
    }
    limiter.probe().await;
    assert!(!limiter.is_ready(), "every real domain's breaker is open");
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

/// Every failing check used to lock and rewrite the reason; now only a
/// new kind of error, or a second later, does.
#[tokio::test]
async fn failing_checks_rewrite_the_readiness_reason_only_on_a_change() {
    let store = Domains::new(StoreError::Timeout("first".into()));
    let clock = ManualClock::new(0);
    let (limiter, _) = manual_limiter(store.clone(), &clock).await;
    let reason = || limiter.readiness().unwrap_err().message;
    store.pings_fail.store(true, Ordering::SeqCst);
    limiter.probe().await;
    assert!(reason().contains("first"), "a ping always writes it");
    store.set_down(0, true);
    store.set_error(StoreError::Timeout("second".into()));
    limiter.check(&check_on("d0:k")).await.unwrap();
    assert!(reason().contains("second"), "{}", reason());
    store.set_error(StoreError::Timeout("third".into()));
    clock.advance_us(500 * MS);
    limiter.check(&check_on("d0:k")).await.unwrap();
    assert!(reason().contains("second"), "same kind: {}", reason());
    store.set_error(StoreError::Unavailable("fourth".into()));
    limiter.check(&check_on("d0:k")).await.unwrap();
    assert!(reason().contains("fourth"), "new kind: {}", reason());
    store.set_error(StoreError::Unavailable("fifth".into()));
    clock.advance_us(S);
    limiter.check(&check_on("d0:k")).await.unwrap();
    assert!(reason().contains("fifth"), "a second later: {}", reason());
}
