//! Reset, refund and settle steps for the differential property tests: a
//! random sequence of operations, run on a store and on the pure Rust twins.

use proptest::prelude::*;
use ratekeeper::domain::algorithms::{State, apply_all, refund_all, reset_all, settle_all};
use ratekeeper::domain::{Check, Outcome, Rule};
use ratekeeper::store::{Store, StoreError};

/// What one step of a sequence does with its check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Check,
    Reset,
    /// Gives back the step's cost.
    Refund,
    /// Settles the step's cost, as the reservation, as this actual: below
    /// it a refund, above it a spend past the limit.
    Settle(u64),
}

/// Mostly checks, so limits fill up and refunds have something to give;
/// settles mostly near a small reservation, some far past any limit (the
/// overdraft's bound).
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => Just(Op::Check),
        1 => Just(Op::Reset),
        3 => Just(Op::Refund),
        3 => (0u64..20).prop_map(Op::Settle),
        1 => (0u64..1_000_000).prop_map(Op::Settle),
    ]
}

/// Up to `len` random operations (a sequence's step beyond them checks).
pub fn ops(len: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), len)
}

impl Op {
    /// The pure Rust twin of the store call.
    pub fn rust(self, states: &mut [State], rules: &[&Rule], now: u64, cost: u64) -> Vec<Outcome> {
        match self {
            Op::Check => apply_all(states, rules, now, cost),
            Op::Reset => reset_all(states, rules, now),
            Op::Refund => refund_all(states, rules, now, cost),
            Op::Settle(actual) => settle_all(states, rules, now, cost, actual),
        }
    }

    /// The store call.
    pub async fn run(self, store: &dyn Store, check: &Check) -> Result<Vec<Outcome>, StoreError> {
        match self {
            Op::Check => store.check(check).await,
            Op::Reset => store.reset(check).await.map(|a| a.outcomes),
            Op::Refund => store.refund(check).await.map(|a| a.outcomes),
            Op::Settle(actual) => store.settle(check, actual).await.map(|a| a.outcomes),
        }
    }
}
