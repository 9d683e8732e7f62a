//! What the pipeline takes and gives back: a list of [`Request`]s, each a
//! store operation (a check, a reset, a settle, ...) and how long a denied
//! check may wait, answered one [`Answer`] each. [`Route`] is the one place
//! that says which stages a request goes through.

use std::time::Duration;

use crate::domain::Decision;
use crate::store::{Drawn, Op, OpKind, Settled};

/// One operation for the pipeline ([`Limiter::run`](super::Limiter::run)).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// What to do to which limits. A check's lease is the pipeline's to
    /// generate (its `lease` is ignored); a release or renewal names one.
    pub op: Op<'a>,
    /// How long a denied check may wait for its `retry_after` and try
    /// again. Zero: answered at once.
    pub wait: Duration,
}

impl<'a> Request<'a> {
    pub fn new(op: Op<'a>) -> Request<'a> {
        Request {
            op,
            wait: Duration::ZERO,
        }
    }

    /// This request, waiting at most `wait` while denied.
    pub fn waiting(self, wait: Duration) -> Request<'a> {
        Request { wait, ..self }
    }
}

/// What the pipeline answered one request.
#[derive(Debug, Clone)]
pub struct Answer {
    /// A check's decision; for any other operation, the state afterwards
    /// as a check of cost 0 reports it.
    pub decision: Decision,
    /// A release's or renewal's: whether the lease was live (`None`
    /// without a concurrency limit, and for every other operation).
    pub lease: Option<bool>,
    /// A settle's of a reservation: what its record said.
    pub reservation: Option<Settled>,
    /// A draw's: what its reservation's record said, and the units drawn
    /// on it since its check.
    pub drawn: Option<(Drawn, u64)>,
    /// How long a waiting check stood in line (zero for every other).
    pub waited: Duration,
}

impl Answer {
    pub(super) fn of(decision: Decision) -> Answer {
        Answer {
            decision,
            lease: None,
            reservation: None,
            drawn: None,
            waited: Duration::ZERO,
        }
    }
}

/// Which stages apply to a request. The stages themselves run whatever
/// they are given; only this says who is given to which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Route {
    /// A check: the deny cache may answer it, a store failure is answered
    /// by the failure policy (any other operation reports it: a made-up
    /// answer would hide whether capacity came back), and its answer is
    /// counted as a decision.
    pub check: bool,
    /// Hot-key leasing: only a check alone in its list (a list's checks go
    /// to the store in one call, which a chunk would not shorten) that
    /// records no reservation (whose record must be written with its
    /// spend, in the store).
    pub leasing: bool,
    /// Waiting: only a check alone in its list (one waiting check would
    /// hold every answer of the list), asked to wait, and not a shadow
    /// policy's (whose denial is allowed anyway).
    pub waiting: bool,
}

impl Route {
    pub(super) fn of(request: &Request<'_>, alone: bool) -> Route {
        let check = request.op.kind == OpKind::Check;
        Route {
            check,
            leasing: check && alone && request.op.reservation.is_none(),
            waiting: check && alone && !request.wait.is_zero() && !request.op.check.shadow,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Algorithm, Check, LeaseId, Reservation, Rule};

    fn check() -> Check {
        Check::single(
            "k",
            Rule::with_length(Algorithm::FixedWindow, 10, 60_000_000, 10),
            1,
        )
    }

    #[test]
    fn a_check_alone_leases_and_may_wait_and_one_in_a_list_does_neither() {
        let c = check();
        let waiting = Request::new(Op::check(&c)).waiting(Duration::from_secs(1));
        let alone = Route::of(&waiting, true);
        assert!(alone.check && alone.leasing && alone.waiting);
        let listed = Route::of(&waiting, false);
        assert!(listed.check && !listed.leasing && !listed.waiting);
        assert!(!Route::of(&Request::new(Op::check(&c)), true).waiting);
    }

    #[test]
    fn a_shadow_check_never_waits_and_a_reserving_one_never_leases() {
        let mut c = check();
        c.shadow = true;
        let shadow = Request::new(Op::check(&c)).waiting(Duration::from_secs(1));
        assert!(!Route::of(&shadow, true).waiting);
        let c = check();
        let (reservation, _) = Reservation::new(b"r", 60_000);
        let reserving = Request::new(Op::check(&c).reserving(Some(&reservation)));
        assert!(!Route::of(&reserving, true).leasing);
    }

    #[test]
    fn adjustments_take_no_check_stage() {
        let c = check();
        let lease = LeaseId::generate();
        for kind in OpKind::ALL.into_iter().filter(|k| *k != OpKind::Check) {
            let op = Op {
                kind,
                check: &c,
                lease: Some(&lease),
                reservation: None,
            };
            let route = Route::of(&Request::new(op).waiting(Duration::from_secs(1)), true);
            assert_eq!(
                route,
                Route {
                    check: false,
                    leasing: false,
                    waiting: false
                },
                "{op:?}"
            );
        }
    }
}
