//! One (policy, client key)'s leasing state on this instance: how fast it
//! is spent here, what the store last said it had left, and the chunks
//! this instance holds. Driven by the caller's `Instant`, so tests step
//! time by hand.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::{LeaseMode, Limit, Outcome};

/// How often a key's local rate is measured.
pub(super) const RATE_PERIOD: Duration = Duration::from_millis(200);
/// A chunk stops being used this long before its window ends by the
/// store's clock (as seen from here), and 1/1000 of its life more: the two
/// clocks may drift apart by that much (NTP slews at most 500 ppm).
pub(super) const END_MARGIN: Duration = Duration::from_millis(1);

/// Units reserved in the store and not yet handed out.
#[derive(Debug, Clone)]
pub(super) struct Chunk {
    /// The limits it was reserved on: a check of other limits (a reloaded
    /// policy, an override) cannot spend it.
    pub limits: Arc<[Limit]>,
    pub left: u64,
    /// The store's clock when the reservation ran: what a give-back names.
    pub at_us: u64,
    /// When the unused units go back (reserved + `lease.ttl`).
    pub give_back_at: Instant,
    /// When its window ends, conservatively: no unit is handed out after.
    pub usable_until: Instant,
    /// Until when some limit still counts it (see
    /// `lease_mode::counted_until_all_us`): unused units are given back
    /// until then, and lapse after.
    pub counted_until: Instant,
    /// The reservation's answer, per limit: what the store had left then,
    /// and when each limit's state resets (for local answers' headers).
    pub outcomes: Vec<Outcome>,
    pub answered_at: Instant,
}

impl Chunk {
    fn usable(&self, now: Instant, limits: &[Limit]) -> bool {
        now < self.usable_until && now < self.give_back_at && *self.limits == *limits
    }
}

/// What a check of a leasing key does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Take {
    /// Answered from a chunk; with `Some(n)` the caller also reserves `n`
    /// more before it answers (the chunk is running low).
    Served {
        outcomes: Vec<Outcome>,
        refill: Option<u64>,
    },
    /// No chunk can answer it: the caller reserves `n` units plus its cost.
    Reserve(u64),
    /// Asked in the store as usual: the key is not hot, is near its limit,
    /// or another caller's reservation is under way.
    Direct,
}

/// A refill under way: the slot's generation when it started. An
/// invalidation in the meantime makes its answer unusable (the reset may
/// have run after the reservation).
pub type Generation = u64;

#[derive(Debug)]
pub(super) struct Slot {
    pub policy: Arc<str>,
    /// Units checked here in the current rate period, and when it began.
    period_units: u64,
    period_start: Instant,
    /// Units per second in the last whole period.
    rate: u64,
    pub last_seen: Instant,
    /// The least `remaining` of the store's last answer (0: not known).
    remaining: u64,
    pub chunks: Vec<Chunk>,
    pub refilling: bool,
    pub generation: Generation,
}

/// At most this many chunks per slot: the one in use and one reserved
/// ahead of it.
const MAX_CHUNKS: usize = 2;

impl Slot {
    pub fn new(policy: Arc<str>, now: Instant) -> Slot {
        Slot {
            policy,
            period_units: 0,
            period_start: now,
            rate: 0,
            last_seen: now,
            remaining: 0,
            chunks: Vec::new(),
            refilling: false,
            generation: 0,
        }
    }

    fn count(&mut self, now: Instant, cost: u64) {
        self.last_seen = now;
        self.period_units = self.period_units.saturating_add(cost);
        let elapsed = now.saturating_duration_since(self.period_start);
        if elapsed >= RATE_PERIOD {
            let us = u64::try_from(elapsed.as_micros())
                .unwrap_or(u64::MAX)
                .max(1);
            self.rate = self.period_units.saturating_mul(1_000_000) / us;
            self.period_units = 0;
            self.period_start = now;
        }
    }

    /// Units per second here, as last measured.
    #[cfg(test)]
    pub fn rate(&self) -> u64 {
        self.rate
    }

    pub fn is_hot(&self, mode: &LeaseMode) -> bool {
        self.rate >= mode.hot_rate
    }

    /// A check of `cost` on `limits` (see [`Take`]).
    pub fn take(&mut self, mode: &LeaseMode, limits: &[Limit], cost: u64, now: Instant) -> Take {
        self.count(now, cost);
        let usable: u64 = self
            .chunks
            .iter()
            .filter(|c| c.usable(now, limits))
            .map(|c| c.left)
            .sum();
        if usable >= cost {
            let mut owed = cost;
            // The oldest first: it goes back (or lapses) first.
            for chunk in self.chunks.iter_mut().filter(|c| c.usable(now, limits)) {
                let taken = owed.min(chunk.left);
                chunk.left -= taken;
                owed -= taken;
            }
            let left = usable - cost;
            let outcomes = self.local_outcomes(limits, left, now);
            let refill = self.refill(mode, left, 0);
            return Take::Served { outcomes, refill };
        }
        match self.refill(mode, 0, cost) {
            Some(n) => Take::Reserve(n),
            None => Take::Direct,
        }
    }

