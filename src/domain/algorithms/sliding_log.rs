//! Sliding log: the timestamp of every admitted unit. Exact, and the most
//! expensive: memory grows with the limit, which is why its limit is capped.
//!
//! Redis keeps one sorted-set member per unit; here equal timestamps are
//! run-length encoded as `(timestamp, units)`, which answers identically.

use std::collections::VecDeque;

use crate::domain::{Outcome, Rule};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    /// `(timestamp_us, units)`, oldest first.
    pub entries: VecDeque<(u64, u64)>,
}

impl SlidingLogState {
    fn total(&self) -> u64 {
        self.entries.iter().map(|(_, n)| n).sum()
    }
}

pub fn check(state: &mut SlidingLogState, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
    let window = rule.window_us;
    // Entries at or before `now - window` have left the window.
    if let Some(cutoff) = now_us.checked_sub(window) {
        while state.entries.front().is_some_and(|(ts, _)| *ts <= cutoff) {
            state.entries.pop_front();
        }
    }
    let count = state.total();
    let need = cost.max(1);
    let allowed = count + need <= rule.limit;
    if allowed && cost > 0 {
        // Clocks can step back; keep the log sorted as the sorted set is.
        let at = state.entries.partition_point(|(ts, _)| *ts <= now_us);
        match at.checked_sub(1).and_then(|i| state.entries.get_mut(i)) {
            Some((ts, n)) if *ts == now_us => *n += cost,
            _ => state.entries.insert(at, (now_us, cost)),
        }
    }
    let count = if allowed { count + cost } else { count };

    let retry_after_us = if allowed {
        0
    } else {
        // The check passes once the oldest `count + need - limit` units have
        // left the window: when the one at that rank expires.
        let rank = count + need - rule.limit;
        let mut seen = 0;
        let ts = state
            .entries
            .iter()
            .find(|(_, n)| {
                seen += n;
                seen >= rank
            })
            .map(|(ts, _)| *ts)
            .expect("denied implies more than `rank` units are logged");
        ts + window - now_us
    };
    let reset_after_us = state
        .entries
        .back()
        .map_or(0, |(newest, _)| newest + window - now_us);
    Outcome {
        allowed,
        // Saturating: the limit may have been lowered since these were logged.
        remaining: rule.limit.saturating_sub(count),
        retry_after_us,
        reset_after_us,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;

    fn sl(limit: u64, window: u64) -> Rule {
        rule(Algorithm::SlidingLog, limit, window)
    }

    #[test]
    fn denies_at_the_limit_and_retries_when_the_oldest_entry_leaves() {
        let r = sl(3, 10 * SEC);
        let mut s = State::fresh(Algorithm::SlidingLog);
        let t = 1_000 * SEC;
        assert!(s.apply(&r, t, 1).allowed);
        assert!(s.apply(&r, t + SEC, 1).allowed);
        let o = s.apply(&r, t + 2 * SEC, 1);
        assert_eq!((o.remaining, o.reset_after_us), (0, 10 * SEC));
        let denied = s.apply(&r, t + 5 * SEC, 1);
        assert_eq!(
            denied.retry_after_us,
            5 * SEC,
            "the entry at t leaves at t + 10 s"
        );
        assert_retry_exact(&s, &r, t + 5 * SEC, 1, denied);
        // Two units need the two oldest to leave.
        let denied2 = s.apply(&r, t + 5 * SEC, 2);
        assert_eq!(denied2.retry_after_us, 6 * SEC);
        assert_retry_exact(&s, &r, t + 5 * SEC, 2, denied2);
    }

    #[test]
    fn does_not_admit_a_boundary_burst() {
        assert_eq!(boundary_burst_allowed(Algorithm::SlidingLog), 10);
    }

    #[test]
    fn cost_is_logged_per_unit_and_cost_zero_logs_nothing() {
        let r = sl(5, SEC);
        let mut s = State::fresh(Algorithm::SlidingLog);
        assert_eq!(s.apply(&r, SEC, 0).remaining, 5);
        assert_eq!(s.apply(&r, SEC, 0).reset_after_us, 0);
        assert_eq!(s.apply(&r, SEC, 3).remaining, 2);
        assert!(!s.apply(&r, SEC, 3).allowed);
        assert_eq!(s.apply(&r, SEC, 2).remaining, 0);
        let probe = s.apply(&r, SEC + MS, 0);
        assert!(!probe.allowed);
        assert_retry_exact(&s, &r, SEC + MS, 0, probe);
    }

    #[test]
    fn entries_expire_exactly_one_window_later() {
        let r = sl(1, SEC);
        let mut s = State::fresh(Algorithm::SlidingLog);
        assert!(s.apply(&r, 5 * SEC, 1).allowed);
        assert!(!s.apply(&r, 6 * SEC - 1, 1).allowed);
        assert!(
            s.apply(&r, 6 * SEC, 1).allowed,
            "at or before now - window is gone"
        );
    }
}
