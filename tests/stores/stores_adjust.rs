//! Reset and refund through every store (embedded and Redis) on a
//! controlled clock: each algorithm's refund semantics, never beyond
//! capacity, a key without state, reset to full capacity, policy and
//! multi-limit checks, and the same answers as the Rust twins.

use crate::support;
use crate::support::LimiterExt;
use crate::support::StoreExt;
use ratekeeper::domain::Window;

use std::sync::Arc;

use ratekeeper::domain::algorithms::{State, apply_all, refund_all, reset_all};
use ratekeeper::domain::{Algorithm, Check, Limit, ManualClock, Outcome, Rule};
use ratekeeper::store::Store;

use support::unique_key;

for_each_store!(
    every_algorithm_refunds_up_to_capacity_and_resets_to_full,
    refunds_give_back_the_most_recent_spending,
    multi_limit_policy_checks_refund_each_limit_and_reset_all,
    policy_and_inline_state_are_adjusted_apart,
    the_limiter_drops_cached_denials_on_reset_and_refund,
    a_full_sliding_log_refunds_like_its_twin,
);

pub(crate) const T0: u64 = 1_767_225_600_000_000; // a window boundary for every window used here
pub(crate) const SEC: u64 = 1_000_000;
pub(crate) const MS: u64 = 1_000;

/// 5 per 10 s (the buckets: one unit per 2 s, burst 5).
pub(crate) fn rule(algorithm: Algorithm) -> Rule {
    Rule {
        algorithm,
        limit: 5,
        window: Window::Length(10 * SEC),
        burst: 5,
    }
}

pub(crate) fn with_cost(check: &Check, cost: u64) -> Check {
    Check {
        cost,
        ..check.clone()
    }
}

pub(crate) async fn spend(store: &dyn Store, check: &Check, cost: u64) -> Vec<Outcome> {
    store.check(&with_cost(check, cost)).await.unwrap()
}

async fn refund(store: &dyn Store, check: &Check, cost: u64) -> Vec<Outcome> {
    store
        .refund(&with_cost(check, cost))
        .await
        .unwrap()
        .outcomes
}

fn remaining(outcomes: &[Outcome]) -> Vec<u64> {
    outcomes.iter().map(|o| o.remaining).collect()
}

async fn every_algorithm_refunds_up_to_capacity_and_resets_to_full(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    for algorithm in Algorithm::RATES {
        let at = format!("{} {algorithm:?}", store.name());
        clock.set_us(T0);
        let c = Check::single(unique_key("adj"), rule(algorithm), 0);
        // A key without state: a no-op, answered like a cost-0 check.
        let none = refund(&*store, &c, 3).await;
        assert_eq!(none, spend(&*store, &c, 0).await, "{at}");
        assert_eq!((none[0].remaining, none[0].reset_after_us), (5, 0), "{at}");

        assert!(spend(&*store, &c, 4).await[0].allowed, "{at}");
        let after = refund(&*store, &c, 2).await;
        assert_eq!(after, spend(&*store, &c, 0).await, "{at}: answer is a look");
        assert_eq!(remaining(&after), [3], "{at}");
        assert_eq!(remaining(&refund(&*store, &c, 100).await), [5], "{at}");

        // Denied, refunded, allowed again.
        assert!(spend(&*store, &c, 5).await[0].allowed, "{at}");
        assert!(!spend(&*store, &c, 1).await[0].allowed, "{at}");
        assert!(refund(&*store, &c, 1).await[0].allowed, "{at}");
        assert!(spend(&*store, &c, 1).await[0].allowed, "{at}");

        let reset = store.reset(&c).await.unwrap();
        assert_eq!(reset[0].remaining, 5, "{at}");
        assert_eq!(reset[0].reset_after_us, 0, "{at}");
        assert!(
            spend(&*store, &c, 5).await[0].allowed,
            "{at}: full capacity"
        );
    }
}

