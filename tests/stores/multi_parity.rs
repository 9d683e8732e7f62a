//! Checks of several limits, all or nothing: the Lua (`lua/check.lua`
//! through `lua/ops.lua`, alone and batched, on a real Redis, on a controlled clock) and the Rust
//! (`apply_all` on fresh states) must give identical outcomes for every
//! limit at every step; a denied check's retry_after must be exact; and the
//! deny cache must answer multi-limit checks as the store would.

use crate::support;
use crate::support::LimiterExt;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use ratekeeper::deny_cache::DenyCache;
use ratekeeper::domain::algorithms::{State, apply_all};
use ratekeeper::domain::{Check, Decision, ManualClock, Outcome};
use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
use ratekeeper::metrics::Metrics;
use ratekeeper::store::Store;
use ratekeeper::store::memory::MemoryStore;
use support::{RedisServer, unique_key};

#[path = "multi_parity/case.rs"]
pub(crate) mod case;
use case::{Case, adjusted, capacity, case, rule, runner, runtime, simulated_redis};

#[path = "multi_parity/reload.rs"]
mod reload;

/// `check.lua` (one EVALSHA per check) against `apply_all`, with resets
/// and refunds (`adjust.lua` against `reset_all` and `refund_all`) among
/// the checks.
#[test]
fn multi_limit_lua_matches_rust() {
    let server = RedisServer::start();
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let store = simulated_redis(&runtime, &server, "multi:", &clock);
    runner(1_000)
        .run(&adjusted(), |case| {
            let expected = case.rust();
            let key = unique_key("m");
            for (i, ((now, cost), want)) in case.timeline().zip(&expected).enumerate() {
                clock.set_us(now);
                let op = case.op(i);
                let got = runtime
                    .block_on(op.run(&store, &case.check(&key, cost)))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    &got,
                    want,
                    "step {} ({:?} at t={}, cost={})",
                    i,
                    op,
                    now,
                    cost
                );
            }
            Ok(())
        })
        .unwrap();
    runtime.block_on(store.quit());
}

/// `batch.lua`: the same timelines, the checks at one instant sent as one
/// batch, each multi-limit check followed in its batch by a single-limit
/// check of another key (its own random rule), which must match `apply`.
#[test]
fn batch_script_matches_rust_with_mixed_checks() {
    let server = RedisServer::start();
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let store = simulated_redis(&runtime, &server, "mbatch:", &clock);
    runner(500)
        .run(&(case(), rule()), |(case, single)| {
            let expected = case.rust();
            let mut single_state = State::fresh(single.algorithm);
            let key = unique_key("mb");
            let other = unique_key("sb");
            let mut batch: Vec<Check> = Vec::new();
            let mut want: Vec<Vec<Outcome>> = Vec::new();
            for (i, ((now, cost), outcomes)) in case.timeline().zip(&expected).enumerate() {
                batch.push(case.check(&key, cost));
                want.push(outcomes.clone());
                let single_cost = cost.min(capacity(&single));
                batch.push(Check::single(other.clone(), single, single_cost));
                want.push(vec![single_state.apply(&single, now, single_cost)]);
                if case.steps.get(i + 1).is_none_or(|(next, _)| *next != 0) {
                    clock.set_us(now);
                    let got = runtime
                        .block_on(store.check_batch(&batch))
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(&got, &want, "batch ending at step {} (t={})", i, now);
                    batch.clear();
                    want.clear();
                }
            }
            Ok(())
        })
        .unwrap();
    runtime.block_on(store.quit());
}

proptest! {
    #![proptest_config(Config { cases: 1_000, failure_persistence: None, ..Config::default() })]

    /// A denied check's retry_after (the largest over its denying limits)
    /// is exact: the same check is denied 1 ms before it, allowed at it.
    /// On a clock moving forward: after a step back, a state can lie in
    /// the future (a window not yet begun), and a limit that allows now
    /// may deny once time reaches it, which no answer given now can know.
    #[test]
    fn multi_limit_retry_after_is_exact(case in case().prop_map(Case::forward)) {
        let mut states = case.fresh_states();
        let rules = case.rules();
        for (now, cost) in case.timeline() {
            let outcomes = apply_all(&mut states, &rules, now, cost);
            let check = case.check("k", cost);
            let decision = Decision::from_outcomes(&check, &outcomes);
            if decision.allowed {
                continue;
            }
            let ms = decision.retry_after_ms;
            prop_assert!(ms > 0);
            let at = |t: u64| apply_all(&mut states.clone(), &rules, t, cost).iter().all(|o| o.allowed);
            prop_assert!(!at(now + (ms - 1) * 1_000), "allowed 1 ms before {} ms", ms);
            prop_assert!(at(now + ms * 1_000), "denied at {} ms: {:?}", ms, outcomes);
        }
    }
}

