//! Who is being limited right now: per policy (and one set for inline
//! checks), the client keys with the most checked units and the most denied
//! units over the last minute and the last ten minutes, in fixed memory.
//!
//! Client keys are unbounded and chosen by clients, so they can never be
//! metric labels; a heavy-hitters sketch answers the question instead, with
//! a stated error per key (`space_saving`), over time slices
//! (`window`). Each instance keeps its own: see `docs/observability.md`
//! for merging instances.
//!
//! The hot path takes one uncontended mutex: a set is split into
//! `SHARDS` shards by key hash, each with its own lock, so parallel
//! checks of one policy rarely meet. Keys are partitioned, not copied, so a
//! view is the union of the shards' views and their bounds do not add.

mod space_saving;
mod window;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use hashbrown::HashMap;

pub use self::window::Period;
use self::window::{SLICE_US, Windowed, merge};
use crate::domain::{Check, Clock, Decision};

/// Locks per set. A power of two well above the cores: parallel checks of
/// one policy then take different locks nearly always.
const SHARDS: usize = 8;

/// Longer keys are kept as their first [`KEPT_KEY_BYTES`] bytes and a hash
/// of the whole, so that one entry's memory is bounded whatever
/// `limits.max_key_bytes` allows, while distinct keys stay distinct.
const KEPT_KEY_BYTES: usize = 200;

/// The set of checks that carry their limits (no policy).
pub const INLINE: &str = "inline";

/// One key's bounds over a view: its true units lie in
/// `[count - error, count]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hitter {
    pub key: String,
    pub count: u64,
    pub error: u64,
}

/// The heaviest keys of one view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopKeys {
    /// Heaviest first (by `count`, then key).
    pub keys: Vec<Hitter>,
    /// The most units any key not listed can have had.
    pub unlisted_max: u64,
    /// Every unit of the view, listed or not: exact.
    pub total: u64,
    /// How far back the view reaches, in milliseconds.
    pub window_ms: u64,
}

/// What is counted: every unit checked, or only the denied ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Checked,
    Denied,
}

struct Shard {
    checked: Windowed,
    denied: Windowed,
}

struct Set {
    shards: [Mutex<Shard>; SHARDS],
}

/// Every set's sketches.
pub struct Top {
    /// Counters per slice of one shard: the configured capacity over the
    /// shards, rounded up.
    per_shard: usize,
    clock: Arc<dyn Clock>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Read on every check without a lock; replaced whole when a set is
    /// added (rare: once per policy name).
    sets: ArcSwap<HashMap<Arc<str>, Arc<Set>>>,
    adding: Mutex<()>,
    max_sets: usize,
    /// The slice of the last [`prune_idle`](Self::prune_idle).
    pruned: AtomicU64,
}

impl Top {
    /// Sketches of `capacity` keys per slice and stream (`top.capacity`)
    /// for at most `max_sets` sets, timed by `clock` (monotonic).
    pub fn new(capacity: usize, max_sets: usize, clock: Arc<dyn Clock>) -> Top {
        Top {
            per_shard: capacity.div_ceil(SHARDS).max(1),
            clock,
            hasher: hashbrown::DefaultHashBuilder::default(),
            sets: ArcSwap::from_pointee(HashMap::new()),
            adding: Mutex::new(()),
            max_sets,
            pruned: AtomicU64::new(u64::MAX),
        }
    }

    /// Counts one answered check: its cost as checked units of its key, and
    /// as denied units when a limit denied it (shadow denials included:
    /// they are who enforcing the policy would deny). A check of an RLS
    /// descriptor counts under the deciding limit's descriptor entries,
    /// its client key.
    pub fn observe(&self, check: &Check, decision: &Decision) {
        if check.cost == 0 {
            return;
        }
        let denied = decision.limits.iter().any(|l| !l.allowed);
        if check.has_levels() {
            // Each level's key under its own policy's ranking.
            for (level, _) in check.level_ranges() {
                let name = level.policy.as_deref().unwrap_or(INLINE);
                self.count(name, &level.key, check.cost, denied);
            }
            return;
        }
        let limit = &check.limits[decision.deciding()];
        let key = limit.scope.as_deref().unwrap_or(&check.key);
        let name = check.policy.as_deref().unwrap_or(INLINE);
        self.count(name, key, check.cost, denied);
    }

    /// Counts `cost` units checked on `key` in the ranking `name`, and
    /// denied if `denied`.
    fn count(&self, name: &str, key: &str, cost: u64, denied: bool) {
        // Borrowed from the map in force: no reference count to bump (a
        // shared cache line) on every check.
        let sets = self.sets.load();
        let added;
        let set = match sets.get(name) {
            Some(set) => set,
            None => match self.set(name) {
                Some(set) => {
                    added = set;
                    &added
                }
                None => return,
            },
        };
        let hash = self.hasher.hash_one(key);
        let kept = kept_key(key, hash);
        let slice = self.clock.now_us() / SLICE_US;
        let mut shard = lock(&set.shards[shard_of(hash)]);
        shard.checked.add(slice, &kept, hash, cost);
        if denied {
            shard.denied.add(slice, &kept, hash, cost);
        }
    }

