//! One shard of the embedded store: its map, the leases its keys hold,
//! and making room when it is full.

use std::sync::atomic::Ordering;

use super::{EPISODE_GAP_US, EVICT_FRACTION, Entry, Inner, Map, OwnedStateKey, SHARDS, lock};
use crate::domain::algorithms::State;
use crate::domain::state_key::StateKey;
use crate::domain::{Check, Outcome};

pub(super) struct ShardData {
    pub(super) map: Map,
    /// The concurrency leases its states hold (expired ones not yet
    /// trimmed included): each counts against the cap like a key, since a
    /// key of one concurrency limit can hold `limits.max_concurrency` of
    /// them, about as large each as a key's state.
    pub(super) leases: usize,
    /// The reservations of this shard's client keys, by nonce
    /// (`reservations.rs`), bounded like `map`.
    pub(super) reservations: super::reservations::Table,
}

/// How many leases `state` holds: its weight beyond its key's own.
pub(super) fn leases_of(state: &State) -> usize {
    match state {
        State::Concurrency(s) => s.leases.len(),
        _ => 0,
    }
}

impl ShardData {
    /// Stores the `states` a check of `check` decided back, each with its
    /// limit's `outcome`: its expiry set if the check `writes` (was allowed
    /// and spent), else only lengthened; a key not held is added only if
    /// it writes (otherwise Redis would not have written either).
    pub(super) fn store_back(
        &mut self,
        check: &Check,
        states: Vec<State>,
        outcomes: &[Outcome],
        now: u64,
        writes: bool,
    ) {
        for ((limit, state), outcome) in check.limits.iter().zip(states).zip(outcomes) {
            let lookup = StateKey::of(check, limit);
            if let Some(entry) = self.map.get_mut(&lookup) {
                // Saturating: a count off by a write the sweep has not yet
                // recounted must not wrap.
                self.leases =
                    (self.leases + leases_of(&state)).saturating_sub(leases_of(&entry.state));
                entry.state = state;
                let until = now.saturating_add(outcome.reset_after_us);
                if writes {
                    entry.expires_at_us = until;
                } else if entry.expires_at_us > now {
                    // A rule that refills slower than the one that wrote the
                    // state (a lowered limit) needs it longer: lengthen, as
                    // the scripts do (PEXPIRE GT), never shorten.
                    entry.expires_at_us = entry.expires_at_us.max(until);
                }
            } else if writes {
                self.leases += leases_of(&state);
                self.map.insert(
                    OwnedStateKey::of(check, limit),
                    Entry {
                        state,
                        expires_at_us: now.saturating_add(outcome.reset_after_us),
                    },
                );
            }
        }
    }

    /// Keys plus leases: what the cap bounds.
    pub(super) fn weight(&self) -> usize {
        self.map.len() + self.leases
    }

    /// Removes `key`'s state, and its leases from the count.
    pub(super) fn remove(&mut self, key: &StateKey<'_>) {
        if let Some(entry) = self.map.remove(key) {
            self.leases = self.leases.saturating_sub(leases_of(&entry.state));
        }
    }

    /// Keeps only the entries `keep` accepts; returns how many went.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> usize {
        let (before, mut gone_leases) = (self.map.len(), 0);
        self.map.retain(|_, e| {
            let kept = keep(e);
            if !kept {
                gone_leases += leases_of(&e.state);
            }
            kept
        });
        self.leases = self.leases.saturating_sub(gone_leases);
        before - self.map.len()
    }
}

impl Inner {
    /// Frees room in a full shard: expired state first, then, if that is
    /// not enough, the `1 / EVICT_FRACTION` of the shard nearest its reset,
    /// each key weighing one plus its leases.
    pub(super) fn make_room(&self, shard: &mut ShardData, now: u64) {
        // Free down to this weight every time, even when expired state
        // alone would make room for one: otherwise a flood of new keys while
        // old ones trickle out of date would rescan the shard on every insert.
        let target = self.shard_capacity - (self.shard_capacity / EVICT_FRACTION).max(1);
        shard.retain(|e| e.expires_at_us > now);
        if shard.weight() <= target {
            return;
        }
        let mut excess = shard.weight() - target;
        let mut by_expiry: Vec<(u64, usize)> = shard
            .map
            .values()
            .map(|e| (e.expires_at_us, 1 + leases_of(&e.state)))
            .collect();
        by_expiry.sort_unstable();
        let mut cutoff = 0;
        for (expiry, weight) in by_expiry {
            cutoff = expiry;
            excess = excess.saturating_sub(weight);
            if excess == 0 {
                break;
            }
        }
        // Ties at the cutoff may evict a little more than needed; never less.
        let evicted = shard.retain(|e| e.expires_at_us > cutoff) as u64;
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
        let last = self.last_eviction_us.swap(now.max(1), Ordering::Relaxed);
        if last == 0 || now.saturating_sub(last) > EPISODE_GAP_US {
            tracing::warn!(
                max_keys = self.shard_capacity * SHARDS,
                "embedded store full: evicting the keys nearest their reset \
                 (raise memory.max_keys to keep more; a concurrency lease counts as a key); \
                 logged once per episode"
            );
        }
    }

    pub(super) fn sweep(&self) -> usize {
        let now = self.clock.now_us();
        let mut removed = 0;
        for shard in &self.shards {
            let mut shard = lock(shard);
            removed += shard.retain(|e| e.expires_at_us > now);
            // Recounted exactly, once a sweep: what every write added and
            // took away in between.
            shard.leases = shard.map.values().map(|e| leases_of(&e.state)).sum();
            shard.reservations.sweep(now);
        }
        removed
    }
}
