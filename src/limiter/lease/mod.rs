//! Hot-key leasing: an instance that sees a key of a leasing policy hot
//! reserves a chunk of its capacity with one check of the chunk's size,
//! and answers that key's later checks from the chunk, without the store.
//! What is left of a chunk is given back exactly (`OpKind::GiveBack`) at
//! its TTL, when the key cools, and at shutdown.
//!
//! Why it never admits more than the limit: a chunk is spent in the store
//! before any of it is handed out, so every other instance's checks see it
//! spent; it is handed out only until the window it was counted in ends
//! (by the store's clock, seen conservatively from here); and a give-back
//! undoes only what the reservation counted, in its own window.
//!
//! What it costs: at most `max_units` units per key per instance held
//! unused, for at most `ttl` (plus a sweep interval), and a key near its
//! limit does not lease at all (`LeaseMode::chunk`).
//!
//! A reset or refund anywhere reaches the chunks through the invalidation
//! channel: they are dropped without a give-back (the reset may have wiped
//! the reservation, and giving it back would then free units others
//! spent). While the channel is down nothing new is reserved, but chunks
//! already held are still spent until their TTL: the channel goes down
//! with Redis, and spending a held chunk through an outage is the point of
//! holding it. When the channel is back, or reports messages lost, every
//! chunk is dropped: a reset may have been missed.
//!
//! The table holds at most `limits.max_lease_keys` (policy, key) slots;
//! a key that finds it full is checked in the store as usual (counted).

mod slot;

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use self::slot::{Chunk, Slot};
pub use self::slot::{Generation, Take};
use crate::domain::lease_mode::{counted_until_all_us, usable_until_all_us};
use crate::domain::{Check, LeaseMode, Outcome};
use crate::metrics::Metrics;

const SHARDS: usize = 16;

/// Slots idle this long without a chunk are removed by the sweep.
const IDLE: Duration = Duration::from_secs(2);

/// `limits.max_lease_keys` by default.
pub const DEFAULT_MAX_KEYS: usize = 10_000;

/// Slots looked at for one to evict when the table is full.
const EVICTION_CANDIDATES: usize = 8;

/// How often chunks due back are looked for.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(50);

/// Client key to its slots, one per leasing policy that checked it.
type Shard = Mutex<HashMap<String, Vec<Slot>>>;

pub struct Leases {
    shards: Box<[Shard]>,
    hasher: RandomState,
    slots: AtomicUsize,
    max_slots: usize,
    /// Off until the invalidation channel is confirmed, and whenever it
    /// may be missing messages.
    subscribed: AtomicBool,
    metrics: Arc<Metrics>,
}

/// A chunk to give back: the check that names its limits and units, and
/// the store time of its reservation.
pub struct GiveBack {
    pub check: Check,
    pub at_us: u64,
}

impl Leases {
    pub fn new(max_slots: usize, metrics: Arc<Metrics>) -> Leases {
        Leases {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            slots: AtomicUsize::new(0),
            max_slots,
            subscribed: AtomicBool::new(false),
            metrics,
        }
    }