    /// Units to reserve ahead, when `left` are usable: when they are under
    /// half a chunk, the key is hot, no refill is under way and there is
    /// room for another chunk. What this slot holds stays within
    /// `max_units`: the bound on what an instance keeps unused.
    fn refill(&mut self, mode: &LeaseMode, left: u64, cost: u64) -> Option<u64> {
        if self.refilling || !self.is_hot(mode) || self.chunks.len() >= MAX_CHUNKS {
            return None;
        }
        let size = mode.chunk(self.rate, self.remaining, cost)?;
        if left >= size / 2 {
            return None;
        }
        let held: u64 = self.chunks.iter().map(|c| c.left).sum();
        let size = size.min(mode.max_units.saturating_sub(held));
        if size < cost.max(1) {
            return None;
        }
        self.refilling = true;
        Some(size)
    }

    /// A local answer: allowed, with the store's `remaining` as of the
    /// reservation plus what is left here, and its reset as of then.
    fn local_outcomes(&self, limits: &[Limit], left: u64, now: Instant) -> Vec<Outcome> {
        let newest = self
            .chunks
            .iter()
            .rev()
            .find(|c| *c.limits == *limits)
            .expect("a usable chunk");
        let elapsed = u64::try_from(
            now.saturating_duration_since(newest.answered_at)
                .as_micros(),
        )
        .unwrap_or(u64::MAX);
        newest
            .outcomes
            .iter()
            .map(|o| Outcome {
                allowed: true,
                remaining: o.remaining.saturating_add(left),
                retry_after_us: 0,
                reset_after_us: o.reset_after_us.saturating_sub(elapsed),
            })
            .collect()
    }

    /// What the store answered a check of this key: sizes later chunks.
    pub fn observed(&mut self, outcomes: &[Outcome]) {
        if let Some(least) = outcomes.iter().map(|o| o.remaining).min() {
            self.remaining = least;
        }
    }

    /// A refill's answer: `chunk` if it was granted and nothing
    /// invalidated the key since `generation`. Returns the chunk back if it
    /// cannot be kept (an invalidation came in between: its units are
    /// dropped, not given back, see `Leases::invalidate`).
    pub fn refilled(&mut self, generation: Generation, chunk: Option<Chunk>) -> Option<Chunk> {
        self.refilling = false;
        let chunk = chunk?;
        self.observed(&chunk.outcomes);
        if generation != self.generation {
            return Some(chunk);
        }
        self.chunks.push(chunk);
        None
    }

    /// Chunks due back at `now`: past their TTL or their window's end, or
    /// every one if the key has cooled (under half its hot rate, or
    /// unchecked for a TTL). Those no limit counts any more lapse (their
    /// count went with their windows). Returns (to give back, units that
    /// lapsed).
    pub fn due(&mut self, mode: Option<&LeaseMode>, now: Instant) -> (Vec<Chunk>, u64) {
        let cooled = mode.is_none_or(|m| {
            let idle = now.saturating_duration_since(self.last_seen);
            self.rate < m.hot_rate / 2 || idle >= Duration::from_micros(m.ttl_us)
        });
        let mut due = Vec::new();
        let mut lapsed = 0;
        self.chunks.retain(|c| {
            let ended = now >= c.usable_until || now >= c.give_back_at;
            if !(ended || cooled || c.left == 0) {
                true
            } else if now >= c.counted_until {
                lapsed += c.left;
                false
            } else {
                due.push(c.clone());
                false
            }
        });
        due.retain(|c| c.left > 0);
        (due, lapsed)
    }

    /// Nothing held and nothing under way, and unchecked for `idle`.
    pub fn idle(&self, now: Instant, idle: Duration) -> bool {
        self.chunks.is_empty()
            && !self.refilling
            && now.saturating_duration_since(self.last_seen) >= idle
    }

    /// May make room for another key: holds nothing, reserves nothing, and
    /// was not checked within the last rate period (so it is not being
    /// measured hot).
    pub fn evictable(&self, now: Instant) -> bool {
        self.idle(now, RATE_PERIOD)
    }

    /// Drops every chunk (an invalidation): returns the units dropped.
    pub fn drop_chunks(&mut self) -> u64 {
        self.generation += 1;
        self.chunks.drain(..).map(|c| c.left).sum()
    }
}

/// When a reservation answered at `answered_at` stops being usable: its
/// window's end by the store's clock, `until_end_us` after the store ran it,
/// counted from `sent` (before the store could have run it), less the
/// margin.
pub(super) fn usable_until(sent: Instant, until_end_us: u64) -> Instant {
    let until_end = Duration::from_micros(until_end_us);
    let margin = END_MARGIN + until_end / 1_000;
    sent + until_end.saturating_sub(margin)
}

#[cfg(test)]
#[path = "slot_tests.rs"]
mod tests;
