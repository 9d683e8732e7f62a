//! Levels checks, Lua against Rust: random hierarchies of 2 or 3 levels
//! (each a policy's limits or an inline rule, any algorithm), and random
//! timelines of levels checks, checks of one level alone (the same
//! counters), refunds, settles, and checks (of the levels, or of one level
//! alone) that record a reservation, then draws on it (retried, out of
//! order) and its settle, on a controlled clock. The embedded store (the domain's
//! Rust functions, under the shard locks of `store/memory/levels.rs`) and
//! a real Redis (one script) answer every step identically: each limit's
//! outcome, what a settle found of its reservation, and what a draw found
//! and the units drawn. On a 3-primary
//! Cluster, where the levels fall in several slots and are decided in two
//! phases (`store/redis/levels.rs`), the same steps one at a time must
//! give the same answers too: a denied check gives back exactly what its
//! slots spent.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratekeeper::domain::{Check, LevelInput, Limit, ManualClock, Reservation, Rule};
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::redis::RedisStore;
use ratekeeper::store::{Applied, Op, Store};

use super::multi_parity::case::{
    EPOCH_2026_US, capacity, rule, runner, runtime, simulated_redis, simulated_redis_at,
};
use crate::support::{RedisCluster, RedisServer, unique_key};

/// What one step does.
#[derive(Debug, Clone, Copy)]
enum Step {
    Levels,
    /// A check of level `n` (mod the count) alone.
    Alone(usize),
    Refund,
    /// Settles the step's cost as this actual, with no reservation.
    Settle(u64),
    /// A levels check recording a reservation.
    Reserve,
    /// A check of level `n` alone recording a reservation.
    ReserveAlone(usize),
    /// A draw of the step's cost on the last reservation, numbered the
    /// last draw's number plus this (0: a retry, as a lost answer makes).
    Draw(u64),
    /// Settles the last reservation an allowed check recorded (its cost)
    /// as this actual.
    SettleReserved(u64),
}

#[derive(Debug, Clone)]
struct LevelsCase {
    /// Per level: its rules, and whether it is a policy's (else inline,
    /// then one rule).
    levels: Vec<(Vec<Rule>, bool)>,
    /// (µs forward, cost, what).
    steps: Vec<(u64, u64, Step)>,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => Just(Step::Levels),
        3 => (0usize..3).prop_map(Step::Alone),
        1 => Just(Step::Refund),
        1 => (0u64..6).prop_map(Step::Settle),
        2 => Just(Step::Reserve),
        1 => (0usize..3).prop_map(Step::ReserveAlone),
        4 => (0u64..3).prop_map(Step::Draw),
        2 => (0u64..6).prop_map(Step::SettleReserved),
    ]
}

fn levels_case() -> impl Strategy<Value = LevelsCase> {
    let level = (prop::collection::vec(rule(), 1..=2), any::<bool>())
        .prop_map(|(rules, policy)| (rules.clone(), policy || rules.len() > 1));
    prop::collection::vec(level, 2..=3).prop_flat_map(|levels| {
        let all: Vec<&Rule> = levels.iter().flat_map(|(r, _)| r).collect();
        let short = all.iter().map(|r| r.window_us()).min().unwrap();
        let tightest = all.iter().map(|r| capacity(r)).min().unwrap();
        let dt = prop_oneof![4 => Just(0u64), 3 => 0..=short / 2, 2 => 0..=2 * short];
        let cost = prop_oneof![1 => Just(0u64), 6 => 1..=tightest.min(3), 1 => 1..=tightest];
        let steps = prop::collection::vec((dt, cost, step()), 1..=30);
        (Just(levels), steps).prop_map(|(levels, steps)| LevelsCase { levels, steps })
    })
}

impl LevelsCase {
    /// Level `i` alone, on `base`'s keys.
    fn level(&self, base: &str, i: usize, cost: u64) -> Check {
        let (rules, policy) = &self.levels[i];
        let limits = rules
            .iter()
            .enumerate()
            .map(|(j, rule)| Limit {
                name: format!("l{j}").into(),
                rule: *rule,
                scope: None,
                level: None,
            })
            .collect();
        Check {
            policy: policy.then(|| Arc::from(format!("p{i}"))),
            ..Check::multi(format!("{base}:{i}"), limits, cost)
        }
    }

    fn levels(&self, base: &str, cost: u64) -> Check {
        let levels = (0..self.levels.len())
            .map(|i| LevelInput {
                check: self.level(base, i, cost),
                name: None,
            })
            .collect();
        Check::levels(levels, Some(cost)).unwrap()
    }
}

