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
//!
//! A cap on the number of keys bounds memory under a flood of distinct
//! keys. A new key that finds its shard full makes room the way Redis's
//! `volatile-ttl` policy does: first by dropping state that is already back
//! to full capacity (dropping it changes no decision), then by evicting the
//! keys nearest to their reset (the ones whose loss admits the least). A new
//! client is therefore always limited; refusing it instead would hand it to
//! the failure policy, which under fail-open means no limit at all.

use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use hashbrown::{Equivalent, HashMap};

use super::{Applied, Op, OpKind, Store, StoreError, StoreStats};
use crate::domain::algorithms::{State, apply_all_leased};
use crate::domain::state_key::StateKey;
use crate::domain::{Algorithm, Check, Clock, Limit, Outcome, Reservation, Rule, Window};

const SHARDS: usize = 64;

/// Where one limit's state lives, owned: the same layout as the Redis
/// keys (`domain::state_key`), looked up by a borrowed [`StateKey`] so a
/// check on a known key allocates nothing.
#[derive(Debug, PartialEq, Eq, Hash)]
struct OwnedStateKey {
    client: Box<str>,
    named: Option<(Arc<str>, Arc<str>)>,
    scope: Option<Arc<str>>,
    algorithm: Algorithm,
    window: Window,
    rule: Option<(u64, u64)>,
}

impl OwnedStateKey {
    /// Same fields in the same order as [`StateKey`], so both hash alike
    /// (`str`, `Box<str>` and `Arc<str>` hash alike).
    fn of(check: &Check, limit: &Limit) -> OwnedStateKey {
        let (client, policy) = match &limit.level {
            Some(level) => (&*level.key, level.policy.as_ref()),
            None => (check.key.as_str(), check.policy.as_ref()),
        };
        OwnedStateKey {
            client: client.into(),
            named: policy.map(|p| (p.clone(), limit.name.clone())),
            scope: limit.scope.clone(),
            algorithm: limit.rule.algorithm,
            window: StateKey::window_of(limit),
            rule: StateKey::rule_of(check, limit),
        }
    }
}

impl Equivalent<OwnedStateKey> for StateKey<'_> {
    fn equivalent(&self, k: &OwnedStateKey) -> bool {
        self.algorithm == k.algorithm
            && self.window == k.window
            && self.rule == k.rule
            && self.client == &*k.client
            && self.scope == k.scope.as_deref()
            && match (&self.named, &k.named) {
                (None, None) => true,
                (Some((p, l)), Some((kp, kl))) => *p == &**kp && *l == &**kl,
                _ => false,
            }
    }
}

struct Entry {
    state: State,
    expires_at_us: u64,
}

// Keyed SipHash (std's RandomState): client keys are attacker-controlled,
// so neither shard choice nor bucket placement may be predictable.
type Map = HashMap<OwnedStateKey, Entry, RandomState>;

type Shard = Mutex<ShardData>;

/// A full shard evicts this fraction of its capacity at once, so the scan
/// that finds the keys nearest to their reset is paid once per many new
/// keys (amortized: 16 entries looked at per insert), not on every one.
const EVICT_FRACTION: usize = 16;

/// Evictions further apart than this are separate episodes, each logged once.
const EPISODE_GAP_US: u64 = 60_000_000;

