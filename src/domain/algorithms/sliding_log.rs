//! Sliding log: when each admitted unit was admitted, so a check counts
//! exactly the units of the last `window`.
//!
//! One entry per admission instant, `(timestamp, units)`, in both stores
//! (Redis: one sorted-set member `<ts>:<units>` scored by `ts`, plus the
//! running total, so an allowed check need not read the whole log), so a check
//! of cost 100 000 writes one entry, not 100 000. The entries of a key are
//! bounded by [`MAX_EXACT_ENTRIES`]: below it the log is exact; at or above
//! it, an admission in the same time slot as the newest entry (slots of
//! `ceil(window / MAX_EXACT_ENTRIES)`) joins that entry, which moves to the
//! later of the two instants. So units can only be logged later than they
//! happened, by less than one slot (or by however far the clock stepped
//! back): they leave the window late, never early, and the log never admits
//! more than `limit` in any window. Each check's work and each key's memory
//! are bounded by `2 * MAX_EXACT_ENTRIES + 1` entries whatever the limit.

use std::collections::VecDeque;

use crate::domain::{Outcome, Rule};

/// Entries a log holds before admissions start to share slots. With at most
/// `2 * 63 + 1 = 127` entries plus the running total the Lua keeps beside
/// them, a Redis key stays within `zset-max-listpack-entries` (128), its
/// compact encoding. `lua/sliding_log.lua` has the same constant (a test
/// checks they match).
pub const MAX_EXACT_ENTRIES: usize = 63;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    /// `(timestamp_us, units)`, oldest first, timestamps distinct.
    pub entries: VecDeque<(u64, u64)>,
}

impl SlidingLogState {
    fn total(&self) -> u64 {
        self.entries.iter().map(|(_, n)| n).sum()
    }

    /// Logs `cost` units admitted at `now_us` (see the module doc).
    fn log(&mut self, window: u64, now_us: u64, cost: u64) {
        // Clocks can step back; keep the log sorted as the sorted set is.
        let at = self.entries.partition_point(|(ts, _)| *ts <= now_us);
        if let Some((_, n)) = at
            .checked_sub(1)
            .and_then(|i| self.entries.get_mut(i))
            .filter(|(ts, _)| *ts == now_us)
        {
            *n += cost;
            return;
        }
        if self.entries.len() < MAX_EXACT_ENTRIES {
            self.entries.insert(at, (now_us, cost));
            return;
        }
        let slot = window.div_ceil(MAX_EXACT_ENTRIES as u64);
        match self.entries.back_mut() {
            Some((newest, n)) if now_us < *newest || now_us / slot == *newest / slot => {
                *newest = (*newest).max(now_us);
                *n += cost;
            }
            _ => self.entries.push_back((now_us, cost)),
        }
    }
}

pub fn check(state: &mut SlidingLogState, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
    let window = rule.window_us();
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
        state.log(window, now_us, cost);
    }
    let count = if allowed { count + cost } else { count };

    let retry_after_us = if allowed {
        0
    } else {
        // The check passes once the oldest `count + need - limit` units have
        // left the window: when the entry holding that rank expires.
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

/// Removes the `cost` newest units still in the window, from the newest
/// entry back, splitting the last one it touches (`sliding_log_refund` in
/// the Lua, which keeps the running total too). Expired entries are left
/// for the next check to trim, as a look would leave them.
pub fn refund(state: &mut SlidingLogState, rule: &Rule, now_us: u64, cost: u64) {
    let cutoff = now_us.checked_sub(rule.window_us());
    let mut left = cost;
    while left > 0 {
        let Some((ts, units)) = state.entries.back_mut() else {
            break;
        };
        if cutoff.is_some_and(|c| *ts <= c) {
            break;
        }
        let taken = left.min(*units);
        *units -= taken;
        left -= taken;
        if *units == 0 {
            state.entries.pop_back();
        }
    }
}

#[cfg(test)]
#[path = "sliding_log_tests.rs"]
mod tests;
