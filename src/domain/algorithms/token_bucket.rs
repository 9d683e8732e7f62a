//! Token bucket: `burst` tokens, one more every `window / limit` (the
//! emission interval, whole microseconds). Refill is lazy and integral: the
//! state keeps the time up to which tokens were credited, so no fraction of a
//! token is ever lost or rounded, and Lua's doubles stay exact.
//!
//! The state counts the tokens *used* (missing from a full bucket), not the
//! tokens left, so a policy reload that changes `burst` keeps the usage: a
//! bucket lowered below what was used holds a debt (no token, `remaining`
//! 0) until refills pay it back, and a raised one holds the new burst less
//! what was used.

use crate::domain::{Outcome, Rule};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenBucketState {
    /// `None` until first seen: a new bucket is full.
    pub bucket: Option<Bucket>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Tokens missing from a full bucket when last written.
    pub used: u64,
    /// Tokens have been credited up to this instant.
    pub credited_at_us: u64,
}

/// The tokens in the bucket at `now_us` and the instant they are credited
/// up to.
fn refilled(bucket: Option<Bucket>, rule: &Rule, now_us: u64) -> (i64, u64) {
    let interval = rule.emission_interval_us();
    let burst = rule.burst as i64;
    let (used, mut credited_at_us) = bucket.map_or((0, now_us), |b| (b.used, b.credited_at_us));
    // A limit lowered far below its usage owes at most 366 days of refill.
    let used = used.min(super::gcra::max_used(rule.burst, interval));
    // Negative after the burst was lowered below what was used: a debt.
    let mut tokens = burst - used as i64;
    if now_us > credited_at_us {
        let earned = ((now_us - credited_at_us) / interval) as i64;
        tokens += earned;
        credited_at_us += earned as u64 * interval;
        if tokens >= burst {
            // A full bucket earns nothing more: the clock restarts now.
            tokens = burst;
            credited_at_us = now_us;
        }
    }
    (tokens, credited_at_us)
}

pub fn check(state: &mut TokenBucketState, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
    let interval = rule.emission_interval_us();
    let burst = rule.burst as i64;
    let (mut tokens, credited_at_us) = refilled(state.bucket, rule, now_us);

    let need = cost.max(1) as i64;
    let allowed = tokens >= need;
    if allowed {
        tokens -= cost as i64;
    }
    // The k-th next token arrives at credited_at + k * interval.
    let arrival = |k: i64| credited_at_us + k as u64 * interval - now_us;
    let retry_after_us = if allowed { 0 } else { arrival(need - tokens) };
    let reset_after_us = if tokens < burst {
        arrival(burst - tokens)
    } else {
        0
    };
    if allowed && cost > 0 {
        state.bucket = Some(Bucket {
            used: (burst - tokens) as u64,
            credited_at_us,
        });
    }
    Outcome {
        allowed,
        // A debt leaves nothing; a bucket of the old, larger burst, no more
        // than the new one (tokens never exceed `burst`).
        remaining: tokens.max(0) as u64,
        retry_after_us,
        reset_after_us,
    }
}

/// Puts up to `cost` tokens back, up to `burst` (a debt is paid down
/// first). A bucket never seen is full: nothing to give back. Returns how
/// long the rewritten state lives (until the bucket is full again; 0 when
/// it is full now), the expiry `token_bucket_refund` in the Lua sets.
pub fn refund(state: &mut TokenBucketState, rule: &Rule, now_us: u64, cost: u64) -> Option<u64> {
    state.bucket?;
    let interval = rule.emission_interval_us();
    let burst = rule.burst as i64;
    let (tokens, mut credited_at_us) = refilled(state.bucket, rule, now_us);
    let tokens = burst.min(tokens.saturating_add(cost as i64));
    if tokens == burst {
        // Full: as a refill that fills it, the clock restarts now.
        credited_at_us = now_us;
    }
    state.bucket = Some(Bucket {
        used: (burst - tokens) as u64,
        credited_at_us,
    });
    Some(credited_at_us + (burst - tokens) as u64 * interval - now_us)
}

#[cfg(test)]
#[path = "token_bucket_tests.rs"]
mod tests;
