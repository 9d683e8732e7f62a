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
//! - Entries are keyed by the whole rule (key, algorithm, window, limit,
//!   burst): another limit on the same key is another question.
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
//! - `token_bucket` is never cached. Its state (tokens, credit time) is
//!   shared by every rule on the same key and window, and a rule with a
//!   faster refill credits tokens that a slower rule can then spend, so its
//!   denials are not monotone across rules. The other four only get harder
//!   to pass when other traffic arrives, whatever its rule. (`gcra` gives the
//!   same answers as `token_bucket` for one rule and is cached.)
//! - With several rules on one key, another rule can be allowed during a
//!   cached denial and push the key's `reset_after` later than the cached
//!   one; the decision and `retry_after` stay safe.
//!
//! Memory is bounded: a fixed-capacity concurrent map (quick_cache, S3-FIFO
//! eviction), so a flood of distinct denied keys evicts rather than grows.

use std::sync::Arc;
use std::time::Duration;

use quick_cache::Equivalent;
use quick_cache::sync::Cache;

use crate::domain::{Algorithm, Check, Clock, Outcome};

/// The longest an entry answers for, whatever the denial's length.
pub const MAX_AGE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RuleKey {
    key: String,
    algorithm: Algorithm,
    window_us: u64,
    limit: u64,
    burst: u64,
}

/// A borrowed [`RuleKey`] for lookups without allocating; it must hash the
/// same fields in the same order (`str` and `String` hash alike).
#[derive(Hash)]
struct RuleKeyRef<'a> {
    key: &'a str,
    algorithm: Algorithm,
    window_us: u64,
    limit: u64,
    burst: u64,
}

impl<'a> From<&'a Check> for RuleKeyRef<'a> {
    fn from(check: &'a Check) -> Self {
        RuleKeyRef {
            key: &check.key,
            algorithm: check.rule.algorithm,
            window_us: check.rule.window_us,
            limit: check.rule.limit,
            burst: check.rule.burst,
        }
    }
}

impl Equivalent<RuleKey> for RuleKeyRef<'_> {
    fn equivalent(&self, k: &RuleKey) -> bool {
        self.key == k.key
            && self.algorithm == k.algorithm
            && self.window_us == k.window_us
            && self.limit == k.limit
            && self.burst == k.burst
    }
}

#[derive(Debug, Clone, Copy)]
struct Denial {
    /// Until this instant (local monotonic clock) a one-unit check is denied.
    until_us: u64,
    /// When the key is back to full capacity, as the store said.
    reset_at_us: u64,
    /// The entry answers until `min(until, recorded + MAX_AGE)`.
    valid_until_us: u64,
}

pub struct DenyCache {
    entries: Cache<RuleKey, Denial>,
    clock: Arc<dyn Clock>,
}

impl DenyCache {
    /// `capacity` entries at most. `clock` must be monotonic in production.
    pub fn new(capacity: usize, clock: Arc<dyn Clock>) -> DenyCache {
        DenyCache {
            entries: Cache::new(capacity.max(1)),
            clock,
        }
    }

    /// The local time to pass to [`record`](Self::record): take it just
    /// before asking the store.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// The store's answer for `check`, if a recorded denial still covers it.
    pub fn lookup(&self, check: &Check) -> Option<Outcome> {
        if !cacheable(check) {
            return None;
        }
        let key = RuleKeyRef::from(check);
        let denial = self.entries.get(&key)?;
        let now = self.clock.now_us();
        if now >= denial.until_us.min(denial.valid_until_us) {
            self.entries.remove(&key);
            return None;
        }
        Some(Outcome {
            allowed: false,
            // A one-unit check is denied, so no unit is left.
            remaining: 0,
            retry_after_us: denial.until_us - now,
            reset_after_us: denial.reset_at_us.saturating_sub(now),
        })
    }