/// The algorithm-specific part: which spending a refund gives back.
async fn refunds_give_back_the_most_recent_spending(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let name = store.name();
    // Fixed window: only the current window's count.
    let fw = Check::single(unique_key("fw"), rule(Algorithm::FixedWindow), 0);
    clock.set_us(T0 + 9 * SEC);
    spend(&*store, &fw, 5).await;
    clock.set_us(T0 + 10 * SEC);
    spend(&*store, &fw, 2).await;
    assert_eq!(remaining(&refund(&*store, &fw, 5).await), [5], "{name}");

    // Sliding window: the current window first, then the previous.
    let sw = Check::single(unique_key("sw"), rule(Algorithm::SlidingWindow), 0);
    clock.set_us(T0 + 5 * SEC);
    spend(&*store, &sw, 4).await;
    clock.set_us(T0 + 10 * SEC); // previous window weighs fully
    spend(&*store, &sw, 1).await;
    assert_eq!(remaining(&refund(&*store, &sw, 2).await), [2], "{name}");
    // Half a window on: the previous window's 3 weigh 1.5, counted as
    // 1 (the decision floors the weight), so 4 remain.
    clock.set_us(T0 + 15 * SEC);
    assert_eq!(remaining(&spend(&*store, &sw, 0).await), [4], "{name}");

    // Sliding log: the newest units go, the oldest still expire on time.
    let sl = Check::single(unique_key("sl"), rule(Algorithm::SlidingLog), 0);
    clock.set_us(T0);
    spend(&*store, &sl, 2).await;
    clock.set_us(T0 + 4 * SEC);
    spend(&*store, &sl, 3).await;
    assert_eq!(remaining(&refund(&*store, &sl, 4).await), [4], "{name}");
    clock.set_us(T0 + 10 * SEC); // the 1 unit left of the first entry
    assert_eq!(remaining(&spend(&*store, &sl, 0).await), [5], "{name}");

    // Token bucket and GCRA: tokens back / the TAT back, up to full.
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let b = Check::single(unique_key("b"), rule(algorithm), 0);
        clock.set_us(T0);
        spend(&*store, &b, 5).await;
        clock.set_us(T0 + SEC);
        let back = refund(&*store, &b, 2).await[0];
        assert_eq!(back.remaining, 2, "{name} {algorithm:?}");
        // 3 used, the first refill lands 1 s from now: full in 5 s.
        assert_eq!(back.reset_after_us, 5 * SEC, "{name} {algorithm:?}");
    }
}

fn policy_check(key: &str) -> Check {
    let limit = |name: &str, rule: Rule| Limit {
        name: name.into(),
        rule,
        scope: None,
        level: None,
    };
    let mut check = Check::multi(
        key,
        vec![
            limit(
                "second",
                Rule {
                    limit: 2,
                    window: Window::Length(SEC),
                    burst: 2,
                    ..rule(Algorithm::FixedWindow)
                },
            ),
            limit(
                "log",
                Rule {
                    window: Window::Length(60 * SEC),
                    ..rule(Algorithm::SlidingLog)
                },
            ),
            limit("bucket", rule(Algorithm::Gcra)),
        ],
        0,
    );
    check.policy = Some(Arc::from("api"));
    check
}

/// Every limit gives back on its own, up to `cost`; reset empties all; and
/// each store answers exactly as the Rust twins.
async fn multi_limit_policy_checks_refund_each_limit_and_reset_all(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    let c = policy_check(&unique_key("pol"));
    let rules: Vec<&Rule> = c.limits.iter().map(|l| &l.rule).collect();
    let mut states: Vec<State> = rules.iter().map(|r| State::fresh(r.algorithm)).collect();
    let steps: [(u64, &str, u64); 8] = [
        (0, "check", 2),
        (SEC, "check", 2),
        (SEC, "refund", 3),
        (SEC + 1, "check", 1),
        (SEC + 500 * MS, "refund", 1),
        (2 * SEC, "reset", 0),
        (2 * SEC, "check", 2),
        (3 * SEC, "refund", 0),
    ];
    for (at, op, cost) in steps {
        clock.set_us(T0 + at);
        let c = with_cost(&c, cost);
        let (got, want) = match op {
            "check" => (
                store.check(&c).await,
                apply_all(&mut states, &rules, T0 + at, cost),
            ),
            "refund" => (
                store.refund(&c).await.map(|a| a.outcomes),
                refund_all(&mut states, &rules, T0 + at, cost),
            ),
            _ => (
                store.reset(&c).await.map(|a| a.outcomes),
                reset_all(&mut states, &rules, T0 + at),
            ),
        };
        assert_eq!(got.unwrap(), want, "{} {op} at +{at}", store.name());
    }
    // The refund of 3 gave back 2 on `second` (all it had), 3 on the others.
    clock.set_us(T0 + SEC);
    let c2 = policy_check(&unique_key("pol"));
    spend(&*store, &c2, 2).await;
    spend(&*store, &c2, 0).await;
    clock.set_us(T0 + SEC + 1);
    spend(&*store, &c2, 0).await;
    let after = refund(&*store, &c2, 3).await;
    assert_eq!(remaining(&after), [2, 5, 5], "{}", store.name());
}

