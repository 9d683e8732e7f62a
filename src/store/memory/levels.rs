//! A levels check on the embedded store (`domain::level`): its limits live
//! under several client keys, so in several shards. Every shard it touches
//! is locked, in ascending order (so two levels checks never wait on each
//! other in a circle), and held while it decides and writes back: the same
//! all or nothing as a check of one key, with the same domain functions.
//!
//! Adjustments (a settle of its reservation, a refund, a reset) need no
//! such lock: each limit is adjusted on its own, as in one key's check. The
//! first level's part goes first, as it holds the reservation's record,
//! and the others follow only if that record allowed the settle.

use std::sync::MutexGuard;

use super::shard::ShardData;
use super::{Inner, MemoryStore, lock};
use crate::domain::algorithms::{State, apply_all_leased};
use crate::domain::state_key::StateKey;
use crate::domain::{Check, Outcome, Reservation, Rule};
use crate::store::{Applied, DrawMode, Drawn, Op, OpKind, Settled, StoreError};

impl Inner {
    /// The shard index of a client key.
    pub(super) fn shard_index(&self, key: &str) -> usize {
        use std::hash::BuildHasher;
        self.hasher.hash_one(key) as usize % super::SHARDS
    }

    /// Decides `check` at `cost` over its `locked` shards (`shards[i]`:
    /// limit i's) and writes each shard's share back, as a check of one
    /// key does (`check_in`).
    fn decide_levels(
        &self,
        locked: &mut Locked<'_>,
        shards: &[usize],
        check: &Check,
        cost: u64,
        now: u64,
    ) -> Vec<Outcome> {
        let n = check.limits.len();
        let mut new = vec![0usize; n];
        let mut states: Vec<State> = Vec::with_capacity(n);
        for (i, limit) in check.limits.iter().enumerate() {
            let shard = locked.get(shards[i]);
            states.push(match shard.map.get(&StateKey::of(check, limit)) {
                Some(entry) if entry.expires_at_us > now => entry.state.clone(),
                found => {
                    new[i] = usize::from(found.is_none());
                    State::fresh(limit.rule.algorithm)
                }
            });
        }
        let rules: Vec<&Rule> = check.limits.iter().map(|l| &l.rule).collect();
        let outcomes = apply_all_leased(&mut states, &rules, now, cost, "");
        let writes = cost > 0 && outcomes.iter().all(|o| o.allowed);
        // Each shard's share written back as a check of its limits alone.
        let mut states: Vec<Option<State>> = states.into_iter().map(Some).collect();
        let mut done = vec![false; n];
        for i in 0..n {
            if done[i] {
                continue;
            }
            let mine: Vec<usize> = (i..n).filter(|&j| shards[j] == shards[i]).collect();
            let part = check.part(mine.iter().map(|&j| check.limits[j].clone()).collect());
            let part_states: Vec<State> = mine.iter().filter_map(|&j| states[j].take()).collect();
            let part_outcomes: Vec<Outcome> = mine.iter().map(|&j| outcomes[j]).collect();
            let shard = locked.get(shards[i]);
            if writes {
                let fresh = mine.iter().map(|&j| new[j]).sum();
                self.room_for(shard, fresh, &part_states, 0, now);
            }
            shard.store_back(&part, part_states, &part_outcomes, now, writes);
            for j in mine {
                done[j] = true;
            }
        }
        outcomes
    }
}

/// The shards a levels check touches, locked in ascending order.
struct Locked<'s> {
    guards: Vec<(usize, MutexGuard<'s, ShardData>)>,
}

impl<'s> Locked<'s> {
    fn new(inner: &'s Inner, shards: &[usize]) -> Locked<'s> {
        let mut order = shards.to_vec();
        order.sort_unstable();
        order.dedup();
        let guards = order
            .into_iter()
            .map(|i| (i, lock(&inner.shards[i])))
            .collect();
        Locked { guards }
    }

    fn get(&mut self, shard: usize) -> &mut ShardData {
        let at = self
            .guards
            .binary_search_by_key(&shard, |(i, _)| *i)
            .expect("every shard of the check is locked");
        &mut self.guards[at].1
    }
}

impl MemoryStore {
    /// The shard of each of `check`'s limits, in order.
    fn shards_of(&self, check: &Check) -> Vec<usize> {
        check
            .limits
            .iter()
            .map(|l| self.inner.shard_index(StateKey::owner(check, l).0))
            .collect()
    }