    /// Remembers the store's `outcome` for `check`, asked at `asked_at_us`,
    /// if it is a one-unit denial.
    pub fn record(&self, check: &Check, asked_at_us: u64, outcome: &Outcome) {
        if outcome.allowed || !cacheable(check) {
            return;
        }
        let rule = &check.rule;
        self.entries.insert(
            RuleKey {
                key: check.key.clone(),
                algorithm: rule.algorithm,
                window_us: rule.window_us,
                limit: rule.limit,
                burst: rule.burst,
            },
            Denial {
                until_us: asked_at_us + outcome.retry_after_us,
                reset_at_us: asked_at_us + outcome.reset_after_us,
                valid_until_us: asked_at_us + MAX_AGE.as_micros() as u64,
            },
        );
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }
}

/// One-unit checks of every algorithm but `token_bucket` (see the module doc).
fn cacheable(check: &Check) -> bool {
    check.cost <= 1 && check.rule.algorithm != Algorithm::TokenBucket
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ManualClock, Rule};

    fn check(cost: u64, limit: u64) -> Check {
        Check {
            key: "k".into(),
            rule: Rule {
                algorithm: Algorithm::Gcra,
                limit,
                window_us: 1_000_000,
                burst: limit,
            },
            cost,
        }
    }

    fn denied(retry: u64) -> Outcome {
        Outcome {
            allowed: false,
            remaining: 0,
            retry_after_us: retry,
            reset_after_us: retry * 2,
        }
    }

    #[test]
    fn answers_one_unit_checks_until_the_denial_ends() {
        let clock = ManualClock::new(1_000);
        let cache = DenyCache::new(10, Arc::new(clock.clone()));
        cache.record(&check(1, 5), 1_000, &denied(500));
        clock.advance_us(200);
        let hit = cache.lookup(&check(0, 5)).unwrap();
        assert_eq!((hit.retry_after_us, hit.reset_after_us), (300, 800));
        assert!(
            cache.lookup(&check(2, 5)).is_none(),
            "cost 2 has its own retry"
        );
        assert!(
            cache.lookup(&check(1, 6)).is_none(),
            "another limit is another rule"
        );
        clock.advance_us(300);
        assert!(
            cache.lookup(&check(1, 5)).is_none(),
            "expired exactly at until"
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn ignores_denials_of_larger_costs_and_allowed_checks() {
        let cache = DenyCache::new(10, Arc::new(ManualClock::new(0)));
        cache.record(&check(5, 10), 0, &denied(500));
        let allowed = Outcome {
            allowed: true,
            ..denied(0)
        };
        cache.record(&check(1, 10), 0, &allowed);
        assert!(cache.is_empty());
    }

    #[test]
    fn entries_answer_for_at_most_max_age() {
        let clock = ManualClock::new(0);
        let cache = DenyCache::new(10, Arc::new(clock.clone()));
        cache.record(&check(1, 5), 0, &denied(60_000_000));
        clock.advance_us(MAX_AGE.as_micros() as u64 - 1);
        assert_eq!(
            cache.lookup(&check(1, 5)).unwrap().retry_after_us,
            60_000_000 - MAX_AGE.as_micros() as u64 + 1
        );
        clock.advance_us(1);
        assert!(
            cache.lookup(&check(1, 5)).is_none(),
            "asks the store again after MAX_AGE"
        );
    }

    #[test]
    fn token_bucket_is_never_cached() {
        let cache = DenyCache::new(10, Arc::new(ManualClock::new(0)));
        let mut c = check(1, 5);
        c.rule.algorithm = Algorithm::TokenBucket;
        cache.record(&c, 0, &denied(500));
        assert!(cache.is_empty());
    }

    #[test]
    fn stays_bounded() {
        let cache = DenyCache::new(100, Arc::new(ManualClock::new(0)));
        for i in 0..10_000 {
            let mut c = check(1, 5);
            c.key = format!("k{i}");
            cache.record(&c, 0, &denied(1_000));
        }
        assert!(cache.len() <= 200, "{}", cache.len());
    }
}
