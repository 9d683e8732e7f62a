//! The deny cache answers exactly as the store would, on the random
//! sequences of `parity.rs`, resets and refunds (through the limiter, which
//! ends the cached denials they change) included.

use crate::support::LimiterExt;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratekeeper::domain::{Algorithm, Check, ManualClock, Rule};
use ratekeeper::store::Store;

use super::{adjusted_with, case, rule, runner, runtime, rust_outcomes, simulated_redis};
use crate::support::ops::Op;
use crate::support::{RedisServer, unique_key};

/// The deny cache answers exactly as the store would: the same random
/// sequences (clock moving forward; the cache measures on a monotonic clock)
/// through limiter + cache + store and through the pure functions must give
/// identical decisions, for the embedded store and for Redis.
fn run_deny_cache_parity(algorithm: Algorithm, cases: u32, redis: Option<&RedisServer>) {
    use ratekeeper::deny_cache::DenyCache;
    use ratekeeper::domain::Decision;
    use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
    use ratekeeper::metrics::Metrics;
    use ratekeeper::store::memory::MemoryStore;

    let runtime = runtime();
    let clock = ManualClock::new(0);
    let store: Arc<dyn Store> = match redis {
        Some(server) => Arc::new(simulated_redis(&runtime, server.url(), "cache:", &clock)),
        None => Arc::new(MemoryStore::new(Arc::new(clock.clone()), 1_000_000)),
    };
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let metrics = Arc::new(Metrics::new());
    let limiter = Arc::new(
        Limiter::new(store, policy, metrics.clone())
            .with_deny_cache(DenyCache::new(1_000, Arc::new(clock.clone()))),
    );
    runtime.block_on(limiter.probe());

    let mut runner = runner(cases);
    runner
        // No give-backs: they go to the store, not through the limiter
        // (lease holders give back), so its deny cache never hears of them.
        .run(&adjusted_with(case(algorithm), false), |case| {
            let case = case.forward();
            let expected = rust_outcomes(&case);
            let key = unique_key("dc");
            for (i, ((now, cost), want)) in case.timeline().zip(&expected).enumerate() {
                clock.set_us(now);
                let check = Check::single(key.clone(), case.rule, cost);
                let op = case.op(i);
                let got = runtime
                    .block_on(async {
                        match op {
                            Op::Check => limiter.check(&check).await,
                            Op::Reset => limiter.reset(&check).await,
                            Op::Refund => limiter.refund(&check).await,
                            Op::Settle(actual) => limiter
                                .settle(&check, actual, None)
                                .await
                                .map(|a| a.decision),
                            // The limiter has no lease path yet; the rate
                            // algorithms' sequences never hold these.
                            Op::Acquire(_)
                            | Op::Release(_)
                            | Op::Renew(_)
                            | Op::GiveBack { .. } => {
                                unreachable!("{op:?} in a rate algorithm's sequence")
                            }
                        }
                    })
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let want = Decision::from_outcomes(&check, &[*want]);
                prop_assert_eq!(
                    got,
                    want,
                    "step {} ({:?} at t={}, cost={}) of {:?}",
                    i,
                    op,
                    now,
                    cost,
                    case.rule
                );
            }
            Ok(())
        })
        .unwrap();
    // Every algorithm, buckets too: an inline bucket's state is its rule's.
    assert!(
        metrics.deny_cache.hits.get() > 0,
        "the sequences exercised the cache"
    );
}

#[test]
fn deny_cache_answers_exactly_as_the_embedded_store() {
    for algorithm in Algorithm::RATES {
        run_deny_cache_parity(algorithm, 150, None);
    }
}

#[test]
fn deny_cache_answers_exactly_as_redis() {
    let redis = RedisServer::start();
    for algorithm in Algorithm::RATES {
        run_deny_cache_parity(algorithm, 60, Some(&redis));
    }
}

/// Two rules (different limits and bursts, same window) on one key, checks
/// interleaved at random: the deny cache may never change a decision, and
/// its retry_after may only be shorter than the store's (another rule's
/// allowed traffic can push the true wait later; never earlier).
#[test]
fn deny_cache_never_changes_a_decision_with_two_rules_on_one_key() {
    use ratekeeper::deny_cache::DenyCache;
    use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
    use ratekeeper::metrics::Metrics;
    use ratekeeper::store::memory::MemoryStore;

    let runtime = runtime();
    let strategy = prop::sample::select(Algorithm::RATES.to_vec()).prop_flat_map(|algorithm| {
        (
            case(algorithm),
            rule(algorithm),
            prop::collection::vec(any::<bool>(), 40),
        )
    });
    let mut runner = runner(400);
    runner
        .run(&strategy, |(case, other, picks)| {
            let window_us = case.rule.window_us();
            let other = Rule {
                window: case.rule.window,
                ..other
            };
            // The other rule must itself be valid for this window.
            if other.algorithm.has_burst()
                && (other.limit > window_us
                    || other.burst * (window_us / other.limit) > 366 * 86_400 * 1_000_000)
            {
                return Ok(());
            }
            let clock = ManualClock::new(0);
            let policy = FailurePolicy {
                mode: FailureMode::Open,
                closed_retry_after: Duration::from_secs(1),
            };
            let store =
                |clock: &ManualClock| Arc::new(MemoryStore::new(Arc::new(clock.clone()), 1_000));
            let cached = Arc::new(
                Limiter::new(store(&clock), policy, Arc::new(Metrics::new()))
                    .with_deny_cache(DenyCache::new(100, Arc::new(clock.clone()))),
            );
            let plain = Arc::new(Limiter::new(
                store(&clock),
                policy,
                Arc::new(Metrics::new()),
            ));
            runtime.block_on(async {
                cached.probe().await;
                plain.probe().await;
            });
            let case = case.forward();
            for (i, ((now, cost), pick)) in case.timeline().zip(&picks).enumerate() {
                clock.set_us(now);
                let rule = if *pick { other } else { case.rule };
                let max_cost = if rule.algorithm.has_burst() {
                    rule.burst
                } else {
                    rule.limit
                };
                let check = Check::single("shared", rule, cost.min(max_cost));
                let (a, b) = runtime.block_on(async {
                    (
                        cached.check(&check).await.unwrap(),
                        plain.check(&check).await.unwrap(),
                    )
                });
                prop_assert_eq!(a.allowed, b.allowed, "step {}: {:?}", i, check);
                prop_assert!(
                    a.retry_after_ms <= b.retry_after_ms,
                    "step {}: cached {:?} store {:?}",
                    i,
                    a,
                    b
                );
            }
            Ok(())
        })
        .unwrap();
}