    /// A levels check: all or nothing over every level's limits, recording
    /// `reservation` (beside the first level's state) if allowed.
    pub(super) fn check_levels(
        &self,
        check: &Check,
        reservation: Option<&Reservation>,
    ) -> (u64, Vec<Outcome>) {
        let inner = &self.inner;
        let now = inner.clock.now_us();
        let shards = self.shards_of(check);
        let mut locked = Locked::new(inner, &shards);
        let outcomes = inner.decide_levels(&mut locked, &shards, check, check.cost, now);
        if let Some(reservation) = reservation
            && outcomes.iter().all(|o| o.allowed)
        {
            let capacity = inner.shard_capacity;
            let home = locked.get(inner.shard_index(&check.key));
            home.reservations.record(reservation, now, capacity);
        }
        (now, outcomes)
    }

    /// A draw on a levels check's reservation (`OpKind::Draw`): the record
    /// (beside the first level's state) and every level's limits under
    /// one set of locks, all or nothing.
    pub(super) fn draw_levels(
        &self,
        check: &Check,
        reservation: &Reservation,
        (cost, seq, mode): (u64, u64, DrawMode),
    ) -> Applied {
        let inner = &self.inner;
        let now = inner.clock.now_us();
        let shards = self.shards_of(check);
        let mut locked = Locked::new(inner, &shards);
        let home = inner.shard_index(&check.key);
        let gate = locked
            .get(home)
            .reservations
            .may_draw(reservation, now, seq);
        let (outcomes, drawn) = match gate {
            Err(refused) => (
                inner.decide_levels(&mut locked, &shards, check, 0, now),
                refused,
            ),
            Ok(before) if mode == DrawMode::Peek => (
                inner.decide_levels(&mut locked, &shards, check, 0, now),
                (Drawn::Denied, before),
            ),
            Ok(_) if mode == DrawMode::Record => {
                let after = locked.get(home).reservations.drew(reservation, cost, seq);
                (
                    inner.decide_levels(&mut locked, &shards, check, 0, now),
                    (Drawn::Now, after),
                )
            }
            Ok(before) => {
                let outcomes = inner.decide_levels(&mut locked, &shards, check, cost, now);
                match outcomes.iter().all(|o| o.allowed) {
                    true => {
                        let records = &mut locked.get(home).reservations;
                        (outcomes, (Drawn::Now, records.drew(reservation, cost, seq)))
                    }
                    false => (outcomes, (Drawn::Denied, before)),
                }
            }
        };
        Applied {
            drawn: Some(drawn),
            ..Applied::unshared(outcomes).at(now)
        }
    }

    /// An adjustment of a levels check: each level's part on its own, the
    /// first (holding the reservation's record) first, the others only if
    /// it went ahead. One answer, the parts' outcomes in the check's order.
    pub(super) fn adjust_levels(&self, op: &Op<'_>) -> Result<Applied, StoreError> {
        let parts: Vec<Check> = op
            .check
            .level_ranges()
            .into_iter()
            .map(|(_, range)| op.check.part(op.check.limits[range].to_vec()))
            .collect();
        let mut outcomes = Vec::with_capacity(op.check.limits.len());
        let mut first: Option<Applied> = None;
        for (i, part) in parts.iter().enumerate() {
            let mut sub = Op { check: part, ..*op };
            if i > 0 {
                sub.reservation = None;
                let went_ahead = first
                    .as_ref()
                    .is_none_or(|a| matches!(a.reservation, None | Some(Settled::Now)));
                if !went_ahead {
                    // Nothing to change: only the answer, a look at cost 0.
                    let look = Check {
                        cost: 0,
                        ..part.clone()
                    };
                    outcomes.extend(self.check_levels(&look, None).1);
                    continue;
                }
            }
            let applied = match (i, op.kind) {
                // A settle's later levels: the first's change, against the
                // reservation and everything drawn on it.
                (1.., OpKind::Settle { .. }) => {
                    let drawn = first.as_ref().and_then(|a| a.drawn).map_or(0, |(_, d)| d);
                    self.settle_by(part, op.amount() - i128::from(drawn))?
                }
                _ => self.adjust_now(&sub)?,
            };
            outcomes.extend(applied.outcomes.iter().copied());
            first.get_or_insert(applied);
        }
        let first = first.expect("a levels check has a first level");
        Ok(Applied { outcomes, ..first })
    }
}
