//! Reset, refund, settle, release, renew and give-back steps for the
//! differential property tests: a random sequence of operations, run on a
//! store and on the pure Rust twins.

use super::StoreExt;
use proptest::prelude::*;
use ratekeeper::domain::algorithms::{
    State, apply_all, apply_all_leased, give_back_all, lease_all, refund_all, reset_all, settle_all,
};
use ratekeeper::domain::{Check, LeaseId, Outcome, Rule};
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
    /// A check acquiring lease number `n` (see [`lease`]).
    Acquire(u8),
    /// Releases lease number `n`.
    Release(u8),
    /// Renews lease number `n`.
    Renew(u8),
    /// Gives back the step's cost of what the step `back + 1` steps
    /// earlier (the first, if there are fewer) counted, at the store time
    /// it ran: `at_us`, which [`Op::placed`] fills in from the timeline.
    GiveBack {
        back: u8,
        at_us: u64,
    },
}

/// The id of lease number `n`.
pub fn lease(n: u8) -> LeaseId {
    LeaseId::from_text(format!("lease-{n}"))
}

/// For a concurrency limit: mostly acquires of four ids, releases and
/// renewals of those and of a fifth never acquired (a wrong id), some
/// looks (a check of the step's cost with no lease).
pub fn lease_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4).prop_map(Op::Acquire),
        1 => Just(Op::Check),
        3 => (0u8..5).prop_map(Op::Release),
        2 => (0u8..5).prop_map(Op::Renew),
        1 => Just(Op::Refund),
        1 => Just(Op::Reset),
    ]
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

/// [`op`], and give-backs of the last few steps' checks, for the
/// algorithms that give back (`Algorithm::gives_back`).
pub fn op_giving_back() -> impl Strategy<Value = Op> {
    prop_oneof![
        17 => op(),
        4 => (0u8..4).prop_map(|back| Op::GiveBack { back, at_us: 0 }),
    ]
}

/// Up to `len` of [`op_giving_back`].
pub fn ops_giving_back(len: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op_giving_back(), len)
}

impl Op {
    /// This op as step `step` of a timeline whose steps ran at `times`: a
    /// give-back names the store time of the step it gives back for.
    pub fn placed(self, step: usize, times: &[u64]) -> Op {
        match self {
            Op::GiveBack { back, .. } => Op::GiveBack {
                back,
                at_us: times[step.saturating_sub(usize::from(back) + 1)],
            },
            op => op,
        }
    }

    /// The pure Rust twin of the store call.
    pub fn rust(self, states: &mut [State], rules: &[&Rule], now: u64, cost: u64) -> Vec<Outcome> {
        match self {
            Op::Check => apply_all(states, rules, now, cost),
            Op::Reset => reset_all(states, rules, now),
            Op::Refund => refund_all(states, rules, now, cost),
            Op::Settle(actual) => settle_all(states, rules, now, cost, actual),
            Op::Acquire(n) => apply_all_leased(states, rules, now, cost, lease(n).as_str()),
            Op::Release(n) => lease_all(states, rules, now, lease(n).as_str(), false).1,
            Op::Renew(n) => lease_all(states, rules, now, lease(n).as_str(), true).1,
            Op::GiveBack { at_us, .. } => give_back_all(states, rules, now, at_us, cost)
                .expect("give-backs only of the algorithms that give back"),
        }
    }

    /// The store call.
    pub async fn run(self, store: &dyn Store, check: &Check) -> Result<Vec<Outcome>, StoreError> {
        match self {
            Op::Check => store.check(check).await,
            Op::Reset => store.reset(check).await.map(|a| a.outcomes),
            Op::Refund => store.refund(check).await.map(|a| a.outcomes),
            Op::Settle(actual) => store.settle(check, actual).await.map(|a| a.outcomes),
            Op::Acquire(n) => store.acquire(check, &lease(n)).await,
            Op::Release(n) => store.release(check, &lease(n)).await.map(|a| a.outcomes),
            Op::Renew(n) => store.renew(check, &lease(n)).await.map(|a| a.outcomes),
            Op::GiveBack { at_us, .. } => store.give_back(check, at_us).await.map(|a| a.outcomes),
        }
    }
}
