//! Settling a reservation afterwards: a caller checked with an estimate
//! (`reserved`) and learns the true cost (`actual`) only later.
//!
//! - `actual < reserved`: exactly a refund of `reserved - actual`
//!   ([`State::refund`]).
//! - `actual == reserved`: nothing changes.
//! - `actual > reserved`: a forced spend of `d = actual - reserved`
//!   ([`State::spend`]), with no check: the key may go past its limit, and
//!   later checks are denied until it has recovered, each with an exact
//!   `retry_after`.
//!
//! A forced spend is the algorithm's own check against the rule with its
//! capacity raised to [`OVERDRAFT_CAPACITIES`] times (`limit` for the
//! windows and the log, `burst` for the buckets), so it is the same code,
//! in Rust and in Lua (`spend_all` in `lua/adjust.lua`), and writes the
//! state and its expiry exactly as a check spending would:
//! - fixed_window: the count of the period current at settle time grows by
//!   `d` (the instance does not know when the reservation was checked, so
//!   a reservation made in the previous period is charged to this one);
//! - sliding_window: the current window's count grows by `d`;
//! - sliding_log: `d` units logged at now, in one entry under the log's
//!   usual bound on entries;
//! - token_bucket: `d` more tokens used, below zero left: a debt refills
//!   pay back first;
//! - gcra: the TAT moves `d` intervals later, past `now + burst ×
//!   interval`: the same debt.
//!
//! Because the raised check only spends what it allows, the usage a settle
//! leaves is at most [`OVERDRAFT_CAPACITIES`] capacities, whatever the
//! sequence of settles: `d` beyond that is dropped. That bounds a debt to
//! 101 refills of the bucket for the buckets (burst × interval is at most
//! 366 days, so every timestamp stays below 2^53), and to the window's own
//! recovery for the windows and the log. The HTTP layer also refuses one
//! `actual` above [`MAX_SETTLE_CAPACITIES`] capacities of any limit.
//!
//! The expiry: what the raised check's `reset_after` says, the time until
//! the state is back to "never seen", so the key outlives its debt.

use super::State;
use crate::domain::{Outcome, Rule};

/// The most one settle's `actual` may be, in capacities of the smallest
/// limit of its check (`Rule::capacity`).
pub const MAX_SETTLE_CAPACITIES: u64 = 100;

/// The most usage a forced spend leaves, in capacities: one full capacity
/// plus [`MAX_SETTLE_CAPACITIES`] of overdraft.
pub const OVERDRAFT_CAPACITIES: u64 = MAX_SETTLE_CAPACITIES + 1;

/// `rule` with its capacity raised to [`OVERDRAFT_CAPACITIES`] times:
/// `burst` for the buckets, `limit` otherwise (the buckets' `limit` sets
/// their rate, which must stay).
pub fn overdraft_rule(rule: &Rule) -> Rule {
    if rule.algorithm.has_burst() {
        Rule {
            burst: rule.burst * OVERDRAFT_CAPACITIES,
            ..*rule
        }
    } else {
        Rule {
            limit: rule.limit * OVERDRAFT_CAPACITIES,
            ..*rule
        }
    }
}

/// What a forced spend did: the raised look before it, and the raised
/// check that spent, if anything was spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spent {
    /// The raised rule's check of cost 0: its `remaining` is the room the
    /// spend had, and its `reset_after_us` the state's lifetime if nothing
    /// was spent.
    pub look: Outcome,
    /// The raised rule's check of the units spent; its `reset_after_us` is
    /// how long the state now lives. `None` when nothing was spent (no
    /// cost, or no room).
    pub spend: Option<Outcome>,
}

impl State {
    /// Charges `cost` more units without a check, up to
    /// [`OVERDRAFT_CAPACITIES`] capacities in use (see the module doc).
    /// A look of cost 0 first, as the Lua makes (a sliding log drops its
    /// expired entries there), then the raised check of what fits.
    pub fn spend(&mut self, rule: &Rule, now_us: u64, cost: u64) -> Spent {
        if rule.algorithm == crate::domain::Algorithm::Concurrency {
            // A settle moves no lease: only a release frees one.
            let look = self.apply(rule, now_us, 0);
            return Spent { look, spend: None };
        }
        let raised = overdraft_rule(rule);
        let look = self.apply(&raised, now_us, 0);
        let take = cost.min(look.remaining);
        let spend = (take > 0).then(|| {
            let spent = self.apply(&raised, now_us, take);
            debug_assert!(spent.allowed, "{take} fits in {look:?}");
            spent
        });
        Spent { look, spend }
    }
}

/// Settles `reserved` as `actual` on every limit, each on its own (not
/// all or nothing: a refund only makes room, and a forced spend decides
/// nothing), then answers like a check of cost 0 (`settle_all` in
/// `lua/adjust.lua`).
pub fn settle_all(
    states: &mut [State],
    rules: &[&Rule],
    now_us: u64,
    reserved: u64,
    actual: u64,
) -> Vec<Outcome> {
    if actual < reserved {
        return super::refund_all(states, rules, now_us, reserved - actual);
    }
    if actual > reserved {
        for (state, rule) in states.iter_mut().zip(rules) {
            state.spend(rule, now_us, actual - reserved);
        }
    }
    super::apply_all(states, rules, now_us, 0)
}
