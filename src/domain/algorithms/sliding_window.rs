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
mod tests {
    use super::super::test_support::*;
    use super::super::*;
    use super::SlidingWindowState;

    fn sw(limit: u64, window: u64) -> Rule {
        rule(Algorithm::SlidingWindow, limit, window)
    }

    fn state(window_index: u64, prev: u64, curr: u64) -> State {
        State::SlidingWindow(SlidingWindowState {
            window_index,
            prev,
            curr,
            born_us: Some(0),
        })
    }

    #[test]
    fn seed_example_weighted_90_is_allowed_and_101_is_denied() {
        let r = sw(100, 60 * SEC);
        let at_25_percent = 1_000 * 60 * SEC + 15 * SEC;
        let mut s = state(1_000, 80, 30);
        let o = s.apply(&r, at_25_percent, 1);
        assert!(o.allowed, "80 * 0.75 + 30 = 90 < 100");
        assert_eq!(o.remaining, 9);

        let mut s = state(1_000, 80, 41);
        let o = s.apply(&r, at_25_percent, 1);
        assert!(!o.allowed, "80 * 0.75 + 41 = 101 >= 100");
        assert_eq!(o.remaining, 0);
        assert_retry_exact(&s, &r, at_25_percent, 1, o);
    }

    #[test]
    fn does_not_admit_a_boundary_burst() {
        assert_eq!(boundary_burst_allowed(Algorithm::SlidingWindow), 10);
    }

    #[test]
    fn retry_after_is_exact_mid_window_and_across_windows() {
        let r = sw(10, 10 * SEC);
        let mut s = State::fresh(Algorithm::SlidingWindow);
        let t = 1_000 * SEC + 3 * SEC;
        assert!(s.apply(&r, t, 10).allowed);
        // curr is full: the earliest pass is in the next window, once enough
        // of this one has slid out.
        let o = s.apply(&r, t, 1);
        assert_retry_exact(&s, &r, t, 1, o);
        // At the boundary prev = 10 weighs exactly 10; one microsecond later it
        // weighs 9.999999, which floors to 9.
        assert_eq!(o.retry_after_us, 7 * SEC + 1);
        // cost > 1 waits longer.
        let o4 = s.apply(&r, t, 4);
        assert_retry_exact(&s, &r, t, 4, o4);
        // floor(10 * (1 - e/10s)) <= 6 needs e > 3 s.
        assert_eq!(o4.retry_after_us, 10 * SEC + 1);
    }

    #[test]
    fn cost_zero_and_cost_above_one() {
        let r = sw(5, SEC);
        let mut s = State::fresh(Algorithm::SlidingWindow);
        assert_eq!(s.apply(&r, 0, 0).remaining, 5);
        assert_eq!(s.apply(&r, 0, 4).remaining, 1);
        let denied = s.apply(&r, 0, 2);
        assert!(!denied.allowed);
        assert!(s.apply(&r, 0, 0).allowed, "one unit is still left");
        assert!(s.apply(&r, 0, 1).allowed);
        let probe = s.apply(&r, 0, 0);
        assert!(!probe.allowed);
        assert_retry_exact(&s, &r, 0, 0, probe);
    }

    #[test]
    fn remaining_is_what_a_next_check_may_take_when_the_weight_is_fractional() {
        // 10 spent in the previous window, 4 % of the window gone: the
        // weight is 9.6, which the decision counts as 9.
        let r = sw(10, 10 * SEC);
        let mut s = state(1_001, 0, 10);
        let now = 1_002 * 10 * SEC + 400 * MS;
        let probe = s.apply(&r, now, 0);
        assert!(probe.allowed);
        assert_eq!(
            probe.remaining, 1,
            "a cost-0 check passes iff a unit remains"
        );
        let spend = s.apply(&r, now, 1);
        assert!(spend.allowed);
        assert_eq!(spend.remaining, 0);
        assert!(!s.apply(&r, now, 1).allowed, "remaining 0 means denied");

        // Large numbers, where floor(weight) + cost and floor(weight + cost)
        // differ in the last unit (found by review): remaining must still
        // be exactly what passes.
        let r = sw(1_000_000_000_000, SEC);
        let mut s = state(1_000, 776_579_721_677, 62_512_645_676);
        let now = 1_000 * SEC + 674_037;
        let o = s.apply(&r, now, 270_034_426_635);
        assert!(o.allowed);
        let mut probe = s.clone();
        assert!(probe.apply(&r, now, o.remaining).allowed, "{o:?}");
        assert!(!s.apply(&r, now, o.remaining + 1).allowed, "{o:?}");
    }

    #[test]
    fn state_expires_after_two_windows() {
        let r = sw(3, SEC);
        let mut s = State::fresh(Algorithm::SlidingWindow);
        let o = s.apply(&r, 5 * SEC + 200 * MS, 3);
        assert_eq!(o.reset_after_us, 2 * SEC - 200 * MS);
        let o = s.apply(&r, 7 * SEC, 3);
        assert!(o.allowed);
        assert_eq!(o.remaining, 0);
    }
}
