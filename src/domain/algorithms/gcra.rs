//! GCRA (generic cell rate algorithm): one stored number per key, the
//! theoretical arrival time (TAT) of the next unit. Equivalent to a token
//! bucket of capacity `burst` refilled every `window / limit`: with the same
//! inputs it gives the same answers as [`super::token_bucket`], which a test
//! checks, at half the state.

use crate::domain::{Outcome, Rule};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcraState {
    /// `None` until first seen.
    pub tat_us: Option<u64>,
}

pub fn check(state: &mut GcraState, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
    let interval = rule.emission_interval_us();
    // How far ahead of now the TAT may run: the whole bucket.
    let tolerance = rule.burst * interval;
    let tat = state.tat_us.map_or(now_us, |t| t.max(now_us));

    let need = cost.max(1);
    let allowed = tat + need * interval - now_us <= tolerance;
    let tat_after = if allowed { tat + cost * interval } else { tat };
    let reset_after_us = tat_after - now_us;
    if allowed && cost > 0 {
        state.tat_us = Some(tat_after);
    }
    Outcome {
        allowed,
        // Saturating: only a clock stepping back can put the TAT past the tolerance.
        remaining: tolerance.saturating_sub(reset_after_us) / interval,
        retry_after_us: if allowed {
            0
        } else {
            tat + need * interval - tolerance - now_us
        },
        reset_after_us,
    }
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
