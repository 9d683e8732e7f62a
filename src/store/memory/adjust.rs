//! Reset, refund, settle, release, renewal and give-back on the embedded
//! store: the domain's twins of `lua/adjust.lua`, under the same shard lock
//! as a check, so each is atomic with respect to checks on the same client
//! key. Each answer carries the store time it ran at.

use super::MemoryStore;
use super::{Entry, OwnedStateKey};
use crate::domain::algorithms::{State, give_back_all};
use crate::domain::state_key::StateKey;
use crate::domain::{Algorithm, Check, Reservation, Rule};
use crate::store::{Applied, DrawMode, Drawn, Op, OpKind, Settled, StoreError};

impl MemoryStore {
    /// Every operation but a check ([`MemoryStore::apply_now`] runs those):
    /// an operation is one arm here, as it is one entry of the script's
    /// `ADJUST` table.
    pub(super) fn adjust_now(&self, op: &Op<'_>) -> Result<Applied, StoreError> {
        match op.kind {
            OpKind::Check => Err(StoreError::Backend("a check is not an adjustment".into())),
            OpKind::Reset => self.reset_now(op.check),
            OpKind::Refund => self.refund_now(op.check, op.check.cost),
            OpKind::Settle { actual } => self.settle_now(op.check, actual, op.reservation),
            OpKind::Release => self.lease_now(op.check, op.lease_str(), false),
            OpKind::Renew => self.lease_now(op.check, op.lease_str(), true),
            OpKind::GiveBack { at_us } => self.give_back_now(op.check, at_us),
            OpKind::Draw { seq, cost, mode } => {
                self.draw_now(op.check, op.reservation, (cost, seq, mode))
            }
        }
    }

