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
use crate::store::{Drawn, Settled};

/// A full table frees this fraction of its capacity at once.
const EVICT_FRACTION: usize = 16;

struct Record {
    digest: Box<str>,
    expires_at_us: u64,
    /// `actual - reserved` once settled.
    settled: Option<i128>,
    /// Units drawn on it since its check (`OpKind::Draw`).
    drawn: u64,
    /// The `seq` of its last allowed draw, 0 before any.
    seq: u64,
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
                drawn: 0,
                seq: 0,
            },
        );
    }

    /// `reservation`'s live record, if it holds its digest.
    fn live(&mut self, reservation: &Reservation, now: u64) -> Option<&mut Record> {
        self.records
            .get_mut(reservation.nonce())
            .filter(|r| r.expires_at_us > now && *r.digest == *reservation.digest())
    }

    /// What a settle of `reservation` by `delta` (`actual - reserved`)
    /// finds at `now`, and the units drawn on it; when it is
    /// [`Settled::Now`], the record says so from here on (keeping its
    /// expiry), and the caller applies the settle (`delta` less what was
    /// drawn).
    pub fn settle(&mut self, reservation: &Reservation, now: u64, delta: i128) -> (Settled, u64) {
        let Some(record) = self.live(reservation, now) else {
            return (Settled::Unknown, 0);
        };
        let found = match record.settled {
            None => {
                record.settled = Some(delta);
                Settled::Now
            }
            Some(before) if before == delta => Settled::Again,
            Some(_) => Settled::Conflict,
        };
        (found, record.drawn)
    }

    /// Whether a draw numbered `seq` on `reservation` may go ahead at
    /// `now`: `Ok` with the units drawn so far, or what refused it and
    /// those units (`OpKind::Draw`).
    pub fn may_draw(
        &mut self,
        reservation: &Reservation,
        now: u64,
        seq: u64,
    ) -> Result<u64, (Drawn, u64)> {
        let Some(record) = self.live(reservation, now) else {
            return Err((Drawn::Unknown, 0));
        };
        match record {
            r if r.settled.is_some() => Err((Drawn::Settled, r.drawn)),
            r if r.seq > 0 && seq == r.seq => Err((Drawn::Again, r.drawn)),
            r if seq < r.seq => Err((Drawn::Stale, r.drawn)),
            r => Ok(r.drawn),
        }
    }

    /// An allowed draw of `cost`, numbered `seq`: the record keeps both.
    /// Returns the units drawn now.
    pub fn drew(&mut self, reservation: &Reservation, cost: u64, seq: u64) -> u64 {
        match self.records.get_mut(reservation.nonce()) {
            Some(record) => {
                record.drawn = record.drawn.saturating_add(cost);
                record.seq = seq;
                record.drawn
            }
            None => 0,
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
        assert_eq!(table.settle(&r, 1, -3).0, Settled::Now);
        assert_eq!(table.settle(&r, 2, -3).0, Settled::Again);
        assert_eq!(table.settle(&r, 3, 4).0, Settled::Conflict);
        assert_eq!(table.settle(&r, 10_000, -3).0, Settled::Unknown);
        let (other, _) = Reservation::new(b"{}", 10);
        assert_eq!(table.settle(&other, 1, 0).0, Settled::Unknown);
    }

    #[test]
    fn draws_go_ahead_once_per_seq_in_order_and_never_after_the_settle() {
        let mut table = Table::default();
        let (r, _) = Reservation::new(b"{}", 10);
        table.record(&r, 0, 100);
        assert_eq!(table.may_draw(&r, 1, 1), Ok(0));
        assert_eq!(table.drew(&r, 5, 1), 5);
        assert_eq!(table.may_draw(&r, 1, 1), Err((Drawn::Again, 5)));
        assert_eq!(table.may_draw(&r, 1, 3), Ok(5));
        assert_eq!(table.drew(&r, 2, 3), 7);
        assert_eq!(table.may_draw(&r, 1, 2), Err((Drawn::Stale, 7)));
        assert_eq!(table.settle(&r, 2, 4), (Settled::Now, 7));
        assert_eq!(table.may_draw(&r, 3, 4), Err((Drawn::Settled, 7)));
        assert_eq!(table.may_draw(&r, 10_000, 5), Err((Drawn::Unknown, 0)));
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
