//! The recent past of one stream, in slices: the current 10 s slice live,
//! the last six finished slices (the 1 minute view), and the last ten
//! finished minutes merged from them (the 10 minute view). Each slice is a
//! Space-Saving summary of the same capacity, so memory is fixed; a view
//! merges its slices, and the bounds add.

use std::collections::{HashMap, VecDeque};

use super::space_saving::{ENTRY_OVERHEAD, SpaceSaving};

/// One slice, in microseconds.
pub(super) const SLICE_US: u64 = 10_000_000;
/// Slices a minute.
const PER_MINUTE: u64 = 6;
/// Finished slices kept for the 1 minute view.
const FINE: u64 = 6;
/// Finished minutes kept for the 10 minute view.
const COARSE: u64 = 10;

/// The window a view covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// The current slice and the six before it: 60 to 70 s.
    Minute,
    /// The current minute's slices and the ten minutes before: 10 to 11 min.
    TenMinutes,
}

/// A finished slice or minute: its tracked keys with their bounds, and the
/// most a key not among them can have had.
struct Summary {
    entries: Vec<(Box<str>, u64, u64)>,
    untracked_max: u64,
    total: u64,
}

impl Summary {
    fn of(sketch: SpaceSaving) -> Summary {
        let (untracked_max, total) = (sketch.untracked_max(), sketch.total());
        Summary {
            entries: sketch
                .into_entries()
                .map(|(key, _, upper, lower)| (key, upper, lower))
                .collect(),
            untracked_max,
            total,
        }
    }

    fn bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, _, _)| ENTRY_OVERHEAD + k.len())
            .sum()
    }
}

/// A source of a view: a summary, or the live slice.
pub(super) struct Source<'a> {
    entries: Box<dyn Iterator<Item = (&'a str, u64, u64)> + 'a>,
    untracked_max: u64,
    total: u64,
}

impl<'a> From<&'a Summary> for Source<'a> {
    fn from(s: &'a Summary) -> Source<'a> {
        Source {
            entries: Box::new(s.entries.iter().map(|(k, u, l)| (&**k, *u, *l))),
            untracked_max: s.untracked_max,
            total: s.total,
        }
    }
}

impl<'a> From<&'a SpaceSaving> for Source<'a> {
    fn from(s: &'a SpaceSaving) -> Source<'a> {
        Source {
            entries: Box::new(s.iter()),
            untracked_max: s.untracked_max(),
            total: s.total(),
        }
    }
}

/// Several sources merged: each key's bounds summed over the sources, a
/// source that does not track it adding its `untracked_max` to the upper
/// bound and 0 to the lower.
pub(super) struct Merged<'a> {
    /// `(key, upper, lower)`, in no order.
    pub(super) keys: Vec<(&'a str, u64, u64)>,
    /// The most a key not in `keys` can have had.
    pub(super) untracked_max: u64,
    pub(super) total: u64,
}

pub(super) fn merge<'a>(sources: Vec<Source<'a>>) -> Merged<'a> {
    let untracked_max: u64 = sources.iter().map(|s| s.untracked_max).sum();
    let total = sources.iter().map(|s| s.total).sum();
    // Per key: what its sources add above their untracked_max, and its
    // lower bound. A tracked count is never below its source's
    // untracked_max (the smallest count, or 0), so this never underflows.
    let mut sums: HashMap<&str, (u64, u64)> = HashMap::new();
    for source in sources {
        let floor = source.untracked_max;
        for (key, upper, lower) in source.entries {
            let sum = sums.entry(key).or_default();
            sum.0 += upper - floor.min(upper);
            sum.1 += lower;
        }
    }
    Merged {
        keys: sums
            .into_iter()
            .map(|(k, (above, lower))| (k, untracked_max + above, lower))
            .collect(),
        untracked_max,
        total,
    }
}

/// One stream's slices.
pub(super) struct Windowed {
    capacity: usize,
    /// The slice `current` counts.
    slice: u64,
    current: SpaceSaving,
    /// Finished slices, oldest first.
    fine: VecDeque<(u64, Summary)>,
    /// Finished minutes, oldest first.
    coarse: VecDeque<(u64, Summary)>,
    /// The last minute merged into `coarse`, plus one.
    merged_until: u64,
}

