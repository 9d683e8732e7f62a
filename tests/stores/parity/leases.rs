//! Concurrency limits: random sequences of acquires, looks, releases and
//! renewals (right and wrong ids), refunds and resets, with the clock
//! sometimes stepping back, through the Lua on a real Redis and through
//! the Rust twins: identical answers at every step.

use proptest::prelude::*;
use ratekeeper::domain::{Algorithm, Rule, Window};

use super::{Case, EPOCH_2026_US, run_parity_of, windows_ms};
use crate::support::ops::lease_op;

fn lease_case() -> impl Strategy<Value = Case> {
    (1..=5u64, windows_ms()).prop_flat_map(|(limit, window_ms)| {
        let rule = Rule {
            algorithm: Algorithm::Concurrency,
            limit,
            window: Window::Length(window_ms * 1_000),
            burst: limit,
        };
        let w = rule.window_us() as i64;
        let step = prop_oneof![
            4 => Just(0i64),
            6 => 0..=w / 4,
            2 => 0..=2 * w,
            2 => Just(w),
            1 => Just(1i64),
            1 => -w..0,
        ];
        // Any cost above 0 is one slot: 3 must act as 1 on both sides.
        let cost = prop_oneof![6 => Just(1u64), 2 => Just(0u64), 1 => Just(3u64)];
        let steps = prop::collection::vec((step, cost), 1..60);
        let ops = prop::collection::vec(lease_op(), 60);
        (0..=3 * w, steps, ops).prop_map(move |(offset, steps, mut ops)| {
            ops.truncate(steps.len());
            Case {
                rule,
                start_us: EPOCH_2026_US + offset as u64,
                steps,
                ops,
            }
        })
    })
}

#[test]
fn concurrency_lua_matches_rust() {
    run_parity_of(lease_case(), 300);
}
