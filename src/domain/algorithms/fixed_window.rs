//! Fixed window: one counter per period: epoch-aligned windows of a fixed
//! length, or calendar periods in a time zone (`domain::window`). Cheapest
//! and least accurate: a client can spend `limit` at the end of one period
//! and `limit` again at the start of the next.

use crate::domain::{Outcome, Rule};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// The period `count` belongs to: `floor(now / window)` for a length,
    /// the period's start for calendar periods ([`Window::period`]).
    ///
    /// [`Window::period`]: crate::domain::Window::period
    pub window_index: u64,
    pub count: u64,
    /// When these contents were started from nothing (a missing state or
    /// a new period), the Lua's hash field `b`; `None` for a state written
    /// before the field existed. A give-back only takes from a state born
    /// no later than its check: a reset deletes the state, so one created
    /// after the reset is born after any check made before it.
    pub born_us: Option<u64>,
}

pub fn check(state: &mut FixedWindowState, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
    let (index, end) = rule.window.period(now_us);
    let mut count = if state.window_index == index {
        state.count
    } else {
        0
    };
    let until_next = end - now_us;

    let need = cost.max(1);
    let allowed = count + need <= rule.limit;
    if allowed && cost > 0 {
        count += cost;
        // A new period starts the contents afresh; a state without `b`
        // gets it now, which only ever holds back a give-back.
        let born_us = if state.window_index == index {
            state.born_us.or(Some(now_us))
        } else {
            Some(now_us)
        };
        *state = FixedWindowState {
            window_index: index,
            count,
            born_us,
        };
    }
    Outcome {
        allowed,
        // Saturating: the limit may have been lowered since the count was made.
        remaining: rule.limit.saturating_sub(count),
        // The next window starts empty and cost <= limit, so it is the first
        // moment the check can pass.
        retry_after_us: if allowed { 0 } else { until_next },
        reset_after_us: if count > 0 { until_next } else { 0 },
    }
}

/// Gives back up to `cost` units of the current window's count, not below
/// 0. A count of an earlier window is already gone: nothing to give back.
/// The window's end stays the state's expiry (`lua/fixed_window.lua`,
/// `fixed_window_refund`).
pub fn refund(state: &mut FixedWindowState, rule: &Rule, now_us: u64, cost: u64) {
    if state.window_index == rule.window.period(now_us).0 {
        state.count -= cost.min(state.count);
    }
}

/// Gives back up to `cost` of the units a check at `at_us` counted, not
/// below 0: only while the stored count is of that check's period, that
/// period is still now's and the state was born no later than the check
/// (not recreated after a reset since) (`lua/fixed_window.lua`,
/// `fixed_window_give_back`). Otherwise the count it added is gone with its
/// period, and nothing else may be taken in its place. The expiry stays:
/// the count only shrinks. See `give_back.rs` for why this is exact.
pub fn give_back(state: &mut FixedWindowState, rule: &Rule, now_us: u64, at_us: u64, cost: u64) {
    let index = rule.window.period(now_us).0;
    let born_before = state.born_us.is_some_and(|born| born <= at_us);
    if rule.window.period(at_us).0 == index && state.window_index == index && born_before {
        state.count -= cost.min(state.count);
    }
}

#[cfg(test)]
#[path = "fixed_window_tests.rs"]
mod tests;
