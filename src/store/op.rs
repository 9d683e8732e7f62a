//! What one store call does: a list of operations, each on the limits of
//! one check, each answered on its own. Every kind of store work (a check,
//! a reset, a refund, a settle, a release or renewal, a give-back) is one [`OpKind`], so a
//! store has one way in ([`Store::apply`](super::Store::apply)) and one
//! round trip can carry any mix of them.

pub use super::record::{DrawMode, Drawn, Settled};
use crate::domain::{Check, LeaseId, Outcome, Reservation};

/// What an operation does to its check's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Spends `cost` on every limit if every limit allows it (all or
    /// nothing), and answers each limit's decision.
    Check,
    /// Deletes the state of every limit, then answers like a check of cost
    /// 0.
    Reset,
    /// Gives back up to `cost` units of the most recent spending on every
    /// limit, each on its own and never beyond full capacity, then answers
    /// like a check of cost 0.
    Refund,
    /// Settles a reservation of `cost` units as `actual` on every limit,
    /// each on its own (`domain::algorithms::settle`): below `cost` a refund
    /// of the difference; above it the difference spent without a check,
    /// which may go past the limit. Then answers like a check of cost 0.
    /// With a reservation ([`Op::reservation`]), only if its record holds
    /// the reservation's digest and is not settled yet; it then records
    /// `actual` ([`Applied::reservation`] says which it was).
    Settle { actual: u64 },
    /// Frees the operation's lease on the check's concurrency limit at
    /// once ([`Applied::lease`]: whether it was live), then answers like a
    /// check of cost 0. The other limits are left alone.
    Release,
    /// Extends the operation's live lease to now + the concurrency
    /// limit's `window` (its lease TTL); an expired or unknown lease stays
    /// gone. Then answers like a check of cost 0.
    Renew,
    /// Gives back up to `cost` units that a check of the same limits
    /// counted at store time `at_us` ([`Applied::at_us`] of its answer), on
    /// every limit, each on its own and never below zero, then answers
    /// like a check of cost 0: exactly what that check added, as long as
    /// its window still holds it, and nothing else
    /// ([`give_back`](crate::domain::algorithms::give_back)). For hot-key
    /// quota leasing, where [`OpKind::Refund`] (the most recent spending)
    /// is not exact. Only fixed_window and sliding_window limits
    /// ([`Algorithm::gives_back`](crate::domain::Algorithm::gives_back));
    /// any other fails the operation, with nothing written.
    GiveBack { at_us: u64 },
    /// Draws `cost` more on a reservation ([`Op::reservation`], which a
    /// draw always names) while its request streams: only if its record
    /// is live, not settled, and has seen no draw numbered `seq` or later
    /// ([`Drawn`]); then a check of `cost` on every limit, all or nothing,
    /// and if allowed the record adds `cost` to what was drawn and keeps
    /// `seq`. A later settle gives back (or spends) `actual` against the
    /// reservation's cost plus everything drawn. Answers the check's
    /// outcomes, or a look's when the record refused. `mode` other than
    /// [`DrawMode::Spend`]: a draw across cluster slots
    /// (`store::redis::levels`).
    Draw { seq: u64, cost: u64, mode: DrawMode },
}

impl OpKind {
    /// Every operation, in code order, a settle's and a give-back's
    /// numbers 0: what the script's dispatch and the metrics' label sets
    /// are generated from.
    pub const ALL: [OpKind; 8] = [
        OpKind::Check,
        OpKind::Reset,
        OpKind::Refund,
        OpKind::Settle { actual: 0 },
        OpKind::Release,
        OpKind::Renew,
        OpKind::GiveBack { at_us: 0 },
        OpKind::Draw {
            seq: 0,
            cost: 0,
            mode: DrawMode::Spend,
        },
    ];

