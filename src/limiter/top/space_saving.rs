//! Space-Saving (Metwally, Agrawal and El Abbadi, 2005), weighted: the
//! heaviest keys of a stream in a fixed number of counters.
//!
//! Each tracked key has a count and an error: its true total lies in
//! `[count - error, count]`. A key not tracked replaces the one with the
//! smallest count and inherits that count as its error, so the counts never
//! under-estimate, and any key with a true total above `total / capacity`
//! is tracked. Both operations are O(log capacity): a min-heap by count over
//! entries that never move, and a hash table from key to entry.

use hashbrown::HashTable;

/// What one tracked key costs beyond its bytes: the entry (key pointer and
/// length, hash, count, error), its heap and position slots, its table slot,
/// and the allocator's rounding of the key. An estimate for the memory
/// metric, on the high side.
pub(super) const ENTRY_OVERHEAD: usize = 96;

struct Entry {
    key: Box<str>,
    hash: u64,
    count: u64,
    error: u64,
}

pub(super) struct SpaceSaving {
    capacity: usize,
    entries: Vec<Entry>,
    /// Entry ids as a min-heap by count: the root is what a new key replaces.
    heap: Vec<u32>,
    /// Each entry's place in `heap`.
    at: Vec<u32>,
    /// Entry ids by their key's hash.
    index: HashTable<u32>,
    key_bytes: usize,
    /// Every unit added, tracked or not: exact.
    total: u64,
}

impl SpaceSaving {
    pub(super) fn new(capacity: usize) -> SpaceSaving {
        SpaceSaving {
            capacity: capacity.max(1),
            entries: Vec::new(),
            heap: Vec::new(),
            at: Vec::new(),
            index: HashTable::new(),
            key_bytes: 0,
            total: 0,
        }
    }

    /// Adds `units` to `key` (whose hash is `hash`).
    pub(super) fn add(&mut self, key: &str, hash: u64, units: u64) {
        self.total = self.total.saturating_add(units);
        let entries = &self.entries;
        if let Some(&id) = self
            .index
            .find(hash, |&id| &*entries[id as usize].key == key)
        {
            let entry = &mut self.entries[id as usize];
            entry.count = entry.count.saturating_add(units);
            self.sift_down(self.at[id as usize] as usize);
        } else if self.entries.len() < self.capacity {
            let id = self.entries.len() as u32;
            self.entries.push(Entry {
                key: key.into(),
                hash,
                count: units,
                error: 0,
            });
            self.key_bytes += key.len();
            self.heap.push(id);
            self.at.push(self.heap.len() as u32 - 1);
            let entries = &self.entries;
            self.index
                .insert_unique(hash, id, |&id| entries[id as usize].hash);
            self.sift_up(self.heap.len() - 1);
        } else {
            self.replace_smallest(key, hash, units);
        }
    }

    /// The smallest entry gives its place to `key`, which inherits its count
    /// as the error.
    fn replace_smallest(&mut self, key: &str, hash: u64, units: u64) {
        let id = self.heap[0];
        let old_hash = self.entries[id as usize].hash;
        if let Ok(slot) = self.index.find_entry(old_hash, |&x| x == id) {
            slot.remove();
        }
        let entry = &mut self.entries[id as usize];
        self.key_bytes = self.key_bytes - entry.key.len() + key.len();
        entry.key = key.into();
        entry.hash = hash;
        entry.error = entry.count;
        entry.count = entry.count.saturating_add(units);
        let entries = &self.entries;
        self.index
            .insert_unique(hash, id, |&id| entries[id as usize].hash);
        self.sift_down(0);
    }

    fn count_at(&self, place: usize) -> u64 {
        self.entries[self.heap[place] as usize].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.at[self.heap[a] as usize] = a as u32;
        self.at[self.heap[b] as usize] = b as u32;
    }

    fn sift_up(&mut self, mut place: usize) {
        while place > 0 {
            let parent = (place - 1) / 2;
            if self.count_at(parent) <= self.count_at(place) {
                return;
            }
            self.swap(parent, place);
            place = parent;
        }
    }

