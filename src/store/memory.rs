//! The embedded store: the domain functions over sharded in-process maps.
//!
//! A `std::sync::Mutex` per shard rather than tokio's: a check holds the lock
//! for a few hundred nanoseconds and never across an `.await`, which is the
//! case tokio's own docs recommend the std mutex for. Sharding keeps
//! unrelated keys from contending.
//!
//! State expires when its algorithm says the key is back to "never seen"
//! (`reset_after`), exactly like the TTLs the Lua scripts set, and a
//! background sweep reclaims it so memory follows the active keys.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;

use super::{Store, StoreError};
use crate::domain::algorithms::State;
use crate::domain::{Algorithm, Check, Clock, Outcome, SystemClock};

const SHARDS: usize = 64;

type StateKey = (Algorithm, u64, String);

struct Entry {
    state: State,
    expires_at_us: u64,
}

type Shard = Mutex<HashMap<StateKey, Entry>>;

struct Inner {
    shards: Vec<Shard>,
    // Keyed SipHash: client keys are attacker-controlled, so shard choice
    // must not be predictable.
    hasher: RandomState,
    clock: Arc<dyn Clock>,
}

/// The in-process store. Cheap to clone.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl MemoryStore {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
                hasher: RandomState::new(),
                clock,
            }),
        }
    }

    /// Spawns the task that reclaims expired state every `interval`. It holds
    /// only a weak reference and ends once the store is dropped.
    pub fn spawn_sweeper(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                inner.sweep();
            }
        })
    }

    /// Removes every expired entry now. Returns how many were removed.
    pub fn sweep(&self) -> usize {
        self.inner.sweep()
    }

    /// How many keys hold state, expired or not.
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs a check synchronously (the async trait method wraps this).
    pub fn check_now(&self, check: &Check) -> Outcome {
        let inner = &self.inner;
        let rule = &check.rule;
        let key: StateKey = (rule.algorithm, rule.window_us, check.key.clone());
        let shard = &inner.shards[inner.hasher.hash_one(&key) as usize % SHARDS];
        let now = inner.clock.now_us();

        let mut map = lock(shard);
        let entry = map.entry(key).or_insert_with(|| Entry {
            state: State::fresh(rule.algorithm),
            expires_at_us: 0,
        });
        if entry.expires_at_us <= now {
            // Expired state is "never seen", as after a Redis TTL.
            entry.state = State::fresh(rule.algorithm);
        }
        let outcome = entry.state.apply(rule, now, check.cost);
        entry.expires_at_us = now.saturating_add(outcome.reset_after_us);
        if outcome.reset_after_us == 0 {
            map.remove(&(rule.algorithm, rule.window_us, check.key.clone()));
        }
        outcome
    }
}

impl Inner {
    fn sweep(&self) -> usize {
        let now = self.clock.now_us();
        let mut removed = 0;
        for shard in &self.shards {
            let mut map = lock(shard);
            let before = map.len();
            map.retain(|_, e| e.expires_at_us > now);
            removed += before - map.len();
        }
        removed
    }
}

/// A poisoned shard only means a panic happened mid-check elsewhere; the map
/// itself is still consistent (every mutation is a single assignment), so
/// keep serving rather than failing every later check on that shard.
fn lock(shard: &Shard) -> MutexGuard<'_, HashMap<StateKey, Entry>> {
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Store for MemoryStore {
    async fn check(&self, check: &Check) -> Result<Outcome, StoreError> {
        Ok(self.check_now(check))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ManualClock, Rule};

    fn check(key: &str, algorithm: Algorithm) -> Check {
        Check {
            key: key.into(),
            rule: Rule {
                algorithm,
                limit: 2,
                window_us: 1_000_000,
                burst: 2,
            },
            cost: 1,
        }
    }

    #[test]
    fn same_key_under_other_algorithm_or_window_is_separate() {
        let store = MemoryStore::new(Arc::new(ManualClock::new(0)));
        let a = check("k", Algorithm::FixedWindow);
        assert!(store.check_now(&a).allowed);
        assert!(store.check_now(&a).allowed);
        assert!(!store.check_now(&a).allowed);
        assert!(store.check_now(&check("k", Algorithm::SlidingLog)).allowed);
        let mut other_window = a.clone();
        other_window.rule.window_us = 2_000_000;
        assert!(store.check_now(&other_window).allowed);
    }

    #[test]
    fn sweep_reclaims_expired_keys_only() {
        let clock = ManualClock::new(10_000_000);
        let store = MemoryStore::new(Arc::new(clock.clone()));
        for i in 0..100 {
            store.check_now(&check(&format!("k{i}"), Algorithm::Gcra));
        }
        store.check_now(&check("late", Algorithm::SlidingLog));
        assert_eq!(store.len(), 101);
        clock.advance_us(600_000);
        assert_eq!(store.sweep(), 100, "gcra keys reset after 500 ms");
        clock.advance_us(1_000_000);
        assert_eq!(store.sweep(), 1);
        assert!(store.is_empty());
    }

    #[test]
    fn cost_zero_on_an_unseen_key_stores_nothing() {
        let store = MemoryStore::new(Arc::new(ManualClock::new(5)));
        let mut probe = check("k", Algorithm::TokenBucket);
        probe.cost = 0;
        assert!(store.check_now(&probe).allowed);
        assert!(store.is_empty());
    }
}
