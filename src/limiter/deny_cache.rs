//! The exact local deny cache.
//!
//! When a check needing one unit is denied with `retry_after = T`, no check
//! on that rule can pass before T unless something resets it: every one of
//! our algorithms only becomes easier to pass as time goes by, and other
//! traffic can only push T later (denied checks write nothing, and nothing
//! can be allowed meanwhile). So the instance remembers "denied until
//! asked_at + T" and answers later checks of that rule itself until then,
//! without a round trip. It is not a cache of counts: the answer is the one
//! the store would give.
//!
//! Rules of exactness:
//! - Entries are keyed by the client key, the policy and the whole list of
//!   limits (name, algorithm, window, limit, burst each): another set of
//!   limits on the same key is another question.
//! - A check of several limits is denied while any denying limit still
//!   denies. The entry answers until the earliest time any of its denying
//!   limits could pass: until then each of them is still denying, so the
//!   decision and every denying limit's outcome are exact, and so are the
//!   check's `retry_after` (their largest) and its most restrictive limit
//!   (the first denying one: a denied one-unit check leaves 0, and ties go
//!   to a denying limit), hence `limit`, `remaining` and the headers.
//!   A limit that allowed keeps allowing (time only makes it easier, and
//!   nothing of it is spent while the check is denied), but its `remaining`
//!   and `reset_after` move with time (a refill, a window rolling over).
//!   The entry reports such a limit as recorded: a denied check spends
//!   nothing, so the store reports an allowing limit as it is (a zero-cost
//!   look), the same for cost 0 and 1, and its `remaining` can only have
//!   grown since; its `reset_after` is reported as recorded too,
//!   so the check's `reset_after` (the largest over all limits) may differ
//!   from the store's when an allowing limit holds it.
//!   (Checks with *other* limits on the same state can spend an allowing
//!   limit meanwhile; see the last rule.)
//! - Only denials of checks needing one unit (`cost` 0 or 1) are recorded,
//!   and only such checks are answered: a cost-5 denial with 2 units left
//!   says nothing about a cost-1 check, and for a larger cost the exact
//!   retry-after is unknown.
//! - `until` is measured from when the store was *asked*, which is no later
//!   than when it decided, so an entry never outlives the true denial. A
//!   cached `retry_after` can therefore be shorter than the store's by up to
//!   one round trip; a client retrying that early misses the cache and gets
//!   the store's exact answer.
//! - Durations are measured on a monotonic clock, so a local wall-clock
//!   step cannot stretch an entry. The store's clock can still jump, and
//!   its state can be lost (a Redis restart without persistence, eviction),
//!   so no entry lives longer than [`MAX_AGE`]: at worst a check is denied
//!   for that long after the store would have allowed it, and a flooding key
//!   still costs one store call per second per instance.
//! - A bucket's state (`token_bucket`, `gcra`: units used, the instant
//!   they were counted) read by a rule with a faster refill is credited
//!   units that a slower rule can then spend, so a bucket's denials are
//!   monotone only while one rule reads it. (Both keep the units used when
//!   a rule's `limit` changes, which is what makes them so; gcra used to
//!   keep time, which is monotone but rescaled the usage.) The other three
//!   only get harder to pass when other traffic arrives, whatever its rule.
//!   So every bucket's state is read by one rule: an inline bucket's key
//!   holds its `limit` and `burst` (`domain::state_key`), a policy's limit
//!   its policy and limit name. Only a reload that changes a policy's limit
//!   brings another rule to that state, and the new rule is another cache
//!   key (during a rolling reload, instances on the old rule can deny for
//!   at most [`MAX_AGE`] after the new rule's traffic freed units). Under
//!   `redis.legacy_keys` an inline bucket is also spent on its old name,
//!   which every rule on that key, algorithm and window shares: then its
//!   denials are not cached ([`DenyCache::with_shared_inline_buckets`]).
//!   A check denied by other limits while a bucket limit allowed is
//!   cached: whatever that bucket does meanwhile, the check stays denied.
//! - With several rules on one key, another rule can be allowed during a
//!   cached denial and push the key's `reset_after` later than the cached
//!   one; the decision and `retry_after` stay safe.
//!
//! - "Unless something resets it": a reset, refund or settle of the key ends a
//!   denial early. [`invalidate`](DenyCache::invalidate) makes every entry
//!   of that key (all policies and limits) stale, and refuses any later
//!   recording of a store answer asked before it: the store may have
//!   decided that one before the reset (see `invalidation.rs`). Other
//!   instances learn of it through the store (`Limiter::invalidate`
//!   publishes it; with Redis, a pub/sub channel). While an instance may
//!   be missing invalidations (its subscription is lost), the cache is
//!   [`suspend`](DenyCache::suspend)ed: dropped whole, answering and
//!   recording nothing, and on [`resume`](DenyCache::resume) it refuses
//!   whatever was asked before.
//!
//! Memory is bounded: a fixed-capacity concurrent map (quick_cache, S3-FIFO
//! eviction), so a flood of distinct denied keys evicts rather than grows.

