//! Reservations, Lua against Rust: random sequences of checks, resets,
//! refunds and settles (the other parity tests' steps), with checks that
//! record reservations and settles of them among them (the right one,
//! again, with another `actual`, one never made), through the script on a
//! real Redis and through the embedded store on one manual clock (never
//! stepping back):
//! identical outcomes and identical answers about each reservation.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratekeeper::domain::{Algorithm, Check, ManualClock, Reservation};
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::{Op, Store};

use super::{Case, adjusted_with, case, runner, runtime, simulated_redis};
use crate::support::{RedisServer, unique_key};

/// What a step does with reservations, in place of its plain operation.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The case's own operation.
    Plain,
    /// A check of the step's cost recording reservation `n` (of four).
    Reserve(u8),
    /// Settles reservation `n` as `actual`: one never recorded when `n`
    /// is 4 or no check recorded it (yet).
    Settle(u8, u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        6 => Just(Step::Plain),
        3 => (0u8..4).prop_map(Step::Reserve),
        4 => (0u8..5, prop_oneof![3 => 0u64..6, 1 => 0u64..2_000]).prop_map(|(n, a)| Step::Settle(n, a)),
    ];
    prop::collection::vec(step, 40)
}

/// Ten days: longer than any case's timeline, so no record expires on
/// either clock (Redis expires by real time, the embedded store by the
/// manual one); expiry is tested on a real clock (`tests/api/settle.rs`).
const TTL_MS: u64 = 864_000_000;

fn run(algorithm: Algorithm, cases: u32) {
    let redis = RedisServer::start();
    let runtime = runtime();
    let clock = ManualClock::new(0);
    let lua = simulated_redis(&runtime, redis.url(), "rsv:", &clock);
    let rust = MemoryStore::new(std::sync::Arc::new(clock.clone()), 1_000_000);
    // Never stepping back: the embedded store expires state by the
    // manual clock and Redis by real time, so a clock stepping back past an
    // expiry tells the stores apart for reasons of their own.
    // Without give-backs: a give-back names the store time of an earlier
    // step's check, and here that step may have been a reservation's.
    let sequences = adjusted_with(case(algorithm), false).prop_map(Case::forward);
    let strategy = (sequences, steps());
    runner(cases)
        .run(&strategy, |(case, steps): (Case, Vec<Step>)| {
            let key = unique_key("rsv");
            // Each slot's reservation as its check made it, and that
            // check's cost (what a settle of it reserved).
            let mut made: [Option<(Reservation, u64)>; 4] = Default::default();
            for (i, (now, cost)) in case.timeline().enumerate() {
                clock.set_us(now);
                let step = steps.get(i).copied().unwrap_or(Step::Plain);
                let mut check = Check::single(key.clone(), case.rule, cost);
                let (reservation, kind);
                match step {
                    Step::Plain => {
                        let op = case.op(i);
                        let got = runtime.block_on(op.run(&lua, &check));
                        let want = runtime.block_on(op.run(&rust, &check));
                        prop_assert_eq!(got.ok(), want.ok(), "step {} {:?}", i, op);
                        continue;
                    }
                    Step::Reserve(n) => {
                        let (r, _) = Reservation::new(format!("{key} {i}").as_bytes(), TTL_MS);
                        made[usize::from(n)] = Some((r.clone(), cost));
                        (reservation, kind) = (r, "reserve");
                    }
                    Step::Settle(n, actual) => {
                        let slot = made.get(usize::from(n)).cloned().flatten();
                        let (r, reserved) = slot
                            .unwrap_or_else(|| (Reservation::new(b"never recorded", 0).0, cost));
                        check.cost = reserved;
                        let op = Op::settle(&check, actual).reserving(Some(&r));
                        let got = runtime.block_on(lua.apply(&[op])).remove(0);
                        let want = runtime.block_on(rust.apply(&[op])).remove(0);
                        let (got, want) = (
                            got.map_err(|e| TestCaseError::fail(e.to_string()))?,
                            want.map_err(|e| TestCaseError::fail(e.to_string()))?,
                        );
                        prop_assert_eq!(
                            (&got.outcomes, got.reservation),
                            (&want.outcomes, want.reservation),
                            "step {} settle {:?} of {:?}",
                            i,
                            step,
                            case.rule
                        );
                        continue;
                    }
                }
                let op = Op::check(&check).reserving(Some(&reservation));
                let got = runtime.block_on(lua.apply(&[op])).remove(0);
                let want = runtime.block_on(rust.apply(&[op])).remove(0);
                prop_assert_eq!(
                    got.map(|a| a.outcomes).ok(),
                    want.map(|a| a.outcomes).ok(),
                    "step {} {} of {:?}",
                    i,
                    kind,
                    case.rule
                );
            }
            Ok(())
        })
        .unwrap();
    runtime.block_on(lua.quit());
}

#[test]
fn fixed_window_reservations_lua_match_rust() {
    run(Algorithm::FixedWindow, 60);
}

#[test]
fn sliding_window_reservations_lua_match_rust() {
    run(Algorithm::SlidingWindow, 60);
}

#[test]
fn sliding_log_reservations_lua_match_rust() {
    run(Algorithm::SlidingLog, 60);
}

#[test]
fn token_bucket_reservations_lua_match_rust() {
    run(Algorithm::TokenBucket, 60);
}

#[test]
fn gcra_reservations_lua_match_rust() {
    run(Algorithm::Gcra, 60);
}
