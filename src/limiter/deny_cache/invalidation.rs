//! What makes a recorded denial stale before its time: a reset or refund
//! of its key (a per-key mark), or a moment at which everything was
//! dropped (a lost subscription, too many marks at once).
//!
//! Marks are timestamps on the cache's monotonic clock, not entries
//! removed on the spot: the cache is keyed by key, policy and limits, so
//! one key's entries cannot be found without a full scan. An entry or a
//! recording whose store answer was *asked* at or before a mark of its key
//! (or at or before `cleared_at`) is stale. Comparing the asking time, not
//! the recording time, is what refuses a denial that raced an invalidation:
//! the store decided it before the reset, whenever it comes back.
//!
//! A mark only matters for [`MAX_AGE`]: no entry answers longer than that
//! after it was asked, so marks older than that are dropped. The map of
//! marks is bounded in count and bytes; when it is full of live marks, the
//! whole cache is invalidated at once instead (exact, only less useful).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::MAX_AGE;

/// Most live marks at once (reset/refund calls in the last [`MAX_AGE`]).
const MAX_MARKS: usize = 16_384;
/// Most bytes of client keys the marks hold (keys can be 64 KiB long).
const MAX_MARK_BYTES: usize = 4 << 20;

pub(super) struct Invalidations {
    /// False while invalidations may be missed (the subscription is lost):
    /// then the cache answers nothing and records nothing.
    active: AtomicBool,
    /// Whatever was asked *before* this instant is stale. Every instant
    /// here is one past the event's (0: none), so that an answer asked in
    /// the same microsecond as an invalidation counts as stale.
    stale_before_us: AtomicU64,
    /// The newest mark ever set: a lookup asked at or after it skips the lock.
    newest_us: AtomicU64,
    marks: Mutex<Marks>,
}

#[derive(Default)]
struct Marks {
    /// Per key, like `stale_before_us`.
    by_key: HashMap<Box<str>, u64>,
    bytes: usize,
}

impl Marks {
    fn clear(&mut self) {
        self.by_key.clear();
        self.bytes = 0;
    }

    fn is_full(&self, key_len: usize) -> bool {
        self.by_key.len() >= MAX_MARKS || self.bytes + key_len > MAX_MARK_BYTES
    }
}

impl Invalidations {
    pub(super) fn new() -> Invalidations {
        Invalidations {
            active: AtomicBool::new(true),
            stale_before_us: AtomicU64::new(0),
            newest_us: AtomicU64::new(0),
            marks: Mutex::new(Marks::default()),
        }
    }

    pub(super) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Everything of `key` asked at or before `now_us` is stale.
    pub(super) fn mark(&self, key: &str, now_us: u64) {
        let max_age = MAX_AGE.as_micros() as u64;
        let at = now_us + 1;
        let mut marks = self.lock();
        if self.newest_us.load(Ordering::Acquire) + max_age <= at {
            marks.clear(); // every mark has outlived every entry it covered
        }
        if marks.is_full(key.len()) {
            marks.by_key.retain(|_, mark| *mark + max_age > at);
            marks.bytes = marks.by_key.keys().map(|k| k.len()).sum();
        }
        if marks.is_full(key.len()) {
            // Still full of live marks: one mark for everything instead.
            // Set under the lock, before the marks go, so a lookup that
            // finds its mark gone sees it (see `is_stale`).
            self.stale_before_us.fetch_max(at, Ordering::AcqRel);
            marks.clear();
            return;
        }
        match marks.by_key.get_mut(key) {
            Some(mark) => *mark = (*mark).max(at),
            None => {
                marks.bytes += key.len();
                marks.by_key.insert(key.into(), at);
            }
        }
        self.newest_us.fetch_max(at, Ordering::AcqRel);
    }

    /// Everything asked at or before `now_us` is stale.
    pub(super) fn clear(&self, now_us: u64) {
        let mut marks = self.lock();
        self.stale_before_us.fetch_max(now_us + 1, Ordering::AcqRel);
        marks.clear();
    }

    /// Stops answering and recording until [`resume`](Self::resume).
    pub(super) fn suspend(&self, now_us: u64) {
        self.active.store(false, Ordering::Release);
        self.clear(now_us);
    }

    /// Answers again, but nothing asked at or before `now_us`: an
    /// invalidation may have been missed until then.
    pub(super) fn resume(&self, now_us: u64) {
        self.clear(now_us);
        self.active.store(true, Ordering::Release);
    }

    /// Whether a store answer for `key` asked at `asked_at_us` may have
    /// been ended by an invalidation.
    pub(super) fn is_stale(&self, key: &str, asked_at_us: u64) -> bool {
        if self.newest_us.load(Ordering::Acquire) > asked_at_us
            && self
                .lock()
                .by_key
                .get(key)
                .is_some_and(|&mark| asked_at_us < mark)
        {
            return true;
        }
        // Read after the marks: a mark dropped for a global clear was
        // dropped after `stale_before_us` moved (both under the lock).
        asked_at_us < self.stale_before_us.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(super) fn mark_count(&self) -> usize {
        self.lock().by_key.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }
}
