//! Random multi-limit checks for the property tests of `multi_parity.rs`,
//! and the stores they run on.

use crate::support::stores::redis_settings;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratekeeper::domain::algorithms::State;
use ratekeeper::domain::{
    Algorithm, Check, CheckInput, Limit, ManualClock, Outcome, Rule, RuleInput, WindowInput,
};
use ratekeeper::store::Store;
use ratekeeper::store::redis::{RedisOptions, RedisSettings, RedisStore};

use crate::support::RedisServer;
use crate::support::ops::{Op, ops, ops_giving_back};

/// Around 2026 in microseconds: large enough to exercise Lua's number range.
pub const EPOCH_2026_US: u64 = 1_767_225_600_000_000;

/// A random multi-limit check repeated over a random timeline.
#[derive(Debug, Clone)]
pub struct Case {
    /// 2 to 4 limits. Inline (`policy: None`): distinct algorithm+window.
    /// Under a policy: distinct names, so duplicates are allowed.
    pub limits: Vec<Limit>,
    pub policy: Option<Arc<str>>,
    pub start_us: u64,
    /// (time step in µs, cost); a negative step is a clock stepping back.
    pub steps: Vec<(i64, u64)>,
    /// What step `i` does (a check where `ops` is shorter): see [`adjusted`].
    pub ops: Vec<Op>,
}

pub fn window_ms() -> impl Strategy<Value = u64> {
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
pub fn rule() -> impl Strategy<Value = Rule> {
    let algorithm = prop::sample::select(Algorithm::RATES.to_vec());
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
        },
    )
}

pub fn capacity(rule: &Rule) -> u64 {
    if rule.algorithm.has_burst() {
        rule.burst
    } else {
        rule.limit
    }
}

pub fn case() -> impl Strategy<Value = Case> {
    (prop::collection::vec(rule(), 2..=4), any::<bool>())
        .prop_filter_map(
            "inline limits need distinct algorithm+window",
            |(rules, policy)| {
                let distinct = rules.iter().enumerate().all(|(i, a)| {
                    rules[..i]
                        .iter()
                        .all(|b| (a.algorithm, a.window) != (b.algorithm, b.window))
                });
                (policy || distinct).then(|| {
                    let limits = rules
                        .into_iter()
                        .enumerate()
                        .map(|(i, rule)| Limit {
                            name: format!("l{i}").into(),
                            rule,
                            scope: None,
                            level: None,
                        })
                        .collect();
                    (limits, policy.then(|| Arc::from("api")))
                })
            },
        )
        .prop_flat_map(|(limits, policy): (Vec<Limit>, _)| {
            // Steps scaled to the longest and shortest windows, so both
            // the tight limit's refills and the loose one's resets happen.
            let short = limits.iter().map(|l| l.rule.window_us()).min().unwrap() as i64;
            let long = limits.iter().map(|l| l.rule.window_us()).max().unwrap() as i64;
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
                    ops: Vec::new(),
                },
            )
        })
}

/// Cases with resets, refunds and settles among their checks, and where
/// every limit gives back (fixed and sliding windows), give-backs of
/// earlier checks.
pub fn adjusted() -> impl Strategy<Value = Case> {
    (case(), ops(40), ops_giving_back(40)).prop_map(|(case, plain, giving)| {
        let gives_back = case.limits.iter().all(|l| l.rule.algorithm.gives_back());
        let mut ops = if gives_back { giving } else { plain };
        ops.truncate(case.steps.len());
        Case { ops, ..case }
    })
}

impl Case {
    pub fn timeline(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.steps.iter().scan(self.start_us, |now, (step, cost)| {
            *now = now.saturating_add_signed(*step);
            Some((*now, *cost))
        })
    }

    /// What step `step` does, a give-back placed on the timeline.
    pub fn op(&self, step: usize) -> Op {
        let op = self.ops.get(step).copied().unwrap_or(Op::Check);
        let times: Vec<u64> = self.timeline().map(|(now, _)| now).collect();
        op.placed(step, &times)
    }

    pub fn forward(self) -> Case {
        let steps = self.steps.iter().map(|(s, c)| ((*s).max(0), *c)).collect();
        Case { steps, ..self }
    }

    pub fn check(&self, key: &str, cost: u64) -> Check {
        let mut check = Check::multi(key, self.limits.clone(), cost);
        check.policy = self.policy.clone();
        check
    }

    pub fn rules(&self) -> Vec<&Rule> {
        self.limits.iter().map(|l| &l.rule).collect()
    }

    pub fn fresh_states(&self) -> Vec<State> {
        self.limits
            .iter()
            .map(|l| State::fresh(l.rule.algorithm))
            .collect()
    }

    /// The Rust twins (`apply_all`, `reset_all`, `refund_all`,
    /// `settle_all`, `give_back_all`) over the timeline: one outcome list
    /// per step.
    pub fn rust(&self) -> Vec<Vec<Outcome>> {
        let mut states = self.fresh_states();
        let rules = self.rules();
        self.timeline()
            .enumerate()
            .map(|(i, (now, cost))| self.op(i).rust(&mut states, &rules, now, cost))
            .collect()
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn simulated_redis(
    runtime: &tokio::runtime::Runtime,
    server: &RedisServer,
    prefix: &str,
    clock: &ManualClock,
) -> RedisStore {
    simulated_redis_at(runtime, &server.url(), prefix, clock)
}

/// [`simulated_redis`] on any server's `url` (a cluster's).
pub fn simulated_redis_at(
    runtime: &tokio::runtime::Runtime,
    url: &str,
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
            // Simulated time runs ahead of and behind real time: keep keys
            // alive so Redis's own expiry cannot interfere.
            ttl_pad_ms: 3_600_000,
        })
        .unwrap();
        store.ping().await.unwrap();
        store
    })
}

pub fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}
