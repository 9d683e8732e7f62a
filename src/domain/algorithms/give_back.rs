//! Giving back exactly what one earlier check counted: for hot-key quota
//! leasing, where an instance reserves a chunk of a key's capacity with one
//! check of cost `n`, serves later checks from it locally, and at the
//! lease's end hands back the `u` units it did not use.
//!
//! A refund ([`State::refund`]) cannot do that: it gives back the most
//! recent spending (a sliding window's current window first), which is not
//! the reservation's once its window has passed. A give-back names the
//! store time `at_us` the reserving check ran (`Applied::at_us`) and takes
//! units only from the count that check added to:
//! - fixed_window: the count of the period holding `at_us`, while that
//!   period is both the stored one and now's;
//! - sliding_window: the count of window `w = at_us / window`, which is
//!   the stored `curr` while the stored index is `w` and the stored `prev`
//!   once a spend in window `w + 1` rolled it there; nothing once now is in
//!   window `w + 2` or later, where those units weigh nothing;
//! - either: only from a state born (`born_us`, the Lua's hash field `b`)
//!   no later than `at_us`. A reset deletes the state, and the write that
//!   recreates it sets `born_us` to its own time, after the reset and so
//!   after `at_us`: a give-back that lands after a reset finds a newer
//!   state, whose counts hold none of the reservation's units, and takes
//!   nothing, even in the same window. A state written before the field
//!   existed has none and gives nothing back (under-admission only) until
//!   its next spend sets it.
//!
//! Why this is exact: the count a window keeps is a sum, each check adding
//! its cost and each refund or give-back taking some off, never below 0.
//! The reservation added `n` to exactly the count named above, so taking
//! `u` off it leaves the state the reservation would have left had it
//! spent `n - u` (everything else that ran since is in the sum either way),
//! and with it every later weight, `remaining` and `retry_after`. Where
//! that count is gone (its period ended, or a reset deleted it: the state
//! is then missing or born after `at_us`) the units it held already count
//! for nothing, so nothing is given back rather than
//! units other checks spent. Taking at most what the count holds means an
//! interleaved refund that already took some of the reservation's units is
//! never undone twice, and other checks' spending is never undone beyond
//! what the reservation itself added.
//!
//! The other algorithms keep no such count (a log's admissions merge, a
//! bucket's tokens refill into one number), so a give-back of them is an
//! error, [`GiveBackUnsupported`], rather than a guess. Nothing is written
//! then, not even to the supported limits of the same check: all are
//! looked at before any is changed, in Rust as in `give_back_all` in
//! `lua/adjust.lua`.

use super::{State, fixed_window, sliding_window};
use crate::domain::{Algorithm, Outcome, Rule};

/// A give-back asked of an algorithm that keeps no count per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("give back is only defined for fixed_window and sliding_window, not {0}")]
pub struct GiveBackUnsupported(pub Algorithm);

impl State {
    /// Gives back up to `cost` units that a check of `rule` counted at
    /// store time `at_us`, as of `now_us`, never below 0 (see the module
    /// doc). A state never seen is left alone; the expiry stays (the count
    /// only shrinks).
    pub fn give_back(
        &mut self,
        rule: &Rule,
        now_us: u64,
        at_us: u64,
        cost: u64,
    ) -> Result<(), GiveBackUnsupported> {
        if !rule.algorithm.gives_back() {
            return Err(GiveBackUnsupported(rule.algorithm));
        }
        if !self.is(rule.algorithm) {
            *self = State::fresh(rule.algorithm);
        }
        match self {
            State::FixedWindow(s) => fixed_window::give_back(s, rule, now_us, at_us, cost),
            State::SlidingWindow(s) => sliding_window::give_back(s, rule, now_us, at_us, cost),
            _ => return Err(GiveBackUnsupported(rule.algorithm)),
        }
        Ok(())
    }
}

/// Gives back up to `cost` units that a check of `rules` counted at store
/// time `at_us`, on every limit, each on its own (it only ever makes room,
/// so nothing is decided all or nothing), then answers like a check of
/// cost 0 (`give_back_all` in `lua/adjust.lua`). An error, with nothing
/// written, if any limit's algorithm cannot give back.
pub fn give_back_all(
    states: &mut [State],
    rules: &[&Rule],
    now_us: u64,
    at_us: u64,
    cost: u64,
) -> Result<Vec<Outcome>, GiveBackUnsupported> {
    if let Some(rule) = rules.iter().find(|r| !r.algorithm.gives_back()) {
        return Err(GiveBackUnsupported(rule.algorithm));
    }
    for (state, rule) in states.iter_mut().zip(rules) {
        state.give_back(rule, now_us, at_us, cost)?;
    }
    Ok(super::apply_all(states, rules, now_us, 0))
}
