//! The embedded store: the domain functions over sharded in-process maps.
//!
//! A `std::sync::Mutex` per shard rather than tokio's: a check holds the lock
//! for a few hundred nanoseconds and never across an `.await`, which is the
//! case tokio's own docs recommend the std mutex for. Sharding keeps
//! unrelated keys from contending.
//!
//! State expires when its algorithm says the key is back to "never seen"
//! (`reset_after`), exactly like the TTLs the Lua scripts set, and a
//! background sweep reclaims it so memory follows the active keys. A cap on
//! the number of keys bounds memory under a flood of distinct keys: a new
//! key that finds its shard full (after reclaiming what has expired there)
//! is refused with [`StoreError::Full`], so the failure policy answers it,
//! while keys already held keep their exact counts.

use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use hashbrown::{Equivalent, HashMap};

use super::{Store, StoreError};
use crate::domain::algorithms::State;
use crate::domain::{Algorithm, Check, Clock, Outcome};

const SHARDS: usize = 64;

#[derive(Debug, PartialEq, Eq, Hash)]
struct StateKey {
    algorithm: Algorithm,
    window_us: u64,
    key: Box<str>,
}

/// A borrowed [`StateKey`], so a check on a known key allocates nothing.
/// Same fields in the same order, so it hashes the same (`str` and
/// `Box<str>` hash alike).
#[derive(Hash)]
struct StateKeyRef<'a> {
    algorithm: Algorithm,
    window_us: u64,
    key: &'a str,
}

impl Equivalent<StateKey> for StateKeyRef<'_> {
    fn equivalent(&self, k: &StateKey) -> bool {
        self.algorithm == k.algorithm && self.window_us == k.window_us && self.key == &*k.key
    }
}

struct Entry {
    state: State,
    expires_at_us: u64,
}

// Keyed SipHash (std's RandomState): client keys are attacker-controlled,
// so neither shard choice nor bucket placement may be predictable.
type Map = HashMap<StateKey, Entry, RandomState>;

struct ShardData {
    map: Map,
    /// When a full shard last scanned itself for expired state. A flood of
    /// new keys into a full shard would otherwise rescan it on every check.
    last_reclaim_us: u64,
}

type Shard = Mutex<ShardData>;

/// How often a full shard may scan for expired state to make room.
const RECLAIM_INTERVAL_US: u64 = 100_000;

struct Inner {
    shards: Vec<Shard>,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    /// Keys one shard may hold: the configured maximum over the shard count.
    shard_capacity: usize,
}

/// The in-process store. Cheap to clone.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl MemoryStore {
    /// A store holding at most about `max_keys` keys.
    pub fn new(clock: Arc<dyn Clock>, max_keys: usize) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                shards: (0..SHARDS)
                    .map(|_| {
                        Mutex::new(ShardData {
                            map: HashMap::with_hasher(RandomState::new()),
                            last_reclaim_us: 0,
                        })
                    })
                    .collect(),
                hasher: RandomState::new(),
                clock,
                shard_capacity: max_keys.div_ceil(SHARDS).max(1),
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
        self.inner.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs a check synchronously (the async trait method wraps this).
    pub fn check_now(&self, check: &Check) -> Result<Outcome, StoreError> {
        let inner = &self.inner;
        let rule = &check.rule;
        let lookup = StateKeyRef {
            algorithm: rule.algorithm,
            window_us: rule.window_us,
            key: &check.key,
        };
        let shard = &inner.shards[inner.hasher.hash_one(&lookup) as usize % SHARDS];
        let now = inner.clock.now_us();

        let mut shard = lock(shard);
        // Like Redis: state and its expiry change only when a check is
        // allowed and spends. Reads never shorten or drop state, which
        // matters when several rules share a key.
        let writes = |outcome: &Outcome| outcome.allowed && check.cost > 0;
        if let Some(entry) = shard.map.get_mut(&lookup) {
            if entry.expires_at_us <= now {
                // Expired state is "never seen", as after a Redis TTL.
                entry.state = State::fresh(rule.algorithm);
            }
            let outcome = entry.state.apply(rule, now, check.cost);
            if writes(&outcome) {
                entry.expires_at_us = now.saturating_add(outcome.reset_after_us);
            }
            return Ok(outcome);
        }

        let mut state = State::fresh(rule.algorithm);
        let outcome = state.apply(rule, now, check.cost);
        if !writes(&outcome) {
            // Nothing to remember: the store would not have written either.
            return Ok(outcome);
        }
        if shard.map.len() >= inner.shard_capacity {
            if now.saturating_sub(shard.last_reclaim_us) >= RECLAIM_INTERVAL_US {
                shard.last_reclaim_us = now;
                shard.map.retain(|_, e| e.expires_at_us > now);
            }
            if shard.map.len() >= inner.shard_capacity {
                // Answering without keeping the state would let this key
                // spend without limit; let the failure policy answer instead.
                return Err(StoreError::Full(format!(
                    "embedded store holds its maximum of about {} keys",
                    inner.shard_capacity * SHARDS
                )));
            }
        }
        shard.map.insert(
            StateKey {
                algorithm: rule.algorithm,
                window_us: rule.window_us,
                key: check.key.as_str().into(),
            },
            Entry {
                state,
                expires_at_us: now.saturating_add(outcome.reset_after_us),
            },
        );
        Ok(outcome)
    }
}