    /// Its name: the `op` label of metrics and logs, and in upper case
    /// its constant in the script (`OP_GIVE_BACK`). Outside checks and the
    /// Prometheus alerts read these labels: a name never changes.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Check => "check",
            OpKind::Reset => "reset",
            OpKind::Refund => "refund",
            OpKind::Settle { .. } => "settle",
            OpKind::Release => "release",
            OpKind::Renew => "renew",
            OpKind::GiveBack { .. } => "give_back",
            OpKind::Draw { .. } => "draw",
        }
    }

    /// Its code in the script's `ARGV` (`store::redis::wire`), which the
    /// script knows by name only (`OP_<NAME>`, generated from these).
    pub fn code(self) -> u8 {
        match self {
            OpKind::Check => 1,
            OpKind::Reset => 2,
            OpKind::Refund => 3,
            OpKind::Settle { .. } => 4,
            OpKind::Release => 5,
            OpKind::Renew => 6,
            OpKind::GiveBack { .. } => 7,
            OpKind::Draw { .. } => 8,
        }
    }

    /// Whether the other instances sharing the store must hear of it: the
    /// state changed in a way their deny caches cannot know.
    ///
    /// A give-back does: capacity is back, which other instances' deny
    /// caches must hear. Its message is marked
    /// ([`FREED_PREFIX`](crate::store::redis::FREED_PREFIX))
    /// so that listeners can tell it from a reset or refund
    /// ([`InvalidationSink::freed`](crate::store::InvalidationSink::freed)).
    pub fn invalidates(self) -> bool {
        // A renewal frees nothing, so nobody waits on it; a draw spends,
        // as a check does.
        !matches!(self, OpKind::Check | OpKind::Renew | OpKind::Draw { .. })
    }
}

/// One operation: `kind` on the limits of `check`.
#[derive(Debug, Clone, Copy)]
pub struct Op<'a> {
    pub kind: OpKind,
    pub check: &'a Check,
    /// The lease a check acquires on its concurrency limit, or the one a
    /// release or renewal names; generated before the store call
    /// ([`LeaseId::generate`]). `None`: the empty id.
    pub lease: Option<&'a LeaseId>,
    /// A check's: the reservation it records if allowed (its record lives
    /// `ttl_ms`). A settle's: the reservation it settles, once. `None`:
    /// neither, and no store work for it (`domain::reservation`).
    pub reservation: Option<&'a Reservation>,
}

impl<'a> Op<'a> {
    pub fn check(check: &'a Check) -> Op<'a> {
        Op {
            kind: OpKind::Check,
            check,
            lease: None,
            reservation: None,
        }
    }

    /// A check that acquires `lease` on the check's concurrency limit.
    pub fn acquire(check: &'a Check, lease: &'a LeaseId) -> Op<'a> {
        Op {
            kind: OpKind::Check,
            check,
            lease: Some(lease),
            reservation: None,
        }
    }