/// Runs every step of `case` on each store and compares their answers.
fn same_on(
    runtime: &tokio::runtime::Runtime,
    clock: &ManualClock,
    stores: &[&dyn Store],
    case: &LevelsCase,
) -> Result<(), TestCaseError> {
    let base = unique_key("lv");
    let mut now = EPOCH_2026_US;
    // The last reservation an allowed check recorded: its id's parse
    // (what a settle names), its cost, and the level checked alone
    // (`None`: the levels).
    let mut reserved: Option<(Reservation, u64, Option<usize>)> = None;
    let mut seq = 0;
    for (i, &(dt, cost, step)) in case.steps.iter().enumerate() {
        now += dt;
        clock.set_us(now);
        let level = |n: usize| n % case.levels.len();
        let check = match step {
            Step::Alone(n) | Step::ReserveAlone(n) => case.level(&base, level(n), cost),
            Step::SettleReserved(_) | Step::Draw(_) => match &reserved {
                Some((_, cost, Some(n))) => case.level(&base, *n, *cost),
                Some((_, cost, None)) => case.levels(&base, *cost),
                None => continue,
            },
            _ => case.levels(&base, cost),
        };
        let made;
        let mut asked = None;
        let op = match step {
            Step::Levels | Step::Alone(_) => Op::check(&check),
            Step::Refund => Op::refund(&check),
            Step::Settle(actual) => Op::settle(&check, actual),
            Step::Reserve | Step::ReserveAlone(_) => {
                let (reservation, id) = Reservation::new(format!("{i}").as_bytes(), 3_600_000);
                made = reservation;
                let alone = match step {
                    Step::ReserveAlone(n) => Some(level(n)),
                    _ => None,
                };
                asked = Some((Reservation::parse(&id).unwrap().0, cost, alone));
                Op::check(&check).reserving(Some(&made))
            }
            Step::SettleReserved(actual) => {
                let named = &reserved.as_ref().unwrap().0;
                Op::settle(&check, actual).reserving(Some(named))
            }
            Step::Draw(next) => {
                seq += next;
                let named = &reserved.as_ref().unwrap().0;
                // The draw's own cost, within what a check of it may take.
                Op::draw(&check, named, cost.min(check.max_cost()), seq.max(1))
            }
        };
        let answers: Vec<Applied> = stores
            .iter()
            .map(|store| runtime.block_on(store.apply(&[op])).remove(0))
            .collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        // As the API hands an id out: only when the check was allowed. (On
        // a cluster a denied check's record, whose id nobody holds, is
        // left settled at 0 by its give-back rather than missing.)
        if let Some(asked) = asked
            && answers[0].iter().all(|o| o.allowed)
        {
            reserved = Some(asked);
            seq = 0;
        }
        for (n, answer) in answers.iter().enumerate().skip(1) {
            prop_assert_eq!(
                (&answer.outcomes, answer.reservation, answer.drawn),
                (
                    &answers[0].outcomes,
                    answers[0].reservation,
                    answers[0].drawn
                ),
                "step {} ({:?}, cost {}, t={}): store {} against the embedded store",
                i,
                step,
                cost,
                now,
                n
            );
        }
    }
    Ok(())
}

#[test]
fn levels_lua_matches_rust() {
    let server = RedisServer::start();
    let runtime = runtime();
    let clock = ManualClock::new(EPOCH_2026_US);
    let redis = simulated_redis(&runtime, &server, "levels:", &clock);
    let memory = MemoryStore::new(Arc::new(clock.clone()), 1_000_000);
    runner(400)
        .run(&levels_case(), |case| {
            same_on(&runtime, &clock, &[&memory, &redis], &case)
        })
        .unwrap();
    runtime.block_on(redis.quit());
}

#[test]
fn levels_in_two_phases_on_a_cluster_match_rust() {
    let cluster = RedisCluster::start(3);
    let runtime = runtime();
    let clock = ManualClock::new(EPOCH_2026_US);
    let redis: RedisStore = simulated_redis_at(&runtime, &cluster.url(), "levels:", &clock);
    let memory = MemoryStore::new(Arc::new(clock.clone()), 1_000_000);
    runner(150)
        .run(&levels_case(), |case| {
            same_on(&runtime, &clock, &[&memory, &redis], &case)
        })
        .unwrap();
    runtime.block_on(redis.quit());
}