    fn sift_down(&mut self, mut place: usize) {
        loop {
            let (left, right) = (2 * place + 1, 2 * place + 2);
            let mut smallest = place;
            if left < self.heap.len() && self.count_at(left) < self.count_at(smallest) {
                smallest = left;
            }
            if right < self.heap.len() && self.count_at(right) < self.count_at(smallest) {
                smallest = right;
            }
            if smallest == place {
                return;
            }
            self.swap(place, smallest);
            place = smallest;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.total == 0
    }

    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The most any key not tracked can have had: the smallest count once
    /// every counter is in use, 0 before (every key seen is tracked).
    pub(super) fn untracked_max(&self) -> u64 {
        if self.entries.len() < self.capacity {
            0
        } else {
            self.count_at(0)
        }
    }

    /// Every tracked key with its bounds: `(key, count, count - error)`.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, u64, u64)> {
        self.entries
            .iter()
            .map(|e| (&*e.key, e.count, e.count - e.error))
    }

    /// Its entries, given up: `(key, hash, upper, lower)`.
    pub(super) fn into_entries(self) -> impl Iterator<Item = (Box<str>, u64, u64, u64)> {
        self.entries
            .into_iter()
            .map(|e| (e.key, e.hash, e.count, e.count - e.error))
    }

    /// Bytes held, by [`ENTRY_OVERHEAD`] per counter in use plus the keys.
    pub(super) fn bytes(&self) -> usize {
        self.entries.len() * ENTRY_OVERHEAD + self.key_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One hasher for every key: each `DefaultHashBuilder` is seeded anew.
    fn hash(key: &str) -> u64 {
        use std::hash::BuildHasher;
        static HASHER: std::sync::LazyLock<hashbrown::DefaultHashBuilder> =
            std::sync::LazyLock::new(Default::default);
        HASHER.hash_one(key)
    }

    fn add(s: &mut SpaceSaving, key: &str, units: u64) {
        s.add(key, hash(key), units);
    }

    fn bounds(s: &SpaceSaving, key: &str) -> Option<(u64, u64)> {
        s.iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, upper, lower)| (upper, lower))
    }

    #[test]
    fn under_capacity_every_count_is_exact() {
        let mut s = SpaceSaving::new(4);
        for (key, units) in [("a", 3), ("b", 1), ("a", 2), ("c", 7)] {
            add(&mut s, key, units);
        }
        assert_eq!(bounds(&s, "a"), Some((5, 5)));
        assert_eq!(bounds(&s, "c"), Some((7, 7)));
        assert_eq!(s.untracked_max(), 0);
        assert_eq!(s.total(), 13);
    }

    #[test]
    fn a_new_key_replaces_the_smallest_and_inherits_its_count_as_error() {
        let mut s = SpaceSaving::new(2);
        add(&mut s, "a", 5);
        add(&mut s, "b", 2);
        add(&mut s, "c", 1);
        assert_eq!(bounds(&s, "b"), None);
        assert_eq!(bounds(&s, "c"), Some((3, 1)));
        assert_eq!(bounds(&s, "a"), Some((5, 5)));
        assert_eq!(s.untracked_max(), 3);
    }

    #[test]
    fn the_heap_and_index_stay_consistent_under_churn() {
        let mut s = SpaceSaving::new(8);
        let mut state = 7u64;
        for _ in 0..10_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            let key = format!("k{}", (state >> 33) % 40);
            add(&mut s, &key, (state >> 60) + 1);
        }
        for place in 1..s.heap.len() {
            assert!(s.count_at((place - 1) / 2) <= s.count_at(place));
        }
        for (id, entry) in s.entries.iter().enumerate() {
            assert_eq!(s.heap[s.at[id] as usize] as usize, id);
            let found = s.index.find(entry.hash, |&x| x as usize == id);
            assert_eq!(found.copied(), Some(id as u32));
        }
        let keys: usize = s.entries.iter().map(|e| e.key.len()).sum();
        assert_eq!(s.key_bytes, keys);
    }
}
