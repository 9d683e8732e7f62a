//! Reloads: one limit whose `limit` and `burst` change between checks (same
//! algorithm and window, so the same stored state), as a policy reload or an
//! override does. The Lua and the Rust must still agree step for step, and
//! gcra must still answer exactly like token_bucket.

use crate::support::StoreExt;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratekeeper::domain::algorithms::State;
use ratekeeper::domain::{
    Algorithm, Check, CheckInput, ManualClock, Outcome, Rule, RuleInput, WindowInput,
};

use super::case::{EPOCH_2026_US, runner, runtime, simulated_redis, window_ms};
use crate::support::{RedisServer, unique_key};

#[derive(Debug, Clone)]
struct ReloadCase {
    /// 2 to 4 versions of one limit: one algorithm and window.
    versions: Vec<Rule>,
    start_us: u64,
    /// (version in force, time step in µs, cost); a negative step is a
    /// clock stepping back.
    steps: Vec<(usize, i64, u64)>,
}

fn validated(algorithm: Algorithm, window_ms: u64, limit: u64, burst_factor: u64) -> Option<Rule> {
    let limit = match algorithm {
        Algorithm::SlidingLog => limit.min(200),
        Algorithm::TokenBucket | Algorithm::Gcra => limit.min(window_ms * 1_000),
        _ => limit,
    };
    let burst = (limit * burst_factor / 2).max(1);
    let check = Check::new(
        CheckInput {
            key: "k".into(),
            rule: RuleInput {
                limit,
                window: Some(WindowInput::Text(format!("{window_ms}ms"))),
                algorithm: Some(algorithm),
                burst: algorithm.has_burst().then_some(burst),
                ..Default::default()
            },
            cost: Some(0),
        },
        &Default::default(),
    )
    .ok()?;
    Some(*check.rule())
}

fn reload_case(algorithms: Vec<Algorithm>) -> impl Strategy<Value = ReloadCase> {
    let limit = prop_oneof![6 => 1..=12u64, 1 => 13..=300u64, 1 => 1_000..=1_000_000u64];
    let versions = prop::collection::vec((limit, 1..=4u64), 2..=4);
    (prop::sample::select(algorithms), window_ms(), versions)
        .prop_filter_map("must validate", |(algorithm, window_ms, versions)| {
            versions
                .into_iter()
                .map(|(limit, burst)| validated(algorithm, window_ms, limit, burst))
                .collect::<Option<Vec<Rule>>>()
        })
        .prop_flat_map(|versions| {
            let w = versions[0].window_us() as i64;
            let most = versions.iter().map(Rule::capacity).max().unwrap();
            let version = 0..versions.len();
            let step = prop_oneof![
                6 => Just(0i64),
                6 => 0..=w / 4,
                3 => 0..=2 * w,
                2 => Just(1i64),
                1 => -w..0,
            ];
            let cost = prop_oneof![
                6 => Just(1u64),
                2 => Just(0u64),
                2 => 0..=most.min(50),
                1 => Just(most),
            ];
            (
                0..=3 * w,
                prop::collection::vec((version, step, cost), 1..50),
            )
                .prop_map(move |(offset, steps)| ReloadCase {
                    versions: versions.clone(),
                    start_us: EPOCH_2026_US + offset as u64,
                    steps,
                })
        })
}

impl ReloadCase {
    /// The rule in force, the instant and the cost of each step (at most
    /// the rule's capacity, as validation requires).
    fn timeline(&self) -> impl Iterator<Item = (Rule, u64, u64)> + '_ {
        self.steps
            .iter()
            .scan(self.start_us, |now, (version, step, cost)| {
                *now = now.saturating_add_signed(*step);
                let rule = self.versions[*version];
                Some((rule, *now, (*cost).min(rule.capacity())))
            })
    }

    fn forward(self) -> ReloadCase {
        let steps = self
            .steps
            .iter()
            .map(|(v, s, c)| (*v, (*s).max(0), *c))
            .collect();
        ReloadCase { steps, ..self }
    }

    fn as_algorithm(&self, algorithm: Algorithm) -> ReloadCase {
        let versions = self
            .versions
            .iter()
            .map(|r| Rule { algorithm, ..*r })
            .collect();
        ReloadCase {
            versions,
            ..self.clone()
        }
    }

    fn rust(&self) -> Vec<Outcome> {
        let mut state = State::fresh(self.versions[0].algorithm);
        self.timeline()
            .map(|(rule, now, cost)| state.apply(&rule, now, cost))
            .collect()
    }
}

/// Every algorithm, the clock sometimes stepping back: the scripts on a
/// real Redis and the Rust functions give identical outcomes while the
/// rule changes under them.
#[test]
fn a_reloaded_limit_lua_matches_rust() {
    let server = RedisServer::start();
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let store = simulated_redis(&runtime, &server, "reload:", &clock);
    runner(600)
        .run(&reload_case(Algorithm::RATES.to_vec()), |case| {
            let expected = case.rust();
            let key = unique_key("r");
            for (i, ((rule, now, cost), want)) in case.timeline().zip(&expected).enumerate() {
                clock.set_us(now);
                // A policy's limit: its state outlives a change of limit
                // (an inline bucket's key holds its limit and burst).
                let check = Check {
                    policy: Some("reloaded".into()),
                    ..Check::single(key.clone(), rule, cost)
                };
                let got = runtime
                    .block_on(store.check(&check))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    &got,
                    &vec![*want],
                    "step {} (t={}, cost={}) {:?}",
                    i,
                    now,
                    cost,
                    rule
                );
            }
            Ok(())
        })
        .unwrap();
    runtime.block_on(store.quit());
}

/// gcra keeps the units used across a change exactly as the token bucket
/// does, so the two stay answer for answer alike (clock moving forward).
#[test]
fn a_reloaded_gcra_answers_exactly_like_token_bucket() {
    runner(2_000)
        .run(&reload_case(vec![Algorithm::Gcra]), |case| {
            let case = case.forward();
            let bucket = case.as_algorithm(Algorithm::TokenBucket);
            prop_assert_eq!(case.rust(), bucket.rust());
            Ok(())
        })
        .unwrap();
}
