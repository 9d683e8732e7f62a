//! A levels check (`domain::level`) whose levels fall in several cluster
//! slots. One script cannot touch keys of two slots, so it is decided in
//! two phases, never admitting more than a single atomic step would:
//! 1. each slot's share of the limits is checked (and spent, if allowed)
//!    at once, one call per slot, as any check of those limits;
//! 2. if every share allowed, the check is allowed. Otherwise each share
//!    that spent is given back exactly what it spent: a fixed or sliding
//!    window's units at the store time they were counted (`GiveBack`), a
//!    bucket's or log's most recent spending (`Refund`), and the share
//!    holding the reservation's record by settling it at 0 (so it can
//!    never be settled again).
//!
//! The bound this leaves: between the two phases a share's units are
//! spent, so a concurrent check of that level may be denied that a single
//! atomic step would have allowed. It never admits one that step would
//! have denied: each share is atomic on its own slot, and a check is only
//! allowed when every share was. A share whose call failed (an outage, a
//! timeout) may or may not have spent; it is not given back, so an outage
//! can only ever under-admit.
//!
//! On a single server or Sentinel every levels check is one script call
//! (`wire.rs` sends its limits' keys like any check's): none of this runs.
//! On a cluster, levels whose client keys happen to hash to one slot are
//! one call too. A caller cannot choose that: each client key is its own
//! hash tag, braces escaped (`domain::state_key::hash_tag`), so that a
//! level's counter is the one a check of that level alone uses.

use fred::util::redis_keyslot;

use super::Inner;
use crate::domain::state_key::{StateKey, hash_tag};
use crate::domain::{Check, Limit, Outcome};
use crate::store::{Applied, DrawMode, Drawn, Op, OpKind, Settled, StoreError};

/// One slot's share of a levels check: which of its limits, and the check
/// of those limits alone.
struct Share {
    places: Vec<usize>,
    check: Check,
}

impl Share {
    /// Puts this share's outcomes in their places of the whole check's.
    fn place(&self, answered: &[Outcome], outcomes: &mut [Option<Outcome>]) {
        for (&place, outcome) in self.places.iter().zip(answered) {
            outcomes[place] = Some(*outcome);
        }
    }
}

/// Each share's check at `cost`: a draw's spending, or a look (0).
fn at_cost<'a>(shares: impl IntoIterator<Item = &'a Share>, cost: u64) -> Vec<Check> {
    shares
        .into_iter()
        .map(|s| Check {
            cost,
            ..s.check.clone()
        })
        .collect()
}

/// The whole check's outcomes, once every share placed its own.
fn gathered(outcomes: Vec<Option<Outcome>>) -> Result<Vec<Outcome>, StoreError> {
    outcomes
        .into_iter()
        .collect::<Option<Vec<Outcome>>>()
        .ok_or_else(|| StoreError::Backend("a share went unanswered".into()))
}

impl Inner {
    /// The cluster slot of `limit`'s key in `check`.
    fn slot_of_limit(&self, check: &Check, limit: &Limit) -> u16 {
        if self.options.settings.key_prefix.contains(['{', '}']) {
            return redis_keyslot(self.key_for(check, limit).as_bytes());
        }
        redis_keyslot(hash_tag(StateKey::owner(check, limit).0).as_bytes())
    }

    /// Whether `op` must go in two phases: a levels check's limits in more
    /// than one cluster slot.
    pub(super) fn spans_slots(&self, op: &Op<'_>) -> bool {
        let check = op.check;
        if !self.clustered || !check.has_levels() {
            return false;
        }
        let first = self.slot_of_limit(check, &check.limits[0]);
        check.limits[1..]
            .iter()
            .any(|l| self.slot_of_limit(check, l) != first)
    }