/// A policy's state is its own: refunding or resetting the inline rule of
/// the same key, algorithm and window leaves it alone.
async fn policy_and_inline_state_are_adjusted_apart(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let key = unique_key("apart");
    let c = policy_check(&key);
    let inline = Check::single(key.clone(), c.limits[0].rule, 0);
    spend(&*store, &c, 2).await;
    spend(&*store, &inline, 2).await;
    store.reset(&inline).await.unwrap();
    assert_eq!(
        spend(&*store, &c, 0).await[0].remaining,
        0,
        "{}",
        store.name()
    );
    assert_eq!(spend(&*store, &inline, 0).await[0].remaining, 2);
}

/// A denial in the local deny cache does not outlive a reset or refund
/// made through the same limiter: the next check asks the store.
async fn the_limiter_drops_cached_denials_on_reset_and_refund(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    use ratekeeper::deny_cache::DenyCache;
    use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
    use ratekeeper::metrics::Metrics;
    use std::time::Duration;

    clock.set_us(T0);
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let metrics = Arc::new(Metrics::new());
    let limiter = Arc::new(
        Limiter::new(store, policy, metrics.clone())
            .with_deny_cache(DenyCache::new(100, Arc::new(clock.clone()))),
    );
    limiter.probe().await;
    let c = Check::single(unique_key("dc"), rule(Algorithm::FixedWindow), 5);
    let one = with_cost(&c, 1);
    for adjust in ["reset", "refund"] {
        limiter.check(&c).await.unwrap();
        assert!(!limiter.check(&one).await.unwrap().allowed);
        let hits = metrics.deny_cache.hits.get();
        assert!(!limiter.check(&one).await.unwrap().allowed);
        assert_eq!(metrics.deny_cache.hits.get(), hits + 1, "cached");
        clock.advance_us(1);
        let decision = match adjust {
            "reset" => limiter.reset(&c).await.unwrap(),
            _ => limiter.refund(&c).await.unwrap(),
        };
        assert!(decision.allowed && decision.remaining == 5, "{adjust}");
        assert!(limiter.check(&one).await.unwrap().allowed, "{adjust}");
        limiter.reset(&c).await.unwrap();
        // Denials asked for at the instant of a reset are not cached.
        clock.advance_us(1);
    }
}

/// A sliding log at its entry bound (about 2 × 63 entries): a refund
/// reaching back over most of them, splitting one, answers as the Rust
/// twin, and so does every check after it as entries expire.
async fn a_full_sliding_log_refunds_like_its_twin(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let log = Rule {
        algorithm: Algorithm::SlidingLog,
        limit: 100_000,
        window: Window::Length(63 * SEC), // slots of 1 s once past 63 entries
        burst: 100_000,
    };
    let c = Check::single(unique_key("log"), log, 0);
    let mut state = [State::fresh(Algorithm::SlidingLog)];
    let mut at = |now: u64, op: &str, cost: u64| {
        clock.set_us(now);
        match op {
            "check" => apply_all(&mut state, &[&log], now, cost),
            _ => refund_all(&mut state, &[&log], now, cost),
        }
    };
    let mut steps: Vec<(u64, &str, u64)> =
        (0..63).map(|i| (T0 + i * 10 * MS, "check", 2)).collect();
    steps.extend((1..62).map(|i| (T0 + i * SEC + 500 * MS, "check", 3)));
    steps.push((T0 + 62 * SEC, "refund", 200));
    steps.extend((62..130).step_by(4).map(|s| (T0 + s * SEC, "check", 0)));
    for (now, op, cost) in steps {
        let want = at(now, op, cost);
        let c = with_cost(&c, cost);
        let got = match op {
            "check" => store.check(&c).await.unwrap(),
            _ => store.refund(&c).await.unwrap().outcomes,
        };
        assert_eq!(got, want, "{} {op} {cost} at +{}", store.name(), now - T0);
    }
    let State::SlidingLog(s) = &state[0] else {
        unreachable!()
    };
    assert!(s.entries.is_empty(), "all expired by the end");
}