    /// Deletes the state of every limit of `check`, then answers like a
    /// check of cost 0 (see [`OpKind::Reset`]).
    pub fn reset_now(&self, check: &Check) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut shard = self.inner.shard_of(check);
        for limit in check.limits.iter() {
            shard.remove(&StateKey::of(check, limit));
        }
        let outcomes = self.inner.check_in(&mut shard, check, 0, now, "");
        Ok(Applied::unshared(outcomes).at(now))
    }

    /// Gives back up to `cost` on every limit of `check`, then
    /// answers like a check of cost 0 (see
    /// [`OpKind::Refund`]). Expired state is
    /// "never seen", as after a Redis TTL: nothing to give back.
    pub fn refund_now(&self, check: &Check, cost: u64) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut shard = self.inner.shard_of(check);
        refund_in(&mut shard.map, check, cost, now);
        let outcomes = self.inner.check_in(&mut shard, check, 0, now, "");
        Ok(Applied::unshared(outcomes).at(now))
    }

    /// Gives back up to `check.cost` units that a check of `check`'s limits
    /// counted at store time `at_us`, then answers like a check of cost 0
    /// (see [`OpKind::GiveBack`]), through
    /// [`give_back_all`]. Expired state is "never seen", as after a Redis
    /// TTL: nothing to give back. The expiry stays, as a look leaves it.
    pub fn give_back_now(&self, check: &Check, at_us: u64) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut shard = self.inner.shard_of(check);
        let live = |limit| {
            shard
                .map
                .get(&StateKey::of(check, limit))
                .filter(|e| e.expires_at_us > now)
        };
        let mut states: Vec<State> = check
            .limits
            .iter()
            .map(|limit| {
                live(limit).map_or_else(|| State::fresh(limit.rule.algorithm), |e| e.state.clone())
            })
            .collect();
        let rules: Vec<&Rule> = check.limits.iter().map(|l| &l.rule).collect();
        let outcomes = give_back_all(&mut states, &rules, now, at_us, check.cost)
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        // A state never seen stays so (nothing to insert); a live one takes
        // its lowered count and, as a look, an expiry never shortened.
        for ((limit, state), outcome) in check.limits.iter().zip(states).zip(&outcomes) {
            if let Some(entry) = shard.map.get_mut(&StateKey::of(check, limit))
                && entry.expires_at_us > now
            {
                entry.state = state;
                let until = now.saturating_add(outcome.reset_after_us);
                entry.expires_at_us = entry.expires_at_us.max(until);
            }
        }
        Ok(Applied::unshared(outcomes).at(now))
    }

    /// Settles the reservation `check.cost` as `actual` on every limit of
    /// `check`, each on its own, then answers like a check of cost 0 (see
    /// [`OpKind::Settle`]): below it a
    /// refund, above it a forced spend ([`State::spend`]), whose state and
    /// expiry are written as a check spending writes them.
    ///
    /// With `reservation`, only if its record is live, holds its digest and
    /// is not settled yet (`reservations.rs`); [`Applied::reservation`]
    /// says what it found, and anything else changes nothing.
    pub fn settle_now(
        &self,
        check: &Check,
        actual: u64,
        reservation: Option<&Reservation>,
    ) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut guard = self.inner.shard_of(check);
        let shard = &mut *guard;
        let delta = i128::from(actual) - i128::from(check.cost);
        let found = reservation.map(|r| shard.reservations.settle(r, now, delta));
        let drawn = found.map_or(0, |(_, drawn)| drawn);
        let settled = found.map(|(settled, _)| settled);
        if matches!(settled, None | Some(Settled::Now)) {
            // Against the reservation and everything drawn on it since.
            self.adjust_in(shard, check, delta - i128::from(drawn), now);
        }
        let outcomes = self.inner.check_in(shard, check, 0, now, "");
        Ok(Applied {
            reservation: settled,
            drawn: found.map(|(_, drawn)| (Drawn::Settled, drawn)),
            ..Applied::unshared(outcomes).at(now)
        })
    }

    /// A settle's change of `delta` on `check`'s limits alone, with no
    /// reservation: a levels check's later levels, once the first level's
    /// record let the settle go ahead (`levels.rs`).
    pub(super) fn settle_by(&self, check: &Check, delta: i128) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut guard = self.inner.shard_of(check);
        self.adjust_in(&mut guard, check, delta, now);
        let outcomes = self.inner.check_in(&mut guard, check, 0, now, "");
        Ok(Applied::unshared(outcomes).at(now))
    }

    /// Gives back `-delta` (below 0) or spends `delta` without a check
    /// (above 0) on every limit of `check`, each on its own.
    fn adjust_in(&self, shard: &mut super::ShardData, check: &Check, delta: i128, now: u64) {
        let units = u64::try_from(delta.unsigned_abs()).unwrap_or(u64::MAX);
        if delta < 0 {
            refund_in(&mut shard.map, check, units, now);
        } else if delta > 0 {
            self.spend_in(shard, check, units, now);
        }
    }

    /// Draws `cost` more on `reservation` as draw `seq` (see
    /// [`OpKind::Draw`]): a check of `cost` on every limit of `check`, all
    /// or nothing, if the record lets it go ahead.
    pub fn draw_now(
        &self,
        check: &Check,
        reservation: Option<&Reservation>,
        (cost, seq, mode): (u64, u64, DrawMode),
    ) -> Result<Applied, StoreError> {
        let reservation = reservation
            .ok_or_else(|| StoreError::Backend("a draw names its reservation".into()))?;
        let now = self.inner.clock.now_us();
        let mut guard = self.inner.shard_of(check);
        let shard = &mut *guard;
        let (outcomes, drawn) = match shard.reservations.may_draw(reservation, now, seq) {
            Err(refused) => (self.inner.check_in(shard, check, 0, now, ""), refused),
            Ok(before) if mode == DrawMode::Peek => (
                self.inner.check_in(shard, check, 0, now, ""),
                (Drawn::Denied, before),
            ),
            Ok(_) if mode == DrawMode::Record => {
                let after = shard.reservations.drew(reservation, cost, seq);
                (
                    self.inner.check_in(shard, check, 0, now, ""),
                    (Drawn::Now, after),
                )
            }
            Ok(before) => {
                let outcomes = self.inner.check_in(shard, check, cost, now, "");
                match outcomes.iter().all(|o| o.allowed) {
                    true => {
                        let after = shard.reservations.drew(reservation, cost, seq);
                        (outcomes, (Drawn::Now, after))
                    }
                    false => (outcomes, (Drawn::Denied, before)),
                }
            }
        };
        Ok(Applied {
            drawn: Some(drawn),
            ..Applied::unshared(outcomes).at(now)
        })
    }

    /// A settle's forced spend of `cost` on every limit of `check`.
    fn spend_in(&self, shard: &mut super::ShardData, check: &Check, cost: u64, now: u64) {
        let new = check
            .limits
            .iter()
            .filter(|l| !shard.map.contains_key(&StateKey::of(check, l)))
            .count();
        if new > 0 && shard.weight() + new > self.inner.shard_capacity {
            self.inner.make_room(shard, now);
        }
        let map = &mut shard.map;
        for limit in check.limits.iter() {
            let lookup = StateKey::of(check, limit);
            let live = map.get(&lookup).filter(|e| e.expires_at_us > now);
            let mut state =
                live.map_or_else(|| State::fresh(limit.rule.algorithm), |e| e.state.clone());
            let spent = state.spend(&limit.rule, now, cost);
            if let Some(entry) = map.get_mut(&lookup) {
                if let Some(spend) = spent.spend {
                    entry.expires_at_us = now.saturating_add(spend.reset_after_us);
                    entry.state = state;
                } else if entry.expires_at_us > now {
                    // The look's trim (a sliding log) and, as a look
                    // does, an expiry only ever lengthened.
                    entry.state = state;
                    let until = now.saturating_add(spent.look.reset_after_us);
                    entry.expires_at_us = entry.expires_at_us.max(until);
                }
            } else if let Some(spend) = spent.spend {
                map.insert(
                    OwnedStateKey::of(check, limit),
                    Entry {
                        state,
                        expires_at_us: now.saturating_add(spend.reset_after_us),
                    },
                );
            }
        }
    }
}