/// A limiter with the deny cache and the same store's plain answers, on a
/// clock moving forward: identical decisions at every step (see
/// `same_answer` for what "identical" covers), and never a cached denial
/// once one of its denying limits could pass.
fn run_deny_cache_parity(cases: u32, redis: Option<&RedisServer>) {
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let store = |prefix: &str| -> Arc<dyn Store> {
        match redis {
            Some(server) => Arc::new(simulated_redis(&runtime, server, prefix, &clock)),
            None => Arc::new(MemoryStore::new(Arc::new(clock.clone()), 1_000_000)),
        }
    };
    let metrics = Arc::new(Metrics::new());
    let cached = Arc::new(
        Limiter::new(store("cached:"), policy, metrics.clone())
            .with_deny_cache(DenyCache::new(1_000, Arc::new(clock.clone()))),
    );
    let plain = Arc::new(Limiter::new(
        store("plain:"),
        policy,
        Arc::new(Metrics::new()),
    ));
    runtime.block_on(async {
        cached.probe().await;
        plain.probe().await;
    });
    runner(cases)
        .run(&case(), |case| {
            let case = case.forward();
            let key = unique_key("dc");
            for (i, (now, cost)) in case.timeline().enumerate() {
                clock.set_us(now);
                let check = case.check(&key, cost);
                let hits = metrics.deny_cache.hits.get();
                let (got, want) = runtime.block_on(async {
                    (
                        cached.check(&check).await.unwrap(),
                        plain.check(&check).await.unwrap(),
                    )
                });
                let hit = metrics.deny_cache.hits.get() > hits;
                let at = format!("step {i} (t={now}, cost={cost}, cache hit: {hit})");
                same_answer(&got, &want, &at)?;
            }
            Ok(())
        })
        .unwrap();
    assert!(
        metrics.deny_cache.hits.get() > 0,
        "the sequences exercised the cache"
    );
}

/// What a cached denial must reproduce exactly: the decision, the check's
/// retry_after, the most restrictive limit (so `limit`, `remaining`,
/// `window_ms` and the `RateLimit`/`X-RateLimit-*` headers), and every
/// limit's own allowed and retry_after, with each denying limit's outcome
/// in full. An allowing limit's `remaining` and `reset_after` move with
/// time (a refill, a window rolling) while the check stays denied; the
/// cache reports what the store said when it denied, adjusted to the cost
/// asked (see `deny_cache.rs`), which may be lower but never higher.
fn same_answer(got: &Decision, want: &Decision, at: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.allowed, want.allowed, "{}: {:?} vs {:?}", at, got, want);
    prop_assert_eq!(got.retry_after_ms, want.retry_after_ms, "{}", at);
    prop_assert_eq!(
        (
            got.limit,
            got.remaining,
            got.window_ms,
            got.most_restrictive
        ),
        (
            want.limit,
            want.remaining,
            want.window_ms,
            want.most_restrictive
        ),
        "{}: {:?} vs {:?}",
        at,
        got,
        want
    );
    for (g, w) in got.limits.iter().zip(&want.limits) {
        prop_assert_eq!(
            (g.allowed, g.retry_after_ms),
            (w.allowed, w.retry_after_ms),
            "{}",
            at
        );
        if w.allowed {
            prop_assert!(g.remaining <= w.remaining, "{}: {:?} vs {:?}", at, g, w);
        } else {
            prop_assert_eq!(g, w, "{}", at);
        }
    }
    Ok(())
}

#[test]
fn deny_cache_answers_multi_limit_checks_as_the_embedded_store() {
    run_deny_cache_parity(400, None);
}

#[test]
fn deny_cache_answers_multi_limit_checks_as_redis() {
    let server = RedisServer::start();
    run_deny_cache_parity(150, Some(&server));
}
