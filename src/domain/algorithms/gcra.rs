//! GCRA (generic cell rate algorithm): the theoretical arrival time (TAT)
//! of the next unit, one number per key. Equivalent to a token bucket of
//! capacity `burst` refilled every `window / limit`: with the same inputs it
//! gives the same answers as [`super::token_bucket`], which a test checks,
//! also across changes of `limit` and `burst`.
//!
//! The TAT holds the usage as time, `tat - now` microseconds of refill, so
//! read through another rate it would scale the usage: 8 of a 10/day limit
//! lowered to 5/day would read as 4 used, raised to 100/day as 80. So the
//! state also keeps the emission interval the TAT was written with and the
//! whole units it then held. A rule whose interval changed (its `limit`: a
//! policy reload; `window` and algorithm are part of the key) rebuilds the
//! TAT from those units at the new interval, from the instant they were
//! counted (`at - used × interval`, the token bucket's "credited up to"),
//! so the usage is kept exactly and then drains at the new rate, just like
//! the token bucket's. A changed `burst` needs nothing: it moves the
//! tolerance, not the TAT.

use crate::domain::{MAX_WINDOW_US, Outcome, Rule};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcraState {
    /// `None` until first seen.
    pub tat: Option<Tat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tat {
    /// The theoretical arrival time of the next unit.
    pub at_us: u64,
    /// The emission interval `at_us` was written with.
    pub interval_us: u64,
    /// Whole units in use when written: `ceil((at_us - now) / interval_us)`,
    /// so `at_us - used × interval_us` lies within one interval before the
    /// write.
    pub used: u64,
}

impl Tat {
    fn written(at_us: u64, interval_us: u64, now_us: u64) -> Tat {
        Tat {
            at_us,
            interval_us,
            used: (at_us - now_us).div_ceil(interval_us),
        }
    }
}

/// Most units a lowered limit may owe: the burst plus the longest window
/// (366 days) of refill, which keeps every timestamp below 2^53. The token
/// bucket caps its debt the same way.
pub(super) fn max_used(burst: u64, interval: u64) -> u64 {
    burst + MAX_WINDOW_US / interval
}

/// The TAT at `interval`, at least `now_us` (a past TAT means nothing is
/// used).
fn current_tat(tat: Option<Tat>, now_us: u64, interval: u64, burst: u64) -> u64 {
    let at = match tat {
        None => now_us,
        Some(t) if t.interval_us == interval => t.at_us,
        Some(t) => {
            let counted_at = t.at_us - t.used * t.interval_us;
            counted_at + t.used.min(max_used(burst, interval)) * interval
        }
    };
    at.max(now_us)
}

pub fn check(state: &mut GcraState, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
    let interval = rule.emission_interval_us();
    // How far ahead of now the TAT may run: the whole bucket.
    let tolerance = rule.burst * interval;
    let tat = current_tat(state.tat, now_us, interval, rule.burst);

    let need = cost.max(1);
    let allowed = tat + need * interval - now_us <= tolerance;
    let tat_after = if allowed { tat + cost * interval } else { tat };
    let reset_after_us = tat_after - now_us;
    if allowed && cost > 0 {
        state.tat = Some(Tat::written(tat_after, interval, now_us));
    }
    Outcome {
        allowed,
        // Saturating: a lowered limit or burst (a debt) or a clock stepping
        // back puts the TAT past the tolerance.
        remaining: tolerance.saturating_sub(reset_after_us) / interval,
        retry_after_us: if allowed {
            0
        } else {
            tat + need * interval - tolerance - now_us
        },
        reset_after_us,
    }
}

/// Moves the TAT back by `cost × interval`, not before now. A key never
/// seen has nothing to give back. A TAT back at now holds nothing: the
/// state goes, as `gcra_refund` in the Lua deletes the key (a TAT of now
/// kept would count as used if the clock then stepped back). Returns how
/// long the state then lives, the expiry the Lua sets.
pub fn refund(state: &mut GcraState, rule: &Rule, now_us: u64, cost: u64) -> Option<u64> {
    state.tat?;
    let interval = rule.emission_interval_us();
    let tat = current_tat(state.tat, now_us, interval, rule.burst);
    let back = tat
        .saturating_sub(cost.saturating_mul(interval))
        .max(now_us);
    state.tat = (back > now_us).then(|| Tat::written(back, interval, now_us));
    Some(back - now_us)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;

    fn gcra(limit: u64, window: u64, burst: u64) -> Rule {
        Rule {
            burst,
            ..rule(Algorithm::Gcra, limit, window)
        }
    }

    #[test]
    fn admits_the_burst_then_one_per_interval() {
        let r = gcra(10, SEC, 3);
        let mut s = State::fresh(Algorithm::Gcra);
        let t = 1_000 * SEC;
        for left in [2, 1, 0] {
            assert_eq!(s.apply(&r, t, 1).remaining, left);
        }
        let denied = s.apply(&r, t + 30 * MS, 1);
        assert_eq!(
            (denied.retry_after_us, denied.reset_after_us),
            (70 * MS, 270 * MS)
        );
        assert_retry_exact(&s, &r, t + 30 * MS, 1, denied);
        let denied2 = s.apply(&r, t + 30 * MS, 2);
        assert_eq!(denied2.retry_after_us, 170 * MS);
        assert_retry_exact(&s, &r, t + 30 * MS, 2, denied2);
    }

    #[test]
    fn uneven_interval_still_admits_the_whole_burst() {
        // 3 per second: 333_333 us per unit; integers mean no float drift.
        let r = gcra(3, SEC, 3);
        let mut s = State::fresh(Algorithm::Gcra);
        assert_eq!((0..3).filter(|_| s.apply(&r, 7, 1).allowed).count(), 3);
        assert!(!s.apply(&r, 7, 1).allowed);
    }

    #[test]
    fn cost_zero_and_expiry() {
        let r = gcra(2, SEC, 2);
        let mut s = State::fresh(Algorithm::Gcra);
        let o = s.apply(&r, 0, 0);
        assert_eq!((o.allowed, o.remaining, o.reset_after_us), (true, 2, 0));
        assert_eq!(s.apply(&r, 0, 2).reset_after_us, SEC);
        let probe = s.apply(&r, 0, 0);
        assert!(!probe.allowed);
        assert_retry_exact(&s, &r, 0, 0, probe);
        let o = s.apply(&r, SEC, 0);
        assert_eq!((o.remaining, o.reset_after_us), (2, 0));
    }
}

#[cfg(test)]
mod changed_rule_tests {
    use super::super::test_support::*;
    use super::super::*;
    use crate::domain::MAX_WINDOW_US;

    const DAY: u64 = 86_400 * SEC;

    fn gcra(limit: u64, window: u64, burst: u64) -> Rule {
        Rule {
            burst,
            ..rule(Algorithm::Gcra, limit, window)
        }
    }

    /// 8 of 10/day spent: 5/day owes 3 and repays them at its own rate
    /// (not at the old, faster one), 20/day has 12 left.
    #[test]
    fn a_changed_limit_keeps_the_units_used() {
        let mut s = State::fresh(Algorithm::Gcra);
        let t = 1_000 * DAY;
        assert!(s.apply(&gcra(10, DAY, 10), t, 8).allowed);
        let lowered = gcra(5, DAY, 5);
        let denied = s.apply(&lowered, t, 1);
        assert_eq!((denied.allowed, denied.remaining), (false, 0));
        // Three owed and one to spend, a fifth of a day each.
        assert_eq!(denied.retry_after_us, 4 * DAY / 5);
        assert_retry_exact(&s, &lowered, t, 1, denied);
        let raised = s.apply(&gcra(20, DAY, 20), t, 0);
        assert_eq!((raised.allowed, raised.remaining), (true, 12));
        // Back to the first rule: still 8 used.
        assert_eq!(s.apply(&gcra(10, DAY, 10), t, 0).remaining, 2);
    }

    /// The units are counted when written, so a later read at another rate
    /// keeps the refill earned since at that rate, like the token bucket.
    #[test]
    fn the_units_drain_at_the_new_rate_from_when_they_were_counted() {
        let mut s = State::fresh(Algorithm::Gcra);
        let t = 1_000 * SEC;
        assert!(s.apply(&gcra(10, SEC, 10), t, 10).allowed);
        // 10 used at 10/s; at 5/s one comes back every 200 ms from t.
        let slower = gcra(5, SEC, 5);
        for (at, remaining) in [(0, 0), (1_199, 0), (1_200, 1), (1_400, 2), (2_000, 5)] {
            let o = s.clone().apply(&slower, t + at * MS, 0);
            assert_eq!(o.remaining, remaining, "at +{at}ms");
        }
        let o = s.apply(&slower, t + 1_300 * MS, 1);
        assert!(o.allowed);
        // Written back at 5/s: the 100 ms earned toward the next unit stay.
        assert_eq!(s.apply(&slower, t + 1_400 * MS, 0).remaining, 1);
    }

    #[test]
    fn a_changed_burst_keeps_the_units_used() {
        let mut s = State::fresh(Algorithm::Gcra);
        assert!(s.apply(&gcra(10, SEC, 10), 0, 8).allowed);
        let smaller = s.apply(&gcra(10, SEC, 5), 0, 1);
        assert_eq!((smaller.allowed, smaller.remaining), (false, 0));
        assert_eq!(s.apply(&gcra(10, SEC, 20), 0, 0).remaining, 12);
    }

    /// A limit lowered far below its usage owes at most 366 days of refill
    /// beyond its burst, so nothing overflows.
    #[test]
    fn a_huge_debt_is_capped() {
        let fast = gcra(1_000_000_000_000, MAX_WINDOW_US, 1_000_000_000_000);
        let mut s = State::fresh(Algorithm::Gcra);
        assert!(s.apply(&fast, 0, fast.burst).allowed);
        let slow = gcra(1, MAX_WINDOW_US, 1);
        let denied = s.apply(&slow, 0, 1);
        assert_eq!((denied.allowed, denied.remaining), (false, 0));
        assert_eq!(denied.retry_after_us, 2 * MAX_WINDOW_US);
        assert_eq!(denied.reset_after_us, 2 * MAX_WINDOW_US);
        let mut bucket = State::fresh(Algorithm::TokenBucket);
        let tb = |r: &Rule| Rule {
            algorithm: Algorithm::TokenBucket,
            ..*r
        };
        bucket.apply(&tb(&fast), 0, fast.burst);
        assert_eq!(bucket.apply(&tb(&slow), 0, 1), denied);
    }
}
