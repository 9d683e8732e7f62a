//! A policy's lease mode: how an instance may hold a chunk of a hot key's
//! capacity and answer that key's checks from it without the store.
//!
//! A chunk is reserved by one check of its size, so it is spent in the
//! store before any of it is handed out: the store never sees more spent
//! than the limit allows, and the chunk's units are counted in the window
//! the reservation ran in. That is why a chunk is used only until that
//! window ends (a unit spent later would be counted in a window it did not
//! happen in), and why only algorithms whose reservation can be given back
//! exactly lease ([`Algorithm::gives_back`]):
//! - fixed_window, sliding_window: a reservation is a count in a known
//!   window; giving back decrements that window's count, which leaves the
//!   state as if the reservation had been smaller.
//! - token_bucket, gcra: no. Giving back credits refill that the bucket may
//!   have wasted while full in the meantime; an exact inverse needs the
//!   bucket's history since the reservation.
//! - sliding_log: no. Its entries are timestamps, and removing a
//!   reservation's entries means telling them from other callers'.
//! - concurrency: no. A lease there is a request in flight, not units.
//!
//! Pure: the limiter (`limiter::lease`) keeps the chunks and the clock.

use super::limit::Limit;
use super::{Algorithm, Rule};

/// `lease = { ... }` of a policy, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseMode {
    /// The most units one instance holds for one key at once: with `n`
    /// instances at most `n × max_units` are held unused.
    pub max_units: u64,
    /// How long a chunk may be held: its unused units are given back this
    /// long after it was reserved, at the latest.
    pub ttl_us: u64,
    /// Units per second on this instance from which a key is hot and leases.
    pub hot_rate: u64,
}

/// `lease.ttl` by default.
pub const DEFAULT_TTL_US: u64 = 1_000_000;
/// `lease.hot_rate` by default.
pub const DEFAULT_HOT_RATE: u64 = 100;
/// The shortest `lease.ttl`: a chunk must outlive a few round trips.
pub const MIN_TTL_US: u64 = 10_000;
/// The longest `lease.ttl`: units held unused longer than this are a
/// limit quietly lowered.
pub const MAX_TTL_US: u64 = 60_000_000;
/// A reservation takes at most this fraction (1 / `SHARE`) of what the key
/// has left, so a key near its limit is not held by one instance while
/// the others are denied.
pub const SHARE: u64 = 4;

/// The store time (µs) at which a reservation made at `at_us` stops being
/// usable for `rule`: the end of the window it was counted in.
pub fn usable_until_us(rule: &Rule, at_us: u64) -> u64 {
    rule.window.period(at_us).1
}

/// The store time (µs) until which some limit of `limits` still counts a
/// reservation made at `at_us`, so that giving it back still frees units:
/// a fixed window's period end; a sliding window's end plus one window (it
/// weighs in the next window's estimate). After it, a give-back is a no-op.
pub fn counted_until_all_us(limits: &[Limit], at_us: u64) -> u64 {
    limits
        .iter()
        .map(|l| {
            let end = usable_until_us(&l.rule, at_us);
            match l.rule.algorithm {
                Algorithm::SlidingWindow => end + l.rule.window_us(),
                _ => end,
            }
        })
        .max()
        .unwrap_or(at_us)
}

/// The earliest [`usable_until_us`] of `limits`.
pub fn usable_until_all_us(limits: &[Limit], at_us: u64) -> u64 {
    limits
        .iter()
        .map(|l| usable_until_us(&l.rule, at_us))
        .min()
        .unwrap_or(at_us)
}

impl LeaseMode {
    /// How many units to reserve ahead for a key spending `rate` units per
    /// second here, which had `remaining` units left when last seen:
    /// enough for half a TTL at that rate, at most `max_units` and at most
    /// `1 / SHARE` of `remaining`. `None` when that is under `cost` (a key
    /// near its limit is checked in the store, exactly).
    pub fn chunk(&self, rate: u64, remaining: u64, cost: u64) -> Option<u64> {
        let by_rate = rate.saturating_mul(self.ttl_us) / 2_000_000;
        let size = by_rate.min(self.max_units).min(remaining / SHARE);
        (size >= cost.max(1)).then_some(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Calendar, CalendarUnit, Window, Zone};

    fn mode() -> LeaseMode {
        LeaseMode {
            max_units: 500,
            ttl_us: 1_000_000,
            hot_rate: 100,
        }
    }

    #[test]
    fn a_chunk_lasts_half_a_ttl_at_the_key_rate_within_its_caps() {
        let m = mode();
        assert_eq!(
            m.chunk(400, 100_000, 1),
            Some(200),
            "half a second at 400/s"
        );
        assert_eq!(m.chunk(100_000, 100_000, 1), Some(500), "max_units");
        assert_eq!(
            m.chunk(100_000, 1_000, 1),
            Some(250),
            "a quarter of what is left"
        );
    }

    #[test]
    fn a_key_near_its_limit_does_not_lease() {
        let m = mode();
        assert_eq!(m.chunk(100_000, 7, 1), Some(1));
        assert_eq!(m.chunk(100_000, 3, 1), None);
        assert_eq!(
            m.chunk(100_000, 40, 20),
            None,
            "the chunk must hold a check"
        );
        assert_eq!(m.chunk(1, 100_000, 1), None, "too slow to need one");
    }

    #[test]
    fn only_windows_lease() {
        let leasing: Vec<Algorithm> = Algorithm::ALL
            .into_iter()
            .filter(|a| a.gives_back())
            .collect();
        assert_eq!(
            leasing,
            [Algorithm::FixedWindow, Algorithm::SlidingWindow],
            "see the module doc for why"
        );
    }

    #[test]
    fn a_reservation_is_usable_until_its_window_ends() {
        let rule = |window| Rule {
            algorithm: Algorithm::FixedWindow,
            limit: 10,
            window,
            burst: 10,
        };
        let ten_s = rule(Window::Length(10_000_000));
        assert_eq!(usable_until_us(&ten_s, 123_456_789), 130_000_000);
        assert_eq!(usable_until_us(&ten_s, 130_000_000), 140_000_000);
        let day = rule(Window::Calendar(Calendar {
            unit: CalendarUnit::Day,
            zone: Zone::utc(),
        }));
        let noon = 1_767_268_800_000_000; // 2026-01-01T12:00:00Z
        assert_eq!(usable_until_us(&day, noon), noon + 12 * 3_600_000_000);
        let sliding = Rule {
            algorithm: Algorithm::SlidingWindow,
            ..rule(Window::Length(60_000_000))
        };
        let limits = |rules: Vec<Rule>| -> Vec<Limit> {
            rules
                .into_iter()
                .map(|rule| Limit {
                    name: "default".into(),
                    rule,
                    scope: None,
                    level: None,
                })
                .collect()
        };
        let both = limits(vec![ten_s, sliding]);
        assert_eq!(usable_until_all_us(&both, 123_456_789), 130_000_000);
        assert_eq!(
            counted_until_all_us(&both, 123_456_789),
            180_000_000 + 60_000_000,
            "the minute's count weighs in the next minute"
        );
    }
}
