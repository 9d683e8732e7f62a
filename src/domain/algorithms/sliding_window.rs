//! Sliding window counter: the current and previous epoch-aligned windows,
//! the previous one weighted by how much of it still overlaps the sliding
//! window: `weighted = prev * (window - elapsed) / window + curr`.
//! Allowed iff `floor(weighted) + need <= limit`.
//!
//! The weighting is the one floating-point computation in the domain. It is
//! written exactly as in `lua/sliding_window.lua` (same operands, same
//! order), so both sides round identically.

use crate::domain::{Outcome, Rule};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// `floor(now / window)` of the window `curr` belongs to.
    pub window_index: u64,
    pub prev: u64,
    pub curr: u64,
    /// When the state was created from nothing, the Lua's hash field `b`;
    /// `None` for a state written before the field existed. Kept by every
    /// later write, rolled or not; see `FixedWindowState::born_us`.
    pub born_us: Option<u64>,
}

/// The weighted count `elapsed_us` into a window.
fn weighted(prev: u64, curr: u64, window: u64, elapsed_us: u64) -> f64 {
    prev as f64 * (window - elapsed_us) as f64 / window as f64 + curr as f64
}

pub fn check(stored: &mut SlidingWindowState, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
    let window = rule.window_us();
    let index = now_us / window;
    let mut state = rolled(stored, index);
    let elapsed = now_us - index * window;
    let need = cost.max(1);
    let limit = rule.limit;

    let before = weighted(state.prev, state.curr, window, elapsed);
    let allowed = before.floor() as u64 + need <= limit;
    // The weight as the next check will compute it, rounded down as the
    // decision rounds it (see lua/sliding_window.lua): then `remaining` is
    // exactly what that check may take.
    let used = if allowed {
        state.curr += cost;
        weighted(state.prev, state.curr, window, elapsed)
    } else {
        before
    };
    if allowed && cost > 0 {
        // A state without `b` gets it now, which only holds back a give-back.
        state.born_us = state.born_us.or(Some(now_us));
        *stored = state.clone();
    }
    let remaining = limit.saturating_sub(used.floor() as u64);

    let retry_after_us = if allowed {
        0
    } else {
        first_allowed_at(&state, rule, now_us, need) - now_us
    };
    let reset_after_us = if state.curr > 0 {
        (index + 2) * window - now_us
    } else if state.prev > 0 {
        (index + 1) * window - now_us
    } else {
        0
    };
    Outcome {
        allowed,
        remaining,
        retry_after_us,
        reset_after_us,
    }
}

/// Gives back up to `cost` units: from the current window's count first,
/// then from the previous one's, as `sliding_window_refund` in the Lua.
/// Never rolls the stored state: a state last written in the previous
/// window keeps its index and only its count falls, so the expiry its
/// spend set stays right (rolled, it would claim this window with an
/// expiry a window short, and die before a later spend's usage did).
pub fn refund(stored: &mut SlidingWindowState, rule: &Rule, now_us: u64, cost: u64) {
    let index = now_us / rule.window_us();
    let state = rolled(stored, index);
    let from_curr = cost.min(state.curr);
    let from_prev = (cost - from_curr).min(state.prev);
    if from_curr + from_prev == 0 {
        return;
    }
    if stored.window_index == index {
        stored.curr -= from_curr;
        stored.prev -= from_prev;
    } else {
        // `window_index + 1 == index`: its current count is this window's
        // previous one (and nothing is in this window yet).
        stored.curr -= from_prev;
    }
}

/// Gives back up to `cost` of the units a check at `at_us` counted, not
/// below 0, from the stored count that still holds its window `w`: `curr`
/// while the stored index is `w`, `prev` once a spend in window `w + 1`
/// rolled it there; nothing once now is two windows past `w` (its units
/// weigh nothing any more), the state was rolled past it, or the state was
/// born after the check (recreated after a reset)
/// (`lua/sliding_window.lua`, `sliding_window_give_back`). Never rolls the
/// stored state, for the reason [`refund`] gives, so the expiry stays. See
/// `give_back.rs` for why this is exact.
pub fn give_back(stored: &mut SlidingWindowState, rule: &Rule, now_us: u64, at_us: u64, cost: u64) {
    let window = rule.window_us();
    let w = at_us / window;
    if now_us / window >= w + 2 || stored.born_us.is_none_or(|born| born > at_us) {
        return;
    }
    let count = if stored.window_index == w {
        &mut stored.curr
    } else if stored.window_index == w + 1 {
        &mut stored.prev
    } else {
        return;
    };
    *count -= cost.min(*count);
}

/// The counters as of window `index`: the stored current window becomes the
/// previous one if adjacent, and anything older is forgotten.
fn rolled(state: &SlidingWindowState, index: u64) -> SlidingWindowState {
    if state.window_index == index {
        return state.clone();
    }
    let prev = if state.window_index + 1 == index {
        state.curr
    } else {
        0
    };
    SlidingWindowState {
        window_index: index,
        prev,
        curr: 0,
        born_us: state.born_us,
    }
}

/// The first instant after `now_us` at which a check needing `need` units
/// passes if nothing else arrives. The weighted count only falls as time
/// passes, so the predicate is monotone and a binary search finds the exact
/// microsecond; two windows on, the count is zero and `need <= limit` passes.
fn first_allowed_at(state: &SlidingWindowState, rule: &Rule, now_us: u64, need: u64) -> u64 {
    let window = rule.window_us();
    let passes = |t: u64| {
        let index = t / window;
        let elapsed = t - index * window;
        let w = if index == state.window_index {
            weighted(state.prev, state.curr, window, elapsed)
        } else if index == state.window_index + 1 {
            weighted(state.curr, 0, window, elapsed)
        } else {
            0.0
        };
        w.floor() as u64 + need <= rule.limit
    };
    let (mut denied, mut allowed) = (now_us, (state.window_index + 2) * window);
    while allowed - denied > 1 {
        let mid = denied + (allowed - denied) / 2;
        if passes(mid) {
            allowed = mid;
        } else {
            denied = mid;
        }
    }
    allowed
}

#[cfg(test)]
#[path = "sliding_window_tests.rs"]
mod tests;
