//! The embedded store's reservations (`domain::reservation`): the twin of
//! the records `lua/adjust.lua` keeps beside a check's state, one table per
//! shard so that a check and its settle run under the lock of their client
//! key, atomically with the state they change.
//!
//! Bounded like the keys: at most the shard's share of `memory.max_keys`.
//! A full table drops its expired records, then the `1 / 16` nearest their
//! expiry. A record lost so only makes its settle "unknown": the units the
//! check spent stay spent, as when a reservation expires, so a flood of
//! reservations can cost their holders a refund and never mints capacity.

use std::hash::RandomState;

use hashbrown::HashMap;

use crate::domain::Reservation;
use crate::store::Settled;

/// A full table frees this fraction of its capacity at once.
const EVICT_FRACTION: usize = 16;

struct Record {
    digest: Box<str>,
    expires_at_us: u64,
    /// `actual - reserved` once settled.
    settled: Option<i128>,
}

/// One shard's records, by nonce.
#[derive(Default)]
pub(super) struct Table {
    records: HashMap<Box<str>, Record, RandomState>,
}

impl Table {
    /// Records `reservation`, made by a check allowed at `now`, keeping at
    /// most `capacity` records.
    pub fn record(&mut self, reservation: &Reservation, now: u64, capacity: usize) {
        if self.records.len() >= capacity && !self.records.contains_key(reservation.nonce()) {
            self.make_room(now, capacity);
        }
        self.records.insert(
            reservation.nonce().into(),
            Record {
                digest: reservation.digest().into(),
                expires_at_us: now.saturating_add(reservation.ttl_ms.saturating_mul(1_000)),
                settled: None,
            },
        );
    }

    /// What a settle of `reservation` by `delta` (`actual - reserved`)
    /// finds at `now`; when it is [`Settled::Now`], the record says so from
    /// here on (keeping its expiry), and the caller applies the settle.
    pub fn settle(&mut self, reservation: &Reservation, now: u64, delta: i128) -> Settled {
        let Some(record) = self
            .records
            .get_mut(reservation.nonce())
            .filter(|r| r.expires_at_us > now && *r.digest == *reservation.digest())
        else {
            return Settled::Unknown;
        };
        match record.settled {
            None => {
                record.settled = Some(delta);
                Settled::Now
            }
            Some(before) if before == delta => Settled::Again,
            Some(_) => Settled::Conflict,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Drops the records expired at `now`.
    pub fn sweep(&mut self, now: u64) {
        self.records.retain(|_, r| r.expires_at_us > now);
    }

    fn make_room(&mut self, now: u64, capacity: usize) {
        let target = capacity - (capacity / EVICT_FRACTION).max(1);
        self.sweep(now);
        if self.records.len() <= target {
            return;
        }
        let evict = self.records.len() - target;
        let mut expiries: Vec<u64> = self.records.values().map(|r| r.expires_at_us).collect();
        let (_, &mut cutoff, _) = expiries.select_nth_unstable(evict - 1);
        self.records.retain(|_, r| r.expires_at_us > cutoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_then_again_or_conflict_and_unknown_after_expiry() {
        let mut table = Table::default();
        let (r, _) = Reservation::new(b"{}", 10);
        table.record(&r, 0, 100);
        assert_eq!(table.settle(&r, 1, -3), Settled::Now);
        assert_eq!(table.settle(&r, 2, -3), Settled::Again);
        assert_eq!(table.settle(&r, 3, 4), Settled::Conflict);
        assert_eq!(table.settle(&r, 10_000, -3), Settled::Unknown);
        let (other, _) = Reservation::new(b"{}", 10);
        assert_eq!(table.settle(&other, 1, 0), Settled::Unknown);
    }

    #[test]
    fn the_table_stays_within_its_capacity() {
        let mut table = Table::default();
        for i in 0..1_000 {
            let (r, _) = Reservation::new(b"{}", 60_000);
            table.record(&r, i, 64);
            assert!(table.len() <= 64);
        }
    }
}
