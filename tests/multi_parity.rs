//! Checks of several limits, all or nothing: the Lua (`lua/check.lua` and
//! `lua/batch.lua` on a real Redis, on a controlled clock) and the Rust
//! (`apply_all` on fresh states) must give identical outcomes for every
//! limit at every step; a denied check's retry_after must be exact; and the
//! deny cache must answer multi-limit checks as the store would.

mod support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ratekeeper::deny_cache::DenyCache;
use ratekeeper::domain::algorithms::{State, apply_all};
use ratekeeper::domain::{
    Algorithm, Check, CheckInput, Decision, Limit, ManualClock, Outcome, Rule, RuleInput,
    WindowInput,
};
use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
use ratekeeper::metrics::Metrics;
use ratekeeper::store::Store;
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::redis::{RedisOptions, RedisStore};
use support::{RedisServer, unique_key};

/// Around 2026 in microseconds: large enough to exercise Lua's number range.
const EPOCH_2026_US: u64 = 1_767_225_600_000_000;

/// A random multi-limit check repeated over a random timeline.
#[derive(Debug, Clone)]
struct Case {
    /// 2 to 4 limits. Inline (`policy: None`): distinct algorithm+window.
    /// Under a policy: distinct names, so duplicates are allowed.
    limits: Vec<Limit>,
    policy: Option<Arc<str>>,
    start_us: u64,
    /// (time step in µs, cost); a negative step is a clock stepping back.
    steps: Vec<(i64, u64)>,
}

fn window_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1),
        Just(7),
        Just(100),
        Just(1_000),
        Just(60_000),
        1..=20_000u64
    ]
}

/// A rule that validation accepts, biased to small limits (frequent denials).
fn rule() -> impl Strategy<Value = Rule> {
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    let limit = prop_oneof![6 => 1..=12u64, 1 => 13..=300u64, 1 => 1_000..=1_000_000u64];
    (algorithm, limit, window_ms(), 1..=4u64).prop_filter_map(
        "must validate",
        |(algorithm, limit, window_ms, burst_factor)| {
            let window_us = window_ms * 1_000;
            let limit = match algorithm {
                Algorithm::SlidingLog => limit.min(200),
                Algorithm::TokenBucket | Algorithm::Gcra => limit.min(window_us),
                _ => limit,
            };
            let burst = (limit * burst_factor / 2).max(1);
            let check = Check::new(
                CheckInput {
                    key: "k".into(),
                    rule: RuleInput {
                        limit,
                        window: WindowInput::Text(format!("{window_ms}ms")),
                        algorithm: Some(algorithm),
                        burst: algorithm.has_burst().then_some(burst),
                    },
                    cost: Some(0),
                },
                &Default::default(),
            )
            .ok()?;
            Some(*check.rule())
        },
    )
}

fn capacity(rule: &Rule) -> u64 {
    if rule.algorithm.has_burst() {
        rule.burst
    } else {
        rule.limit
    }
}

fn case() -> impl Strategy<Value = Case> {
    (prop::collection::vec(rule(), 2..=4), any::<bool>())
        .prop_filter_map(
            "inline limits need distinct algorithm+window",
            |(rules, policy)| {
                let distinct = rules.iter().enumerate().all(|(i, a)| {
                    rules[..i]
                        .iter()
                        .all(|b| (a.algorithm, a.window_us) != (b.algorithm, b.window_us))
                });
                (policy || distinct).then(|| {
                    let limits = rules
                        .into_iter()
                        .enumerate()
                        .map(|(i, rule)| Limit {
                            name: format!("l{i}").into(),
                            rule,
                        })
                        .collect();
                    (limits, policy.then(|| Arc::from("api")))
                })
            },
        )
        .prop_flat_map(|(limits, policy): (Vec<Limit>, _)| {
            // Steps scaled to the longest and shortest windows, so both
            // the tight limit's refills and the loose one's resets happen.
            let short = limits.iter().map(|l| l.rule.window_us).min().unwrap() as i64;
            let long = limits.iter().map(|l| l.rule.window_us).max().unwrap() as i64;
            let tightest = limits.iter().map(|l| capacity(&l.rule)).min().unwrap();
            let step = prop_oneof![
                6 => Just(0i64),
                6 => 0..=short / 2,
                3 => 0..=2 * short,
                2 => 0..=long,
                2 => Just(1i64),
                1 => -short..0,
                1 => -long..0,
            ];
            let cost = prop_oneof![
                6 => Just(1u64),
                2 => Just(0u64),
                2 => 0..=tightest,
            ];
            (0..=2 * long, prop::collection::vec((step, cost), 1..40)).prop_map(
                move |(offset, steps)| Case {
                    limits: limits.clone(),
                    policy: policy.clone(),
                    start_us: EPOCH_2026_US + offset as u64,
                    steps,
                },
            )
        })
}