    /// `check`'s limits by slot, the first level's slot first (it holds
    /// the reservation's record).
    fn shares(&self, check: &Check) -> Vec<Share> {
        let mut slots: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, limit) in check.limits.iter().enumerate() {
            let slot = self.slot_of_limit(check, limit);
            match slots.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, places)) => places.push(i),
                None => slots.push((slot, vec![i])),
            }
        }
        slots
            .into_iter()
            .map(|(_, places)| Share {
                check: check.part(places.iter().map(|&i| check.limits[i].clone()).collect()),
                places,
            })
            .collect()
    }

    /// `op`, spanning slots, in two phases (see the module doc).
    pub(super) async fn apply_across(&self, op: &Op<'_>) -> Result<Applied, StoreError> {
        let shares = self.shares(op.check);
        match op.kind {
            OpKind::Check => self.check_across(op, &shares).await,
            OpKind::Draw { seq, cost, .. } => self.draw_across(op, (seq, cost), &shares).await,
            _ => self.adjust_across(op, &shares).await,
        }
    }

    /// A draw spanning slots, in the two phases of a check: every share
    /// (the first's limits too) checked at `cost` at once, as a check of
    /// those limits; then the first share's record: if every share
    /// allowed, its gate and update alone (`DrawMode::Record`), else only
    /// what it says (`DrawMode::Peek`). Unless the record took the draw,
    /// the shares that spent are given back, so the record only ever
    /// counts a draw every level allowed, and a retried, stale, settled or
    /// unknown draw spends nothing.
    async fn draw_across(
        &self,
        op: &Op<'_>,
        (seq, cost): (u64, u64),
        shares: &[Share],
    ) -> Result<Applied, StoreError> {
        let costs = at_cost(shares, cost);
        let ops: Vec<Op> = costs.iter().map(Op::check).collect();
        let answers = self.apply_by_slot(&ops).await;
        let allowed = answers
            .iter()
            .all(|a| a.as_ref().is_ok_and(|a| a.iter().all(|o| o.allowed)));
        let head = self.record_draw(op, (seq, cost), &shares[0], allowed).await;
        let drawn = head.as_ref().ok().and_then(|h| h.drawn);
        // A failed record call may have taken the draw before its reply
        // was lost: the shares stay spent, as the record may count them.
        let drew = matches!(drawn, Some((Drawn::Now, _))) || head.is_err();
        // A record that refused the draw (anything but "now" or "denied")
        // shows every level as it is: a look.
        let refused = !matches!(drawn, Some((Drawn::Now | Drawn::Denied, _)));
        let mut outcomes = vec![None; op.check.limits.len()];
        let mut failed = head.as_ref().err().cloned();
        let mut looks = Vec::new();
        for ((share, op), answer) in shares.iter().zip(&ops).zip(answers) {
            let applied = match answer {
                Ok(applied) => applied,
                Err(error) => {
                    failed.get_or_insert(error);
                    continue;
                }
            };
            let spent = applied.iter().all(|o| o.allowed) && cost > 0;
            let shown = match (drew, spent) {
                (false, true) => self.give_back(op, &applied).await,
                (false, false) if refused => {
                    looks.push(share);
                    continue;
                }
                _ => applied.outcomes,
            };
            share.place(&shown, &mut outcomes);
        }
        if let Some(error) = failed {
            return Err(error);
        }
        self.look_at(&looks, &mut outcomes).await?;
        let outcomes = gathered(outcomes)?;
        Ok(Applied { outcomes, ..head? })
    }

    /// The first share's record, once every share was checked: if all
    /// `allowed`, its gate and update alone, else only what it says.
    async fn record_draw(
        &self,
        op: &Op<'_>,
        (seq, cost): (u64, u64),
        first: &Share,
        allowed: bool,
    ) -> Result<Applied, StoreError> {
        let mode = match allowed {
            true => DrawMode::Record,
            false => DrawMode::Peek,
        };
        let record = Op {
            kind: OpKind::Draw { seq, cost, mode },
            check: &first.check,
            ..*op
        };
        self.run_ops(&[record]).await.and_then(|mut a| a.remove(0))
    }

    /// Fills `outcomes` with a look (a check of cost 0) at each of `shares`.
    async fn look_at(
        &self,
        shares: &[&Share],
        outcomes: &mut [Option<Outcome>],
    ) -> Result<(), StoreError> {
        let checks = at_cost(shares.iter().copied(), 0);
        let ops: Vec<Op> = checks.iter().map(Op::check).collect();
        for (share, answer) in shares.iter().zip(self.apply_by_slot(&ops).await) {
            share.place(&answer?.outcomes, outcomes);
        }
        Ok(())
    }

    async fn check_across(&self, op: &Op<'_>, shares: &[Share]) -> Result<Applied, StoreError> {
        let ops: Vec<Op> = shares
            .iter()
            .enumerate()
            .map(|(i, share)| Op::check(&share.check).reserving(op.reservation.filter(|_| i == 0)))
            .collect();
        let answers = self.apply_by_slot(&ops).await;
        let allowed = answers
            .iter()
            .all(|a| a.as_ref().is_ok_and(|a| a.iter().all(|o| o.allowed)));
        let mut outcomes = vec![None; op.check.limits.len()];
        let mut at_us = None;
        let mut failed = None;
        for ((share, op), answer) in shares.iter().zip(&ops).zip(answers) {
            let applied = match answer {
                Ok(applied) => applied,
                Err(error) => {
                    failed.get_or_insert(error);
                    continue;
                }
            };
            at_us = at_us.or(applied.at_us);
            let spent = applied.iter().all(|o| o.allowed) && op.check.cost > 0;
            let shown = match (allowed, spent) {
                (false, true) => self.give_back(op, &applied).await,
                _ => applied.outcomes,
            };
            share.place(&shown, &mut outcomes);
        }
        if let Some(error) = failed {
            return Err(error);
        }
        let applied = Applied::unshared(gathered(outcomes)?);
        Ok(Applied { at_us, ..applied })
    }

    /// Gives back what the share `op` spent (its answer `applied`), and
    /// answers its limits as they are then. Should that fail, the units
    /// stay spent (fewer admitted, never more) and its own answer stands.
    async fn give_back(&self, op: &Op<'_>, applied: &Applied) -> Vec<Outcome> {
        let check = op.check;
        let undo: Vec<Op> = match op.reservation {
            // Settled at 0: refunded, and its record spent, in one step.
            Some(_) => vec![Op::settle(check, 0).reserving(op.reservation)],
            None => match (
                applied.at_us,
                check.limits.iter().all(|l| l.rule.algorithm.gives_back()),
            ) {
                (Some(at_us), true) => vec![Op::give_back(check, at_us)],
                _ => vec![Op::refund(check)],
            },
        };
        match self.run_ops(&undo).await.map(|mut a| a.remove(0)) {
            Ok(Ok(undone)) => undone.outcomes,
            Ok(Err(error)) | Err(error) => {
                tracing::warn!(%error, "a level's share of a denied check could not be given back; its units stay spent until its window passes");
                applied.outcomes.clone()
            }
        }
    }

    /// A settle (or another adjustment) spanning slots: the share holding
    /// the reservation's record first, the others only if it went ahead.
    async fn adjust_across(&self, op: &Op<'_>, shares: &[Share]) -> Result<Applied, StoreError> {
        let first = Op {
            check: &shares[0].check,
            ..*op
        };
        let head = self.run_ops(&[first]).await?.remove(0)?;
        let went_ahead = matches!(head.reservation, None | Some(Settled::Now));
        // A settle's other shares change by what the first did: against
        // the reservation and everything drawn on it.
        let delta = match op.kind {
            OpKind::Settle { .. } => {
                Some(op.amount() - i128::from(head.drawn.map_or(0, |(_, d)| d)))
            }
            _ => None,
        };
        // When the record refused, the other shares change nothing: a
        // look (a check of cost 0) answers for them.
        let units = |delta: i128| u64::try_from(delta.unsigned_abs()).unwrap_or(u64::MAX);
        let cost = match (went_ahead, delta) {
            (true, Some(delta)) if delta < 0 => units(delta),
            // Every share is a part of one check: its cost is the check's.
            (true, None) => op.check.cost,
            _ => 0,
        };
        let changes = at_cost(&shares[1..], cost);
        let rest: Vec<Op> = changes
            .iter()
            .map(|check| match (went_ahead, delta) {
                (false, _) => Op::check(check),
                // A refund of what was not used; a spend past the limit
                // of what was used beyond; nothing when they are equal.
                (true, Some(delta)) if delta < 0 => Op::refund(check),
                (true, Some(delta)) => Op::settle(check, units(delta)),
                (true, None) => Op {
                    check,
                    reservation: None,
                    ..*op
                },
            })
            .collect();
        let answers = self.apply_by_slot(&rest).await;
        let mut outcomes = vec![None; op.check.limits.len()];
        shares[0].place(&head.outcomes, &mut outcomes);
        for (share, answer) in shares[1..].iter().zip(answers) {
            share.place(&answer?.outcomes, &mut outcomes);
        }
        let outcomes = gathered(outcomes)?;
        Ok(Applied { outcomes, ..head })
    }
}
