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
#[path = "gcra_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "gcra_changed_rule_tests.rs"]
mod changed_rule_tests;