use std::sync::Arc;
use std::time::Duration;

use quick_cache::Equivalent;
use quick_cache::sync::Cache;

use self::invalidation::Invalidations;
use crate::domain::state_key::StateKey;
use crate::domain::{Check, Clock, Limit, Outcome};

mod invalidation;

/// The longest an entry answers for, whatever the denial's length.
pub const MAX_AGE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DenyKey {
    key: String,
    policy: Option<Arc<str>>,
    limits: Arc<[Limit]>,
}

/// A borrowed [`DenyKey`] for lookups without allocating; it must hash the
/// same fields in the same order (`str`, `String` and `Arc<str>` hash
/// alike, and so do `Arc<[T]>` and `[T]`).
#[derive(Hash)]
struct DenyKeyRef<'a> {
    key: &'a str,
    policy: Option<&'a str>,
    limits: &'a [Limit],
}

impl<'a> From<&'a Check> for DenyKeyRef<'a> {
    fn from(check: &'a Check) -> Self {
        DenyKeyRef {
            key: &check.key,
            policy: check.policy.as_deref(),
            limits: &check.limits,
        }
    }
}

impl Equivalent<DenyKey> for DenyKeyRef<'_> {
    fn equivalent(&self, k: &DenyKey) -> bool {
        self.key == k.key && self.policy == k.policy.as_deref() && self.limits == &*k.limits
    }
}

/// One limit's part of a recorded denial, in absolute local time.
#[derive(Debug, Clone, Copy)]
struct Recorded {
    allowed: bool,
    /// What an allowing limit had left (a denied check spends nothing).
    remaining: u64,
    /// When this limit would pass (denying limits only).
    until_us: u64,
    /// When the key is back to full capacity, as the store said.
    reset_at_us: u64,
}

#[derive(Debug, Clone)]
struct Denial {
    limits: Arc<[Recorded]>,
    /// When the store was asked: an invalidation at or after it ends the entry.
    asked_at_us: u64,
    /// The entry answers until this instant: the earliest `until` of the
    /// denying limits, and at most `MAX_AGE` after it was recorded.
    valid_until_us: u64,
}

pub struct DenyCache {
    entries: Cache<DenyKey, Denial>,
    clock: Arc<dyn Clock>,
    invalidations: Invalidations,
    /// Inline buckets share state across rules (`redis.legacy_keys`), so
    /// their denials are not recorded.
    shared_inline_buckets: bool,
}

impl DenyCache {
    /// `capacity` entries at most. `clock` must be monotonic in production.
    pub fn new(capacity: usize, clock: Arc<dyn Clock>) -> DenyCache {
        DenyCache {
            entries: Cache::new(capacity.max(1)),
            clock,
            invalidations: Invalidations::new(),
            shared_inline_buckets: false,
        }
    }