    /// Frees `lease` on the check's concurrency limit.
    pub fn release(check: &'a Check, lease: &'a LeaseId) -> Op<'a> {
        Op {
            kind: OpKind::Release,
            check,
            lease: Some(lease),
            reservation: None,
        }
    }

    /// Extends `lease` on the check's concurrency limit.
    pub fn renew(check: &'a Check, lease: &'a LeaseId) -> Op<'a> {
        Op {
            kind: OpKind::Renew,
            check,
            lease: Some(lease),
            reservation: None,
        }
    }

    /// The amount the script is sent (`lua/adjust.lua`): the check's cost,
    /// or for a settle the signed difference `actual - reserved`.
    pub fn amount(&self) -> i128 {
        match self.kind {
            OpKind::Settle { actual } => i128::from(actual) - i128::from(self.check.cost),
            OpKind::Draw { cost, .. } => i128::from(cost),
            _ => i128::from(self.check.cost),
        }
    }

    /// This operation with `reservation`: a check recording it, a settle
    /// naming it. No other operation carries one: `wire.rs` reads the
    /// second value of an adjustment that does as its record's answer.
    pub fn reserving(self, reservation: Option<&'a Reservation>) -> Op<'a> {
        Op {
            reservation,
            ..self
        }
    }

    /// The lease's text, `""` for none.
    pub fn lease_str(&self) -> &'a str {
        self.lease.map_or("", LeaseId::as_str)
    }

    pub fn reset(check: &'a Check) -> Op<'a> {
        Op {
            kind: OpKind::Reset,
            check,
            lease: None,
            reservation: None,
        }
    }

    pub fn refund(check: &'a Check) -> Op<'a> {
        Op {
            kind: OpKind::Refund,
            check,
            lease: None,
            reservation: None,
        }
    }

    /// Gives back up to `check.cost` units that a check of `check`'s
    /// limits counted at store time `at_us` (see [`OpKind::GiveBack`]).
    pub fn give_back(check: &'a Check, at_us: u64) -> Op<'a> {
        Op {
            kind: OpKind::GiveBack { at_us },
            check,
            lease: None,
            reservation: None,
        }
    }

    /// Settles the reservation `check.cost` as `actual`.
    pub fn settle(check: &'a Check, actual: u64) -> Op<'a> {
        Op {
            kind: OpKind::Settle { actual },
            check,
            lease: None,
            reservation: None,
        }
    }

    /// Draws `cost` more on `reservation`, a check of `check` made, as
    /// draw number `seq` (see [`OpKind::Draw`]).
    pub fn draw(check: &'a Check, reservation: &'a Reservation, cost: u64, seq: u64) -> Op<'a> {
        Op {
            kind: OpKind::Draw {
                seq,
                cost,
                mode: DrawMode::Spend,
            },
            check,
            lease: None,
            reservation: Some(reservation),
        }
    }
}

/// What one operation did: one outcome per limit, in order (a check's
/// decisions; after a reset, refund or settle, those of a check of cost 0), also
/// reachable through `Deref`; and, for an operation that invalidates,
/// whether the other instances sharing the store were told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub outcomes: Vec<Outcome>,
    /// `Some(true)`: the change published its invalidation in the same
    /// atomic call (Redis); `Some(false)`: that PUBLISH failed (an ACL user
    /// without the channel), while the change itself happened; `None`:
    /// nothing to tell, or no other instance shares this store (the
    /// embedded store).
    pub published: Option<bool>,
    /// For a release or renewal of a check with a concurrency limit:
    /// whether the lease was live (so it was released or renewed).
    /// `None` for every other operation.
    pub lease: Option<bool>,
    /// The store's clock, in microseconds, when the operation ran: Redis's
    /// `TIME` (or the clock the store was given, in tests), the embedded
    /// store's clock. Every store answer carries it; what a later
    /// [`Op::give_back`] of a check names. `None` only from
    /// [`Applied::unshared`] without [`Applied::at`] (test doubles).
    pub at_us: Option<u64>,
    /// For a settle naming a reservation: what its record said. `None`
    /// for every other operation.
    pub reservation: Option<Settled>,
    /// For a draw: what its record said, and the units drawn on it since
    /// its check (the draws', not the check's own cost) afterwards.
    pub drawn: Option<(Drawn, u64)>,
}

impl Applied {
    /// Outcomes of an operation no other instance needs to hear of.
    pub fn unshared(outcomes: Vec<Outcome>) -> Applied {
        Applied {
            outcomes,
            published: None,
            lease: None,
            at_us: None,
            reservation: None,
            drawn: None,
        }
    }

    /// The same answer, run at store time `now_us`.
    pub fn at(self, now_us: u64) -> Applied {
        Applied {
            at_us: Some(now_us),
            ..self
        }
    }
}

impl std::ops::Deref for Applied {
    type Target = [Outcome];

    fn deref(&self) -> &[Outcome] {
        &self.outcomes
    }
}

#[cfg(test)]
mod tests {
    use super::OpKind;

    /// The names are the `op` label values that dashboards, alerts and
    /// outside checks match: this list is what they were before `OpKind`
    /// named them, and must not change.
    #[test]
    fn every_operation_keeps_its_label_and_has_a_code_of_its_own() {
        let names = OpKind::ALL.map(OpKind::name);
        assert_eq!(
            names,
            [
                "check",
                "reset",
                "refund",
                "settle",
                "release",
                "renew",
                "give_back",
                "draw"
            ]
        );
        assert_eq!(OpKind::ALL.map(OpKind::code), [1, 2, 3, 4, 5, 6, 7, 8]);
        let draw = OpKind::Draw {
            seq: 9,
            cost: 9,
            mode: super::DrawMode::Peek,
        };
        for kind in [
            OpKind::Settle { actual: 9 },
            OpKind::GiveBack { at_us: 9 },
            draw,
        ] {
            let listed = OpKind::ALL.iter().find(|k| k.code() == kind.code());
            assert_eq!(listed.map(|k| k.name()), Some(kind.name()));
        }
    }
}