/// Gives back up to `cost` on every limit of `check` in its shard's `map`.
/// Expired state is "never seen", as after a Redis TTL: nothing to give
/// back.
fn refund_in(map: &mut super::Map, check: &Check, cost: u64, now: u64) {
    for limit in check.limits.iter() {
        let Some(entry) = map.get_mut(&StateKey::of(check, limit)) else {
            continue;
        };
        if entry.expires_at_us <= now {
            continue;
        }
        // The buckets' refunds set the expiry as their Lua does, only
        // ever lengthening it (PEXPIRE GT); the others keep the one
        // their last spend set.
        if let Some(lives) = entry.state.refund(&limit.rule, now, cost) {
            entry.expires_at_us = entry.expires_at_us.max(now.saturating_add(lives));
        }
    }
}

impl MemoryStore {
    /// Releases (`renew: false`) or renews `lease` on the concurrency
    /// limit of `check`, then answers like a check of cost 0 (see
    /// [`OpKind::Release`]). A release
    /// keeps the state's expiry (it only shrinks); a renewal lengthens it
    /// to the latest lease's, as `lua/concurrency.lua` sets the key's.
    pub fn lease_now(
        &self,
        check: &Check,
        lease: &str,
        renew: bool,
    ) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut shard = self.inner.shard_of(check);
        let mut live = None;
        for limit in check.limits.iter() {
            if limit.rule.algorithm != Algorithm::Concurrency {
                continue;
            }
            let shard = &mut *shard;
            let was = match shard.map.get_mut(&StateKey::of(check, limit)) {
                Some(entry) if entry.expires_at_us > now => {
                    let before = super::leases_of(&entry.state);
                    let was = entry.state.lease(&limit.rule, now, lease, renew);
                    shard.leases =
                        (shard.leases + super::leases_of(&entry.state)).saturating_sub(before);
                    if was == Some(true) && renew {
                        let latest = entry.state.apply(&limit.rule, now, 0).reset_after_us;
                        entry.expires_at_us = entry.expires_at_us.max(now.saturating_add(latest));
                    }
                    was.unwrap_or(false)
                }
                _ => false,
            };
            live = Some(live.unwrap_or(false) || was);
        }
        let outcomes = self.inner.check_in(&mut shard, check, 0, now, "");
        Ok(Applied {
            outcomes,
            published: None,
            lease: live,
            at_us: Some(now),
            reservation: None,
            drawn: None,
        })
    }
}