    /// For a store whose inline buckets are shared by every rule on the
    /// same key, algorithm and window (the old key names, read and spent
    /// under `redis.legacy_keys`): their denials are then never recorded.
    pub fn with_shared_inline_buckets(mut self, shared: bool) -> DenyCache {
        self.shared_inline_buckets = shared;
        self
    }

    /// The local time to pass to [`record`](Self::record): take it just
    /// before asking the store.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// The store's answer for `check` (one outcome per limit), if a
    /// recorded denial still covers it.
    pub fn lookup(&self, check: &Check) -> Option<Vec<Outcome>> {
        if check.cost > 1 || !self.invalidations.is_active() {
            return None;
        }
        let key = DenyKeyRef::from(check);
        let denial = self.entries.get(&key)?;
        let now = self.clock.now_us();
        if now >= denial.valid_until_us
            || self.invalidations.is_stale(&check.key, denial.asked_at_us)
        {
            self.entries.remove(&key);
            return None;
        }
        Some(
            denial
                .limits
                .iter()
                .map(|r| Outcome {
                    allowed: r.allowed,
                    // A denied one-unit check has no unit left.
                    remaining: if r.allowed { r.remaining } else { 0 },
                    retry_after_us: if r.allowed { 0 } else { r.until_us - now },
                    reset_after_us: r.reset_at_us.saturating_sub(now),
                })
                .collect(),
        )
    }

    /// Remembers the store's `outcomes` for `check`, asked at
    /// `asked_at_us`, if they deny a one-unit check and, with shared
    /// inline buckets, no denying limit is one.
    pub fn record(&self, check: &Check, asked_at_us: u64, outcomes: &[Outcome]) {
        if check.cost > 1 || outcomes.iter().all(|o| o.allowed) {
            return;
        }
        // Checked again on lookup: an invalidation may land between here
        // and the insert.
        if !self.invalidations.is_active() || self.invalidations.is_stale(&check.key, asked_at_us) {
            return;
        }
        let mut valid_until_us = asked_at_us + MAX_AGE.as_micros() as u64;
        for (limit, outcome) in check.limits.iter().zip(outcomes) {
            if !outcome.allowed {
                if self.shared_inline_buckets && StateKey::rule_of(check, limit).is_some() {
                    return;
                }
                valid_until_us = valid_until_us.min(asked_at_us + outcome.retry_after_us);
            }
        }
        let limits = outcomes
            .iter()
            .map(|o| Recorded {
                allowed: o.allowed,
                remaining: o.remaining,
                until_us: asked_at_us + o.retry_after_us,
                reset_at_us: asked_at_us + o.reset_after_us,
            })
            .collect();
        self.entries.insert(
            DenyKey {
                key: check.key.clone(),
                policy: check.policy.clone(),
                limits: check.limits.clone(),
            },
            Denial {
                limits,
                asked_at_us,
                valid_until_us,
            },
        );
    }

    /// Ends every entry of the client `key`, whatever its policy and
    /// limits, and refuses to record any store answer for it asked until
    /// now. Call it once the key's state was changed (a reset, a refund).
    pub fn invalidate(&self, key: &str) {
        self.invalidations.mark(key, self.clock.now_us());
    }

    /// Ends every entry, and refuses to record any answer asked until now.
    pub fn clear(&self) {
        self.invalidations.clear(self.clock.now_us());
        self.entries.clear();
    }

    /// Drops every entry and stops answering and recording until
    /// [`resume`](Self::resume): while invalidations may be missed.
    pub fn suspend(&self) {
        self.invalidations.suspend(self.clock.now_us());
        self.entries.clear();
    }

    /// Answers and records again, except store answers asked until now
    /// (an invalidation may have been missed meanwhile).
    pub fn resume(&self) {
        self.invalidations.resume(self.clock.now_us());
    }

    /// Whether the cache is suspended (see [`suspend`](Self::suspend)).
    pub fn is_suspended(&self) -> bool {
        !self.invalidations.is_active()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }
}

#[cfg(test)]
mod invalidation_tests;
#[cfg(test)]
mod tests;
