//! The Lua scripts and the Rust functions must give identical answers.
//!
//! Property tests drive random rules and random sequences of (time step,
//! cost), with resets, refunds and settles among the checks (and, for
//! concurrency limits, acquires, releases and renewals; for the windows,
//! give-backs of earlier checks at the store time they ran), through the scripts on
//! a real Redis (time passed as an argument) and through the pure Rust
//! functions, and require the same allowed/remaining/retry_after/reset_after
//! at every step.

use crate::support;
use crate::support::stores::redis_settings;
use ratekeeper::domain::Window;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ratekeeper::domain::algorithms::State;
use ratekeeper::domain::{Algorithm, Check, ManualClock, Outcome, Rule};
use ratekeeper::store::Store;
use ratekeeper::store::redis::{RedisOptions, RedisSettings, RedisStore};
use support::ops::{Op, ops, ops_giving_back};
use support::{RedisServer, unique_key};

#[path = "parity/cache.rs"]
mod cache;
#[path = "parity/leases.rs"]
mod leases;
#[path = "parity/reservations.rs"]
mod reservations;

/// Around 2026 in microseconds: large enough to exercise Lua's number range.
const EPOCH_2026_US: u64 = 1_767_225_600_000_000;

#[derive(Debug, Clone)]
struct Case {
    rule: Rule,
    start_us: u64,
    /// (time step in µs, cost); a negative step is a clock stepping back.
    steps: Vec<(i64, u64)>,
    /// What step `i` does (a check where `ops` is shorter): see [`adjusted`].
    ops: Vec<Op>,
}

fn windows_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1),
        Just(7),
        Just(100),
        Just(1_000),
        Just(60_000),
        Just(3_600_000),
        1..=120_000u64
    ]
}