    fn shard(&self, key: &str) -> &Shard {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// With `f` on the check's slot (made if there is room).
    fn with_slot<T>(
        &self,
        check: &Check,
        now: Instant,
        f: impl FnOnce(&mut Slot) -> T,
    ) -> Option<T> {
        let policy = check.policy.as_ref()?;
        let mut shard = self
            .shard(&check.key)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(slots) = shard.get_mut(check.key.as_str())
            && let Some(slot) = slots.iter_mut().find(|s| *s.policy == **policy)
        {
            return Some(f(slot));
        }
        if self.slots.load(Ordering::Relaxed) >= self.max_slots {
            // Make room from a key that holds nothing and is not being
            // measured hot, looking at a few only: a flood of new keys
            // must not cost a scan each, nor keep a hot key out for good.
            let idle = shard
                .iter()
                .take(EVICTION_CANDIDATES)
                .find(|(_, slots)| slots.iter().all(|s| s.evictable(now)))
                .map(|(key, _)| key.clone());
            let Some(idle) = idle else {
                self.metrics.leases.table_full.inc();
                return None;
            };
            let removed = shard.remove(&idle).map_or(0, |slots| slots.len());
            self.slots.fetch_sub(removed, Ordering::Relaxed);
            self.metrics.leases.keys.sub(removed as i64);
        }
        self.slots.fetch_add(1, Ordering::Relaxed);
        self.metrics.leases.keys.inc();
        let mut slot = Slot::new(policy.clone(), now);
        let answer = f(&mut slot);
        shard.entry(check.key.clone()).or_default().push(slot);
        Some(answer)
    }

    /// A check of a leasing policy (see [`Take`]), with the generation a
    /// refill it starts must hand back. Checks that do not lease (no lease
    /// mode, a look, the table full) are `Direct`; while the channel is
    /// down, held chunks answer but no new one is reserved.
    pub fn take(&self, check: &Check, now: Instant) -> (Take, Generation) {
        let Some(mode) = check.lease.as_ref() else {
            return (Take::Direct, 0);
        };
        if check.cost == 0 {
            return (Take::Direct, 0);
        }
        let mode = LeaseMode {
            // No new chunk while a reset could go unheard.
            max_units: if self.subscribed.load(Ordering::Relaxed) {
                mode.max_units
            } else {
                0
            },
            ..*mode
        };
        self.with_slot(check, now, |slot| {
            (
                slot.take(&mode, &check.limits, check.cost, now),
                slot.generation,
            )
        })
        .unwrap_or((Take::Direct, 0))
    }

    /// The store's answer to a check of a leasing key sent to it as usual.
    pub fn observed(&self, check: &Check, outcomes: &[Outcome]) {
        if check.lease.is_none() {
            return;
        }
        let Some(policy) = check.policy.as_ref() else {
            return;
        };
        let mut shard = self
            .shard(&check.key)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = shard
            .get_mut(check.key.as_str())
            .and_then(|slots| slots.iter_mut().find(|s| *s.policy == **policy))
        {
            slot.observed(outcomes);
        }
    }

    /// A refill's end. `granted`: the reservation of `units` for `check`
    /// was allowed, answered with `outcomes` at store time `at_us`, sent
    /// at `sent`. Returns a chunk that cannot be kept (see
    /// `Slot::refilled`); its units are counted as dropped.
    pub fn refilled(&self, check: &Check, generation: Generation, granted: Option<Reserved>) {
        let Some(mode) = check.lease else { return };
        let chunk = granted.map(|r| {
            let until_end = usable_until_all_us(&check.limits, r.at_us).saturating_sub(r.at_us);
            Chunk {
                limits: check.limits.clone(),
                left: r.units,
                at_us: r.at_us,
                give_back_at: r.sent + Duration::from_micros(mode.ttl_us),
                usable_until: slot::usable_until(r.sent, until_end),
                counted_until: r.sent
                    + Duration::from_micros(
                        counted_until_all_us(&check.limits, r.at_us).saturating_sub(r.at_us),
                    ),
                outcomes: r.outcomes,
                answered_at: Instant::now(),
            }
        });
        let dropped = self
            .with_slot(check, Instant::now(), |slot| {
                slot.refilled(generation, chunk)
            })
            .flatten();
        if let Some(chunk) = dropped {
            self.metrics.leases.dropped.inc_by(chunk.left);
        }
    }

    /// A refill whose caller went before its answer (see `leasing.rs`).
    pub fn refill_abandoned(&self, check: &Check, generation: Generation) {
        self.metrics.leases.failed.inc();
        self.refilled(check, generation, None);
    }

    /// Drops every chunk of the client `key` (a reset or refund of it, any
    /// policy), without giving them back.
    pub fn invalidate(&self, key: &str) {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slots) = shard.get_mut(key) {
            let dropped: u64 = slots.iter_mut().map(Slot::drop_chunks).sum();
            self.metrics.leases.dropped.inc_by(dropped);
        }
    }

    /// The invalidation channel is down (`false`: held chunks are still
    /// spent, no new one is reserved) or up again (`true`: every chunk is
    /// dropped, since a reset may have gone unheard meanwhile).
    pub fn subscribed(&self, up: bool) {
        self.subscribed.store(up, Ordering::Relaxed);
        if up {
            self.drop_all();
        }
    }

    /// Drops every chunk, without giving any back (messages were lost).
    pub fn drop_all(&self) {
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            let dropped: u64 = shard
                .values_mut()
                .flat_map(|slots| slots.iter_mut())
                .map(Slot::drop_chunks)
                .sum();
            self.metrics.leases.dropped.inc_by(dropped);
        }
    }

    /// Chunks due back at `now` (see `Slot::due`), or all of them when
    /// `all` (shutdown); removes idle slots. `mode_of` finds a policy's
    /// lease mode as it is now (`None`: gone or no longer leasing: its
    /// chunks go back).
    pub fn sweep(
        &self,
        now: Instant,
        all: bool,
        mode_of: impl Fn(&str) -> Option<LeaseMode>,
    ) -> Vec<GiveBack> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            shard.retain(|key, slots| {
                slots.retain_mut(|slot| {
                    let mode = if all { None } else { mode_of(&slot.policy) };
                    let (due, lapsed) = slot.due(mode.as_ref(), now);
                    self.metrics.leases.lapsed.inc_by(lapsed);
                    for chunk in due {
                        out.push(give_back(key, &slot.policy, chunk));
                    }
                    let keep = !slot.idle(now, IDLE);
                    if !keep {
                        self.slots.fetch_sub(1, Ordering::Relaxed);
                        self.metrics.leases.keys.dec();
                    }
                    keep
                });
                !slots.is_empty()
            });
        }
        out
    }
}

/// A granted reservation.
pub struct Reserved {
    pub units: u64,
    pub at_us: u64,
    pub sent: Instant,
    pub outcomes: Vec<Outcome>,
}

fn give_back(key: &str, policy: &Arc<str>, chunk: Chunk) -> GiveBack {
    let check = Check {
        key: key.to_owned(),
        limits: chunk.limits,
        cost: chunk.left,
        policy: Some(policy.clone()),
        shadow: false,
        failure_mode: None,
        lease: None,
    };
    GiveBack {
        check,
        at_us: chunk.at_us,
    }
}

#[cfg(test)]
mod tests;