impl Windowed {
    pub(super) fn new(capacity: usize, slice: u64) -> Windowed {
        Windowed {
            capacity,
            slice,
            current: SpaceSaving::new(capacity),
            fine: VecDeque::new(),
            coarse: VecDeque::new(),
            merged_until: slice / PER_MINUTE,
        }
    }

    /// Adds `units` to `key` in slice `slice` (a slice before the current
    /// one counts in the current one: clocks here never step back).
    pub(super) fn add(&mut self, slice: u64, key: &str, hash: u64, units: u64) {
        self.roll(slice);
        self.current.add(key, hash, units);
    }

    /// Makes `now` the current slice: the finished one is kept, finished
    /// minutes are merged, and what has aged out of both views is dropped.
    pub(super) fn roll(&mut self, now: u64) {
        if now <= self.slice {
            return;
        }
        if !self.current.is_empty() {
            let done = std::mem::replace(&mut self.current, SpaceSaving::new(self.capacity));
            self.fine.push_back((self.slice, Summary::of(done)));
        }
        self.slice = now;
        let minute = now / PER_MINUTE;
        // Every minute now over is merged while all its slices are still
        // here: a slice of minute m is dropped only once the current slice
        // is FINE past it, which is after m is over.
        for m in self.merged_until..minute {
            let slices: Vec<Source> = self
                .fine
                .iter()
                .filter(|(s, _)| s / PER_MINUTE == m)
                .map(|(_, summary)| summary.into())
                .collect();
            if !slices.is_empty() {
                let merged = self.truncate(merge(slices));
                self.coarse.push_back((m, merged));
            }
        }
        self.merged_until = self.merged_until.max(minute);
        while self.fine.front().is_some_and(|(s, _)| s + FINE < now) {
            self.fine.pop_front();
        }
        while self
            .coarse
            .front()
            .is_some_and(|(m, _)| m + COARSE < minute)
        {
            self.coarse.pop_front();
        }
    }

    /// A merge cut to `capacity` keys, the largest upper bounds kept: a key
    /// cut is as untracked, so the most an untracked key can have had is
    /// now also the largest upper bound cut.
    fn truncate(&self, merged: Merged<'_>) -> Summary {
        let mut keys = merged.keys;
        keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let cut_max = keys.get(self.capacity).map_or(0, |k| k.1);
        keys.truncate(self.capacity);
        Summary {
            entries: keys.into_iter().map(|(k, u, l)| (k.into(), u, l)).collect(),
            untracked_max: merged.untracked_max.max(cut_max),
            total: merged.total,
        }
    }

    /// The sources of `period` as of `now`, and the first slice it covers.
    pub(super) fn view(&mut self, period: Period, now: u64) -> (Vec<Source<'_>>, u64) {
        self.roll(now);
        let minute = now / PER_MINUTE;
        let mut sources: Vec<Source> = vec![(&self.current).into()];
        let since = match period {
            Period::Minute => {
                sources.extend(self.fine.iter().map(|(_, s)| s.into()));
                now.saturating_sub(FINE)
            }
            Period::TenMinutes => {
                let this_minute = self.fine.iter().filter(|(s, _)| s / PER_MINUTE == minute);
                sources.extend(this_minute.map(|(_, s)| s.into()));
                sources.extend(self.coarse.iter().map(|(_, s)| s.into()));
                minute.saturating_sub(COARSE) * PER_MINUTE
            }
        };
        (sources, since)
    }

    /// Bytes held by every slice.
    pub(super) fn bytes(&self) -> usize {
        let done = self.fine.iter().chain(&self.coarse);
        self.current.bytes() + done.map(|(_, s)| s.bytes()).sum::<usize>()
    }

    /// Nothing counted in either view any more.
    pub(super) fn is_idle(&self) -> bool {
        self.current.is_empty() && self.fine.is_empty() && self.coarse.is_empty()
    }
}
