//! Concurrency: at most `limit` in flight per key. A check of a cost
//! above 0 acquires one lease (one request in flight, whatever the cost it
//! spends on the check's rate limits), which lives `window` (the lease's TTL) unless it is
//! released or renewed first; a check of cost 0 looks. An expired lease
//! frees its slot by itself: it simply stops counting, no traffic needed.
//!
//! The state is the live leases, each an id and the instant it expires
//! (`lua/concurrency.lua` keeps the same as a sorted set, member = id,
//! score = expiry). At most `limit` are live at once, so the state is
//! bounded by the limit (itself bounded by `limits.max_concurrency`).
//!
//! A refund and a settle leave the leases alone: only a release frees a
//! slot, only the holder of the id can release it, and a slot is one unit.

use crate::domain::{Outcome, Rule};

/// The live leases: `(id, expires_at_us)`, in the order they were taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConcurrencyState {
    pub leases: Vec<(String, u64)>,
}

impl ConcurrencyState {
    /// The leases still live at `now_us` (expiry strictly after it).
    fn live(&self, now_us: u64) -> impl Iterator<Item = &(String, u64)> {
        self.leases.iter().filter(move |(_, at)| *at > now_us)
    }

    /// Drops the expired leases (done only when writing, as the Lua trims
    /// only when it writes).
    fn trim(&mut self, now_us: u64) {
        self.leases.retain(|(_, at)| *at > now_us);
    }
}

/// Acquires the lease `lease` (any cost above 0: one slot) or looks (cost
/// 0). Allowed iff fewer than `limit` leases are live. A denial's retry_after is when the
/// earliest live lease expires: an upper bound, as a release can come
/// sooner. `reset_after` is when the last live lease expires. Ids are
/// generated fresh for every acquire, so an id is never taken twice; if
/// one were, its expiry would move, as a `ZADD` moves its score.
pub fn check(
    state: &mut ConcurrencyState,
    rule: &Rule,
    now_us: u64,
    cost: u64,
    lease: &str,
) -> Outcome {
    let held = state.live(now_us).count() as u64;
    let latest = state.live(now_us).map(|(_, at)| *at).max();
    // A request in flight is one slot, whatever its cost on the check's
    // rate limits; a look (cost 0) asks whether one would be free.
    let allowed = held < rule.limit;
    let spends = allowed && cost > 0;
    let until = now_us + rule.window_us();
    let retry_after_us = if allowed {
        0
    } else {
        state
            .live(now_us)
            .map(|(_, at)| *at - now_us)
            .min()
            .unwrap_or(0)
    };
    if spends {
        state.trim(now_us);
        match state.leases.iter_mut().find(|(id, _)| id == lease) {
            Some(entry) => entry.1 = until,
            None => state.leases.push((lease.to_string(), until)),
        }
    }
    let count = held + u64::from(spends);
    let latest = if spends {
        Some(latest.map_or(until, |l| l.max(until)))
    } else {
        latest
    };
    Outcome {
        allowed,
        // Saturating: the limit may have been lowered while leases were held.
        remaining: rule.limit.saturating_sub(count),
        retry_after_us,
        reset_after_us: latest.map_or(0, |at| at - now_us),
    }
}

/// Frees the lease `lease` at once. Whether it was live: `false` for a
/// lease that expired, was released already, or never was.
pub fn release(state: &mut ConcurrencyState, now_us: u64, lease: &str) -> bool {
    let live = state.live(now_us).any(|(id, _)| id == lease);
    state.leases.retain(|(id, _)| id != lease);
    live
}

/// Extends the live lease `lease` to `now + ttl`. Whether it was live: an
/// expired or unknown lease is not brought back (its slot may be taken).
pub fn renew(state: &mut ConcurrencyState, rule: &Rule, now_us: u64, lease: &str) -> bool {
    let until = now_us + rule.window_us();
    match state
        .leases
        .iter_mut()
        .find(|(id, at)| id == lease && *at > now_us)
    {
        Some(entry) => {
            entry.1 = until;
            true
        }
        None => false,
    }
}

#[cfg(test)]
#[path = "concurrency_tests.rs"]
mod tests;