impl Case {
    fn timeline(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.steps.iter().scan(self.start_us, |now, (step, cost)| {
            *now = now.saturating_add_signed(*step);
            Some((*now, *cost))
        })
    }

    fn forward(self) -> Case {
        let steps = self.steps.iter().map(|(s, c)| ((*s).max(0), *c)).collect();
        Case { steps, ..self }
    }

    fn check(&self, key: &str, cost: u64) -> Check {
        let mut check = Check::multi(key, self.limits.clone(), cost);
        check.policy = self.policy.clone();
        check
    }

    fn rules(&self) -> Vec<&Rule> {
        self.limits.iter().map(|l| &l.rule).collect()
    }

    fn fresh_states(&self) -> Vec<State> {
        self.limits
            .iter()
            .map(|l| State::fresh(l.rule.algorithm))
            .collect()
    }

    /// `apply_all` over the timeline: one outcome list per step.
    fn rust(&self) -> Vec<Vec<Outcome>> {
        let mut states = self.fresh_states();
        let rules = self.rules();
        self.timeline()
            .map(|(now, cost)| apply_all(&mut states, &rules, now, cost))
            .collect()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn simulated_redis(
    runtime: &tokio::runtime::Runtime,
    server: &RedisServer,
    prefix: &str,
    clock: &ManualClock,
) -> RedisStore {
    runtime.block_on(async {
        let store = RedisStore::connect(RedisOptions {
            url: server.url(),
            key_prefix: prefix.into(),
            timeout: Duration::from_secs(5),
            pool_size: 1,
            reconnect_max_delay: Duration::from_millis(200),
            batch_window: Duration::ZERO,
            clock: Some(Arc::new(clock.clone())),
            // Simulated time runs ahead of and behind real time: keep keys
            // alive so Redis's own expiry cannot interfere.
            ttl_pad_ms: 3_600_000,
        })
        .unwrap();
        store.ping().await.unwrap();
        store
    })
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// `check.lua` (one EVALSHA per check) against `apply_all`.
#[test]
fn multi_limit_lua_matches_rust() {
    let server = RedisServer::start();
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let store = simulated_redis(&runtime, &server, "multi:", &clock);
    runner(1_000)
        .run(&case(), |case| {
            let expected = case.rust();
            let key = unique_key("m");
            for (i, ((now, cost), want)) in case.timeline().zip(&expected).enumerate() {
                clock.set_us(now);
                let got = runtime
                    .block_on(store.check(&case.check(&key, cost)))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&got, want, "step {} (t={}, cost={})", i, now, cost);
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
    let cached = Limiter::new(store("cached:"), policy, metrics.clone())
        .with_deny_cache(DenyCache::new(1_000, Arc::new(clock.clone())));
    let plain = Limiter::new(store("plain:"), policy, Arc::new(Metrics::new()));
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
                let hits = metrics.deny_cache_hits.get();
                let (got, want) = runtime.block_on(async {
                    (
                        cached.check(&check).await.unwrap(),
                        plain.check(&check).await.unwrap(),
                    )
                });
                let hit = metrics.deny_cache_hits.get() > hits;
                let at = format!("step {i} (t={now}, cost={cost}, cache hit: {hit})");
                same_answer(&got, &want, &at)?;
            }
            Ok(())
        })
        .unwrap();
    assert!(
        metrics.deny_cache_hits.get() > 0,
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
