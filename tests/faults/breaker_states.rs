//! The circuit breakers inside the limiter, driven by a manual clock over
//! the embedded store with a switchable fault, without sleeps: the life of
//! a breaker (open, half-open, closed), one breaker per failure domain,
//! readiness and its reason.

use crate::domains_store;
use crate::support::LimiterExt;

use std::sync::atomic::Ordering;

use domains_store::{Domains, MS, check_on, manual_limiter, reached};
use ratekeeper::domain::ManualClock;
use ratekeeper::limiter::domains::AUTH_HINT;
use ratekeeper::store::StoreError;
#[tokio::test]
async fn a_sustained_failure_opens_the_breaker_and_a_trial_closes_it() {
    let store = Domains::new(StoreError::Timeout("frozen".into()));
    let clock = ManualClock::new(0);
    let (limiter, metrics) = manual_limiter(store.clone(), &clock).await;
    store.set_down(0, true);
    for _ in 0..5 {
        assert!(!reached(&limiter, "d0:k").await);
    }
    assert!(!limiter.is_ready(), "five in a row opened it");
    assert!(
        metrics
            .render()
            .contains("ratekeeper_breaker_opened_total 1")
    );

    // Open: the store is not asked, even once it is back.
    store.set_down(0, false);
    clock.advance_us(999 * MS);
    assert!(!reached(&limiter, "d0:k").await);
    // Half-open after open_for: the first check is the trial and closes it.
    clock.advance_us(MS);
    assert!(reached(&limiter, "d0:k").await);
    assert!(limiter.is_ready());
    assert!(
        metrics
            .render()
            .contains("ratekeeper_breaker_state{state=\"closed\"} 1")
    );
}

#[tokio::test]
async fn a_failed_trial_reopens_the_breaker() {
    let store = Domains::new(StoreError::Unavailable("refused".into()));
    let clock = ManualClock::new(0);
    let (limiter, metrics) = manual_limiter(store.clone(), &clock).await;
    store.set_down(0, true);
    for _ in 0..5 {
        limiter.check(&check_on("d0:k")).await.unwrap();
    }
    clock.advance_us(1_000 * MS);
    assert!(!reached(&limiter, "d0:k").await, "the trial fails");
    assert!(
        metrics
            .render()
            .contains("ratekeeper_breaker_opened_total 2")
    );
    store.set_down(0, false);
    clock.advance_us(1_000 * MS);
    assert!(reached(&limiter, "d0:k").await, "the next trial");
}

#[tokio::test]
async fn one_dead_domain_does_not_degrade_the_others() {
    let store = Domains::new(StoreError::Timeout("node down".into()));
    let clock = ManualClock::new(0);
    let (limiter, metrics) = manual_limiter(store.clone(), &clock).await;
    store.set_down(1, true);
    for i in 0..50 {
        assert!(!reached(&limiter, &format!("d1:k{i}")).await);
        assert!(
            reached(&limiter, &format!("d2:k{i}")).await,
            "domain 2, check {i}"
        );
        assert!(reached(&limiter, &format!("d0:k{i}")).await);
    }
    let text = metrics.render();
    assert!(
        text.contains("ratekeeper_breaker_state{state=\"open\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("ratekeeper_breaker_state{state=\"closed\"} 2"),
        "{text}"
    );
    assert!(limiter.is_ready(), "the other domains answer");
}

#[tokio::test]
async fn domains_beyond_the_cap_share_one_breaker() {
    let store = Domains::new(StoreError::Timeout("x".into()));
    let clock = ManualClock::new(0);
    let (limiter, metrics) = manual_limiter(store.clone(), &clock).await;
    for d in 0..1_000 {
        assert!(reached(&limiter, &format!("d{d}:k")).await);
    }
    let text = metrics.render();
    let closed = format!(
        "ratekeeper_breaker_state{{state=\"closed\"}} {}",
        ratekeeper::limiter::domains::MAX_DOMAINS
    );
    assert!(text.contains(&closed), "{text}");
}

#[tokio::test]
async fn refused_credentials_say_so_in_readiness_without_the_reply() {
    let store = Domains::new(StoreError::Auth(
        "WRONGPASS invalid username-password pair or user is disabled.".into(),
    ));
    store.pings_fail.store(true, Ordering::SeqCst);
    let clock = ManualClock::new(0);
    let (limiter, metrics) = manual_limiter(store.clone(), &clock).await;
    let reason = limiter.readiness().unwrap_err();
    assert_eq!((reason.kind, reason.message.as_str()), ("auth", AUTH_HINT));
    assert!(
        metrics
            .render()
            .contains("ratekeeper_store_errors_total{kind=\"auth\"} 1")
    );
    // Checks are answered by policy and open the breaker like an outage.
    store.set_down(0, true);
    for _ in 0..5 {
        assert!(!reached(&limiter, "d0:k").await);
    }
    assert_eq!(limiter.readiness().unwrap_err().kind, "auth");
}

/// Readiness must come back without a check: an instance that is not ready
/// gets no traffic, so waiting for a check would keep it out for good.
#[tokio::test]
async fn an_idle_instance_becomes_ready_again_from_pings_alone() {
    let store = Domains::new(StoreError::Timeout("frozen".into()));
    let clock = ManualClock::new(0);
    let (limiter, _) = manual_limiter(store.clone(), &clock).await;
    store.set_down(0, true);
    for _ in 0..5 {
        limiter.check(&check_on("d0:k")).await.unwrap();
    }
    // Pings kept answering: the breaker half-opens once open_for is over.
    store.set_down(0, false);
    limiter.probe().await;
    assert!(!limiter.is_ready());
    clock.advance_us(1_000 * MS);
    limiter.probe().await;
    assert!(limiter.is_ready(), "half-open after open_for, on a ping");

    // Pings failed too: the first ping that answers half-opens it at once.
    store.set_down(0, true);
    for _ in 0..5 {
        limiter.check(&check_on("d0:k")).await.unwrap();
    }
    store.pings_fail.store(true, Ordering::SeqCst);
    limiter.probe().await;
    assert_eq!(limiter.readiness().unwrap_err().kind, "timeout");
    store.pings_fail.store(false, Ordering::SeqCst);
    store.set_down(0, false);
    limiter.probe().await;
    assert!(limiter.is_ready(), "no need to wait out open_for");
    assert!(reached(&limiter, "d0:k").await, "the trial closes it");
}