struct Inner {
    shards: Vec<Shard>,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    /// Keys one shard may hold: the configured maximum over the shard count.
    shard_capacity: usize,
    /// Keys evicted before their reset, for `ratekeeper_store_evictions_total`.
    evictions: AtomicU64,
    /// When the last eviction happened (clock µs, 0: never), to log each
    /// episode of a full store once rather than once per new key.
    last_eviction_us: AtomicU64,
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
                            leases: 0,
                            reservations: reservations::Table::default(),
                        })
                    })
                    .collect(),
                hasher: RandomState::new(),
                clock,
                shard_capacity: max_keys.div_ceil(SHARDS).max(1),
                evictions: AtomicU64::new(0),
                last_eviction_us: AtomicU64::new(0),
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

    /// How many concurrency leases the keys hold, expired ones not yet
    /// trimmed included: with [`len`](Self::len), what `memory.max_keys`
    /// bounds.
    pub fn lease_count(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).leases).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies one operation synchronously (the async trait methods wrap
    /// this), under its client key's shard lock.
    pub fn apply_now(&self, op: &Op<'_>) -> Result<Applied, StoreError> {
        let levels = op.check.has_levels();
        match op.kind {
            OpKind::Check if levels => {
                let (now, outcomes) = self.check_levels(op.check, op.reservation);
                Ok(Applied::unshared(outcomes).at(now))
            }
            OpKind::Check => {
                let (now, outcomes) = self.acquire_at(op.check, op.lease_str(), op.reservation);
                Ok(Applied::unshared(outcomes).at(now))
            }
            OpKind::Draw { seq, cost, mode } if levels => match op.reservation {
                Some(reservation) => Ok(self.draw_levels(op.check, reservation, (cost, seq, mode))),
                None => Err(StoreError::Backend("a draw names its reservation".into())),
            },
            // One level's part is one client key's, one shard's.
            _ if levels && op.check.level_ranges().len() > 1 => self.adjust_levels(op),
            _ => self.adjust_now(op),
        }
    }

    /// Runs a check synchronously, as [`apply_now`](Self::apply_now)
    /// runs an [`Op::check`] (tests and callers holding the embedded store
    /// itself): all its limits under one lock, all or nothing (see
    /// [`apply_all`](crate::domain::algorithms::apply_all)). One outcome per limit, in order.
    pub fn check_now(&self, check: &Check) -> Result<Vec<Outcome>, StoreError> {
        self.acquire_now(check, "")
    }

    /// [`MemoryStore::check_now`] acquiring `lease` on the check's
    /// concurrency limit, if it has one.
    pub fn acquire_now(&self, check: &Check, lease: &str) -> Result<Vec<Outcome>, StoreError> {
        Ok(self.acquire_at(check, lease, None).1)
    }

    /// [`MemoryStore::acquire_now`], recording `reservation` if every
    /// limit allowed, and the store time it ran at.
    fn acquire_at(
        &self,
        check: &Check,
        lease: &str,
        reservation: Option<&Reservation>,
    ) -> (u64, Vec<Outcome>) {
        let now = self.inner.clock.now_us();
        let mut shard = self.inner.shard_of(check);
        let outcomes = self
            .inner
            .check_in(&mut shard, check, check.cost, now, lease);
        if let Some(reservation) = reservation
            && outcomes.iter().all(|o| o.allowed)
        {
            let capacity = self.inner.shard_capacity;
            shard.reservations.record(reservation, now, capacity);
        }
        (now, outcomes)
    }

    /// Reservations held, expired or not (`ratekeeper_store_reservations`).
    pub fn reservation_count(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| lock(s).reservations.len())
            .sum()
    }
}

impl Inner {
    /// The locked shard of `check`'s client key. Every limit of a check
    /// lives there, so one lock covers the whole check.
    fn shard_of(&self, check: &Check) -> MutexGuard<'_, ShardData> {
        lock(&self.shards[self.hasher.hash_one(check.key.as_str()) as usize % SHARDS])
    }

    /// Runs `check` at `cost` on its locked shard.
    fn check_in(
        &self,
        shard: &mut ShardData,
        check: &Check,
        cost: u64,
        now: u64,
        lease: &str,
    ) -> Vec<Outcome> {
        // Decide on copies of the limits' states (expired state is "never
        // seen", as after a Redis TTL), then store them back. Copies, not
        // states taken out of the map: a panic mid-decision leaves the map
        // as it was, rather than a client's counters reset.
        // `new`: the limits with no entry at all, counted here rather than
        // looked up again when making room (one hash per limit fewer).
        let mut new = 0;
        let mut states: Vec<State> = check
            .limits
            .iter()
            .map(|limit| match shard.map.get(&StateKey::of(check, limit)) {
                Some(entry) if entry.expires_at_us > now => entry.state.clone(),
                found => {
                    new += usize::from(found.is_none());
                    State::fresh(limit.rule.algorithm)
                }
            })
            .collect();
        let leases_before: usize = states.iter().map(leases_of).sum();
        let rules: Vec<&Rule> = check.limits.iter().map(|l| &l.rule).collect();
        let outcomes = apply_all_leased(&mut states, &rules, now, cost, lease);
        // Like Redis: state and its expiry change only when the check is
        // allowed and spends. Reads never shorten or drop state, which
        // matters when several rules share a key.
        let writes = cost > 0 && outcomes.iter().all(|o| o.allowed);
        if writes {
            self.room_for(shard, new, &states, leases_before, now);
        }
        shard.store_back(check, states, &outcomes, now, writes);
        outcomes
    }

    /// Makes room, if the shard is full, for what writing `states` back
    /// adds: room first, so that making room cannot evict a limit of this
    /// very check after its state was written back.
    fn room_for(
        &self,
        shard: &mut ShardData,
        new: usize,
        states: &[State],
        leases_before: usize,
        now: u64,
    ) {
        // An acquire grows its key by a lease: room for that too.
        let leases_after: usize = states.iter().map(leases_of).sum();
        let grows = new + leases_after.saturating_sub(leases_before);
        if grows > 0 && shard.weight() + grows > self.shard_capacity {
            self.make_room(shard, now);
        }
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
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        ops.iter().map(|op| self.apply_now(op)).collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            key_count: Some(self.len()),
            lease_count: Some(MemoryStore::lease_count(self)),
            evictions: Some(self.inner.evictions.load(Ordering::Relaxed)),
            reservation_count: Some(MemoryStore::reservation_count(self)),
            ..StoreStats::default()
        }
    }
}

mod adjust;
mod levels;
mod shard;
use shard::{ShardData, leases_of};
mod reservations;
#[cfg(test)]
mod tests;