impl Inner {
    fn sweep(&self) -> usize {
        let now = self.clock.now_us();
        let mut removed = 0;
        for shard in &self.shards {
            let map = &mut lock(shard).map;
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
fn lock(shard: &Shard) -> MutexGuard<'_, ShardData> {
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Store for MemoryStore {
    async fn check(&self, check: &Check) -> Result<Outcome, StoreError> {
        self.check_now(check)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn key_count(&self) -> Option<usize> {
        Some(self.len())
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
        let store = MemoryStore::new(Arc::new(ManualClock::new(0)), 1_000);
        let a = check("k", Algorithm::FixedWindow);
        assert!(store.check_now(&a).unwrap().allowed);
        assert!(store.check_now(&a).unwrap().allowed);
        assert!(!store.check_now(&a).unwrap().allowed);
        assert!(
            store
                .check_now(&check("k", Algorithm::SlidingLog))
                .unwrap()
                .allowed
        );
        let mut other_window = a.clone();
        other_window.rule.window_us = 2_000_000;
        assert!(store.check_now(&other_window).unwrap().allowed);
    }

    #[test]
    fn sweep_reclaims_expired_keys_only() {
        let clock = ManualClock::new(10_000_000);
        let store = MemoryStore::new(Arc::new(clock.clone()), 1_000);
        for i in 0..100 {
            store
                .check_now(&check(&format!("k{i}"), Algorithm::Gcra))
                .unwrap();
        }
        store
            .check_now(&check("late", Algorithm::SlidingLog))
            .unwrap();
        assert_eq!(store.len(), 101);
        clock.advance_us(600_000);
        assert_eq!(store.sweep(), 100, "gcra keys reset after 500 ms");
        clock.advance_us(1_000_000);
        assert_eq!(store.sweep(), 1);
        assert!(store.is_empty());
    }

    #[test]
    fn cost_zero_on_an_unseen_key_stores_nothing() {
        let store = MemoryStore::new(Arc::new(ManualClock::new(5)), 1_000);
        let mut probe = check("k", Algorithm::TokenBucket);
        probe.cost = 0;
        assert!(store.check_now(&probe).unwrap().allowed);
        assert!(store.is_empty());
    }

    #[test]
    fn a_full_store_refuses_new_keys_but_serves_known_ones() {
        let clock = ManualClock::new(0);
        let store = MemoryStore::new(Arc::new(clock.clone()), SHARDS);
        let mut refused = 0;
        for i in 0..10 * SHARDS {
            match store.check_now(&check(&format!("k{i}"), Algorithm::FixedWindow)) {
                Ok(_) => {}
                Err(StoreError::Full(_)) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            refused > 0 && store.len() <= SHARDS,
            "{refused} refused, {} held",
            store.len()
        );
        // Keys already held keep their exact counts.
        let held = (0..10 * SHARDS)
            .map(|i| check(&format!("k{i}"), Algorithm::FixedWindow))
            .find(|c| store.check_now(c).is_ok())
            .unwrap();
        assert!(
            !store.check_now(&held).unwrap().allowed,
            "limit 2: third check denied"
        );
        // Once state expires, room is made again.
        clock.advance_us(1_000_000);
        assert!(
            store
                .check_now(&check("new", Algorithm::FixedWindow))
                .is_ok()
        );
    }
}