/// Rules within what validation accepts, biased to small limits where
/// denials and boundaries are frequent, with some huge ones for range.
fn rule(algorithm: Algorithm) -> impl Strategy<Value = Rule> {
    let limits = prop_oneof![4 => 1..=12u64, 1 => 13..=1_000u64, 1 => 1_000..=1_000_000_000_000u64];
    (limits, windows_ms(), 1..=4u64).prop_filter_map(
        "bucket rate must fit",
        move |(limit, window_ms, burst_factor)| {
            let window_us = window_ms * 1_000;
            let limit = match algorithm {
                Algorithm::SlidingLog => limit.min(200),
                Algorithm::TokenBucket | Algorithm::Gcra => limit.min(window_us),
                _ => limit,
            };
            let burst = if algorithm == Algorithm::TokenBucket || algorithm == Algorithm::Gcra {
                (limit * burst_factor / 2).max(1)
            } else {
                limit
            };
            let check = Check::new(
                ratekeeper::domain::CheckInput {
                    key: "k".into(),
                    rule: ratekeeper::domain::RuleInput {
                        limit,
                        window: Some(ratekeeper::domain::WindowInput::Text(format!(
                            "{window_ms}ms"
                        ))),
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
        },
    )
}

fn case(algorithm: Algorithm) -> impl Strategy<Value = Case> {
    rule(algorithm).prop_flat_map(|rule| {
        let w = rule.window_us();
        let max_cost = if rule.algorithm.has_burst() {
            rule.burst
        } else {
            rule.limit
        };
        let w = w as i64;
        let step = prop_oneof![
            6 => Just(0i64),
            6 => 0..=w / 4,
            4 => 0..=2 * w,
            2 => Just(w),
            2 => Just(1i64),
            1 => -w..0,
        ];
        let cost = prop_oneof![
            6 => Just(1u64),
            2 => Just(0u64),
            2 => 0..=max_cost.min(50),
            1 => Just(max_cost),
        ];
        (0..=3 * w, prop::collection::vec((step, cost), 1..40)).prop_map(move |(offset, steps)| {
            Case {
                rule,
                start_us: EPOCH_2026_US + offset as u64,
                steps,
                ops: Vec::new(),
            }
        })
    })
}

/// `cases` with resets, refunds and settles among their checks, and for
/// the algorithms that give back, give-backs of earlier checks.
fn adjusted(cases: impl Strategy<Value = Case>) -> impl Strategy<Value = Case> {
    adjusted_with(cases, true)
}

/// [`adjusted`], with give-backs only if `give_backs` (a path without
/// them, such as the limiter's, passes false).
fn adjusted_with(
    cases: impl Strategy<Value = Case>,
    give_backs: bool,
) -> impl Strategy<Value = Case> {
    (cases, ops(300), ops_giving_back(300)).prop_map(move |(case, plain, giving)| {
        let mut ops = match give_backs && case.rule.algorithm.gives_back() {
            true => giving,
            false => plain,
        };
        ops.truncate(case.steps.len());
        Case { ops, ..case }
    })
}

impl Case {
    /// The instant and cost of each step.
    fn timeline(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.steps.iter().scan(self.start_us, |now, (step, cost)| {
            *now = now.saturating_add_signed(*step);
            Some((*now, *cost))
        })
    }

    /// What step `step` does, a give-back placed on the timeline.
    fn op(&self, step: usize) -> Op {
        let op = self.ops.get(step).copied().unwrap_or(Op::Check);
        let times: Vec<u64> = self.timeline().map(|(now, _)| now).collect();
        op.placed(step, &times)
    }

    /// The same case with the clock never stepping back.
    fn forward(self) -> Case {
        let steps = self
            .steps
            .iter()
            .map(|(step, cost)| ((*step).max(0), *cost))
            .collect();
        Case { steps, ..self }
    }
}

fn rust_outcomes(case: &Case) -> Vec<Outcome> {
    let mut state = [State::fresh(case.rule.algorithm)];
    case.timeline()
        .enumerate()
        .map(|(i, (now, cost))| case.op(i).rust(&mut state, &[&case.rule], now, cost)[0])
        .collect()
}

/// A current-thread runtime for driving async stores from proptest closures.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A Redis store on `clock`, connected and with its scripts loaded.
fn simulated_redis(
    runtime: &tokio::runtime::Runtime,
    url: String,
    prefix: &str,
    clock: &ManualClock,
) -> RedisStore {
    runtime.block_on(async {
        let store = RedisStore::connect(RedisOptions {
            settings: RedisSettings {
                key_prefix: prefix.into(),
                timeout: Duration::from_secs(5),
                reconnect_max_delay: Duration::from_millis(200),
                ..redis_settings(url)
            },
            clock: Some(Arc::new(clock.clone())),
            // Simulated time runs ahead of and behind real time; keep keys
            // alive so Redis's real-time expiry cannot interfere.
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

/// Checks, resets, refunds, settles and (the windows) give-backs, Lua
/// against Rust.
fn run_parity(algorithm: Algorithm, cases: u32) {
    run_parity_of(adjusted(case(algorithm)), cases);
}

fn run_parity_of(strategy: impl Strategy<Value = Case>, cases: u32) {
    let redis = RedisServer::start();
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let store = simulated_redis(&runtime, redis.url(), "parity:", &clock);

    let mut runner = runner(cases);
    runner
        .run(&strategy, |case| {
            let expected = rust_outcomes(&case);
            let key = unique_key("p");
            for (i, ((now, cost), want)) in case.timeline().zip(&expected).enumerate() {
                clock.set_us(now);
                let check = Check::single(key.clone(), case.rule, cost);
                let op = case.op(i);
                let got = runtime
                    .block_on(op.run(&store, &check))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    vec![*want],
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
    runtime.block_on(store.quit());
}

#[test]
fn fixed_window_lua_matches_rust() {
    run_parity(Algorithm::FixedWindow, 200);
}

#[test]
fn sliding_window_lua_matches_rust() {
    run_parity(Algorithm::SlidingWindow, 300);
}

#[test]
fn sliding_log_lua_matches_rust() {
    run_parity(Algorithm::SlidingLog, 200);
}

/// Sequences that drive a sliding log past its exact part: many small
/// admissions within one window (so admissions share slots), large costs,
/// limits far above the entry bound, and the clock sometimes stepping back.
fn long_log_case() -> impl Strategy<Value = Case> {
    let limits = prop_oneof![64..=300u64, 300..=100_000u64, Just(1_000_000_000_000u64)];
    (
        limits,
        prop_oneof![Just(63u64), Just(1_000), 1..=3_600_000u64],
    )
        .prop_flat_map(|(limit, window_ms)| {
            let rule = Rule {
                algorithm: Algorithm::SlidingLog,
                limit,
                window: Window::Length(window_ms * 1_000),
                burst: limit,
            };
            let w = rule.window_us() as i64;
            let step = prop_oneof![
                3 => Just(0i64),
                4 => Just(1i64),
                8 => 0..=w / 64,
                3 => 0..=w / 8,
                1 => Just(w / 63),
                1 => -w / 10..0,
            ];
            let cost = prop_oneof![
                8 => Just(1u64),
                4 => 0..=5u64,
                1 => Just(limit / 4),
                1 => Just(limit),
            ];
            (0..=3 * w, prop::collection::vec((step, cost), 100..300)).prop_map(
                move |(offset, steps)| Case {
                    rule,
                    start_us: EPOCH_2026_US + offset as u64,
                    steps,
                    ops: Vec::new(),
                },
            )
        })
}

#[test]
fn a_long_sliding_log_lua_matches_rust() {
    run_parity_of(adjusted(long_log_case()), 60);
}

/// Calendar windows: random units and zones (DST, :30 and :45 offsets,
/// a 30-minute DST shift) from instants near DST changes, month ends and
/// New Year, in steps from none to several weeks, sometimes back.
fn calendar_case() -> impl Strategy<Value = Case> {
    let units = prop_oneof![Just("day"), Just("week"), Just("month"), Just("year")];
    let zones = prop_oneof![
        Just("UTC"),
        Just("Europe/Berlin"),
        Just("America/New_York"),
        Just("Asia/Kathmandu"),
        Just("Australia/Lord_Howe"),
        Just("America/Santiago"),
    ];
    let starts = prop_oneof![
        Just("2026-03-28T20:00:00Z"), // Berlin's spring change the next night
        Just("2026-10-24T20:00:00Z"), // and its autumn one
        Just("2026-03-07T20:00:00Z"), // New York's
        Just("2025-12-28T12:00:00Z"), // New Year, an ISO week across it
        Just("2028-02-27T12:00:00Z"), // a leap February's end
        Just("2026-09-05T12:00:00Z"), // Santiago skips its midnight on the 6th
        Just("2026-04-04T12:00:00Z"), // Lord Howe falls back 30 minutes
    ];
    let hour = 3_600_000_000i64;
    let step = prop_oneof![
        6 => Just(0i64),
        6 => 0..=hour,
        6 => 0..=30 * hour,
        2 => 0..=40 * 24 * hour,
        1 => -30 * hour..0,
    ];
    let cost = prop_oneof![6 => Just(1u64), 2 => Just(0u64), 2 => 0..=3u64];
    (
        1..=5u64,
        units,
        zones,
        starts,
        0..=48 * hour,
        prop::collection::vec((step, cost), 1..40),
    )
        .prop_map(|(limit, unit, zone, start, offset, steps)| {
            let check = Check::new(
                ratekeeper::domain::CheckInput {
                    key: "k".into(),
                    rule: ratekeeper::domain::RuleInput {
                        limit,
                        calendar: Some(unit.into()),
                        timezone: Some(zone.into()),
                        ..Default::default()
                    },
                    cost: Some(0),
                },
                &Default::default(),
            )
            .expect("a valid calendar rule");
            let start: jiff::Timestamp = start.parse().unwrap();
            Case {
                rule: *check.rule(),
                start_us: start.as_microsecond() as u64 + offset as u64,
                steps,
                ops: Vec::new(),
            }
        })
}

#[test]
fn calendar_fixed_window_lua_matches_rust() {
    run_parity_of(adjusted(calendar_case()), 200);
}

#[test]
fn token_bucket_lua_matches_rust() {
    run_parity(Algorithm::TokenBucket, 200);
}

#[test]
fn gcra_lua_matches_rust() {
    run_parity(Algorithm::Gcra, 200);
}

proptest! {
    /// GCRA is documented as equivalent to a token bucket of capacity
    /// `burst` while the clock moves forward; hold it to that, answer for
    /// answer. (A clock stepping back is judged from the stored TAT by one and
    /// from the stored token count by the other, so they may then differ.)
    #[test]
    fn gcra_answers_exactly_like_token_bucket(case in case(Algorithm::Gcra)) {
        let case = case.forward();
        let gcra = rust_outcomes(&case);
        let bucket = rust_outcomes(&Case { rule: Rule { algorithm: Algorithm::TokenBucket, ..case.rule }, ..case.clone() });
        prop_assert_eq!(gcra, bucket);
    }

    /// retry_after is exact for every algorithm: denied 1 ms before, allowed at it.
    #[test]
    fn retry_after_is_exact(case in prop::sample::select(Algorithm::RATES.to_vec()).prop_flat_map(case)) {
        let algorithm = case.rule.algorithm;
        let mut state = State::fresh(algorithm);
        for (now, cost) in case.timeline() {
            let before = state.clone();
            let outcome = state.apply(&case.rule, now, cost);
            if !outcome.allowed {
                let ms = outcome.retry_after_us.div_ceil(1_000);
                prop_assert!(!before.clone().apply(&case.rule, now + (ms - 1) * 1_000, cost).allowed);
                prop_assert!(before.clone().apply(&case.rule, now + ms * 1_000, cost).allowed);
            }
        }
    }
}

proptest! {
    /// The equivalence holds through resets, refunds and settles too: a
    /// debt is the same number of units owed in both.
    #[test]
    fn gcra_settles_exactly_like_token_bucket(case in adjusted(case(Algorithm::Gcra))) {
        let case = case.forward();
        let gcra = rust_outcomes(&case);
        let bucket = rust_outcomes(&Case { rule: Rule { algorithm: Algorithm::TokenBucket, ..case.rule }, ..case.clone() });
        prop_assert_eq!(gcra, bucket);
    }

    /// retry_after stays exact among resets, refunds and settles, so also
    /// for a key a settle took past its limit (in debt): after every step,
    /// a check of the step's cost denied is denied 1 ms before its
    /// retry_after and allowed at it.
    #[test]
    fn retry_after_is_exact_in_debt(case in prop::sample::select(Algorithm::RATES.to_vec()).prop_flat_map(|a| adjusted(case(a)))) {
        let case = case.forward();
        let rule = case.rule;
        let mut state = [State::fresh(rule.algorithm)];
        for (i, (now, cost)) in case.timeline().enumerate() {
            case.op(i).rust(&mut state, &[&rule], now, cost);
            let outcome = state[0].clone().apply(&rule, now, cost);
            if !outcome.allowed {
                let ms = outcome.retry_after_us.div_ceil(1_000);
                prop_assert!(!state[0].clone().apply(&rule, now + (ms - 1) * 1_000, cost).allowed, "step {}", i);
                prop_assert!(state[0].clone().apply(&rule, now + ms * 1_000, cost).allowed, "step {}", i);
            }
        }
    }
}

/// The batch script applies a batch's checks in order, each exactly as it
/// would run alone: the random sequences, with the checks that share an
/// instant sent as one batch, must match the Rust functions step by step.
fn run_batch_parity(algorithm: Algorithm, cases: u32, redis: &RedisServer) {
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let store = simulated_redis(&runtime, redis.url(), "batch:", &clock);
    let mut runner = runner(cases);
    runner
        .run(&case(algorithm), |case| {
            let expected = rust_outcomes(&case);
            let key = unique_key("b");
            let mut got = Vec::new();
            let mut batch: Vec<Check> = Vec::new();
            for (i, (now, cost)) in case.timeline().enumerate() {
                batch.push(Check::single(key.clone(), case.rule, cost));
                // Flush when the next check happens at another instant.
                if case.steps.get(i + 1).is_none_or(|(next, _)| *next != 0) {
                    clock.set_us(now);
                    let outcomes = runtime
                        .block_on(store.check_batch(&batch))
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    got.extend(outcomes.into_iter().map(|o| o[0]));
                    batch.clear();
                }
            }
            prop_assert_eq!(got, expected, "{:?}", case.rule);
            Ok(())
        })
        .unwrap();
    runtime.block_on(store.quit());
}

#[test]
fn batch_script_matches_single_checks() {
    let redis = RedisServer::start();
    for algorithm in Algorithm::RATES {
        run_batch_parity(algorithm, 100, &redis);
    }
}