    fn set(&self, name: &str) -> Option<Arc<Set>> {
        if let Some(set) = self.sets.load().get(name) {
            return Some(set.clone());
        }
        let _one_writer = lock(&self.adding);
        let sets = self.sets.load_full();
        if let Some(set) = sets.get(name) {
            return Some(set.clone());
        }
        let sets = if sets.len() >= self.max_sets {
            self.prune_idle(&sets)
        } else {
            sets
        };
        if sets.len() >= self.max_sets {
            return None;
        }
        let slice = self.clock.now_us() / SLICE_US;
        let set = Arc::new(Set {
            shards: std::array::from_fn(|_| {
                Mutex::new(Shard {
                    checked: Windowed::new(self.per_shard, slice),
                    denied: Windowed::new(self.per_shard, slice),
                })
            }),
        });
        let mut next = (*sets).clone();
        next.insert(name.into(), set.clone());
        self.sets.store(Arc::new(next));
        Some(set)
    }

    /// `sets` without those that counted nothing for ten minutes (a policy
    /// removed from the file, say): they hold nothing a view would show.
    /// At most once a slice, as it locks every shard; the caller holds
    /// `adding`.
    fn prune_idle(
        &self,
        sets: &Arc<HashMap<Arc<str>, Arc<Set>>>,
    ) -> Arc<HashMap<Arc<str>, Arc<Set>>> {
        let slice = self.clock.now_us() / SLICE_US;
        if self.pruned.swap(slice, Ordering::Relaxed) == slice {
            return sets.clone();
        }
        let next: HashMap<_, _> = sets
            .iter()
            .filter(|(_, set)| !set.is_idle(slice))
            .map(|(name, set)| (name.clone(), set.clone()))
            .collect();
        let next = Arc::new(next);
        self.sets.store(next.clone());
        next
    }

    /// The `limit` heaviest keys of `set` by `by` over `period`; `None` when
    /// no check of that set was seen.
    pub fn top(&self, set: &str, by: By, period: Period, limit: usize) -> Option<TopKeys> {
        let set = self.sets.load().get(set)?.clone();
        let now = self.clock.now_us() / SLICE_US;
        let mut keys = Vec::new();
        let (mut unlisted_max, mut total, mut since) = (0, 0, now);
        for shard in &set.shards {
            let mut shard = lock(shard);
            let stream = match by {
                By::Checked => &mut shard.checked,
                By::Denied => &mut shard.denied,
            };
            let (sources, first) = stream.view(period, now);
            let merged = merge(sources);
            unlisted_max = unlisted_max.max(merged.untracked_max);
            total += merged.total;
            since = since.min(first);
            keys.extend(merged.keys.into_iter().map(|(key, upper, lower)| Hitter {
                key: key.to_string(),
                count: upper,
                error: upper - lower,
            }));
        }
        keys.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        if let Some(cut) = keys.get(limit) {
            unlisted_max = unlisted_max.max(cut.count);
        }
        keys.truncate(limit);
        let elapsed_in_slice = self.clock.now_us() % SLICE_US;
        Some(TopKeys {
            keys,
            unlisted_max,
            total,
            window_ms: ((now - since) * SLICE_US + elapsed_in_slice) / 1_000,
        })
    }

    /// The set names with sketches, sorted.
    pub fn sets(&self) -> Vec<String> {
        let mut names: Vec<String> = self.sets.load().keys().map(|k| k.to_string()).collect();
        names.sort();
        names
    }

    /// Bytes the sketches hold now (see `space_saving::ENTRY_OVERHEAD`).
    pub fn bytes(&self) -> usize {
        let sets = self.sets.load();
        let shards = sets.values().flat_map(|set| &set.shards);
        shards
            .map(|shard| {
                let shard = lock(shard);
                shard.checked.bytes() + shard.denied.bytes()
            })
            .sum()
    }
}

impl Set {
    fn is_idle(&self, now: u64) -> bool {
        self.shards.iter().all(|shard| {
            let mut shard = lock(shard);
            shard.checked.roll(now);
            shard.denied.roll(now);
            shard.checked.is_idle() && shard.denied.is_idle()
        })
    }
}

/// The shard of a key: the hash's top bits (the table inside uses the low
/// ones).
fn shard_of(hash: u64) -> usize {
    (hash >> 61) as usize % SHARDS
}

/// `key`, or for a long one its first bytes and the hash of the whole.
fn kept_key(key: &str, hash: u64) -> std::borrow::Cow<'_, str> {
    if key.len() <= KEPT_KEY_BYTES {
        return key.into();
    }
    let mut end = KEPT_KEY_BYTES - 20;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…#{hash:016x}", &key[..end]).into()
}

/// A poisoned lock only means a panic elsewhere mid-update; a sketch is
/// approximate by design, so carry on with it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
