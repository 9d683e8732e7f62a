//! The tests' shorthand for one operation alone on a store: a check, a
//! reset, a settle, ... as a list of one through [`Store::apply`], and
//! its one answer. Production code builds its [`Op`]s itself (the limiter
//! sends lists); these exist so a test reads as what it does.

#![allow(dead_code)]

use ratekeeper::domain::{Check, LeaseId, Outcome};
use ratekeeper::store::{Applied, Op, Store, StoreError};

#[allow(async_fn_in_trait)]
pub trait StoreExt {
    /// A check alone (see [`OpKind::Check`](ratekeeper::store::OpKind)):
    /// one outcome per limit, in order, each what that limit alone
    /// decided. A check of one limit is the same call.
    async fn check(&self, check: &Check) -> Result<Vec<Outcome>, StoreError>;
    /// A reset alone.
    async fn reset(&self, check: &Check) -> Result<Applied, StoreError>;
    /// A refund alone: `check.cost` units back.
    async fn refund(&self, check: &Check) -> Result<Applied, StoreError>;
    /// A settle alone: the reservation `check.cost` settled as `actual`.
    async fn settle(&self, check: &Check, actual: u64) -> Result<Applied, StoreError>;
    /// A give-back alone: up to `check.cost` units that a check of the
    /// same limits counted at store time `at_us` (its `Applied::at_us`:
    /// run that check with [`Store::apply`] to learn it).
    async fn give_back(&self, check: &Check, at_us: u64) -> Result<Applied, StoreError>;
    /// A check alone acquiring `lease` on its concurrency limit.
    async fn acquire(&self, check: &Check, lease: &LeaseId) -> Result<Vec<Outcome>, StoreError>;
    /// A release alone; `Applied::lease` says whether the lease was live.
    async fn release(&self, check: &Check, lease: &LeaseId) -> Result<Applied, StoreError>;
    /// A renewal alone.
    async fn renew(&self, check: &Check, lease: &LeaseId) -> Result<Applied, StoreError>;
}

impl<S: Store + ?Sized> StoreExt for S {
    async fn check(&self, check: &Check) -> Result<Vec<Outcome>, StoreError> {
        one(self.apply(&[Op::check(check)]).await).map(|a| a.outcomes)
    }

    async fn reset(&self, check: &Check) -> Result<Applied, StoreError> {
        one(self.apply(&[Op::reset(check)]).await)
    }

    async fn refund(&self, check: &Check) -> Result<Applied, StoreError> {
        one(self.apply(&[Op::refund(check)]).await)
    }

    async fn settle(&self, check: &Check, actual: u64) -> Result<Applied, StoreError> {
        one(self.apply(&[Op::settle(check, actual)]).await)
    }

    async fn give_back(&self, check: &Check, at_us: u64) -> Result<Applied, StoreError> {
        one(self.apply(&[Op::give_back(check, at_us)]).await)
    }

    async fn acquire(&self, check: &Check, lease: &LeaseId) -> Result<Vec<Outcome>, StoreError> {
        one(self.apply(&[Op::acquire(check, lease)]).await).map(|a| a.outcomes)
    }

    async fn release(&self, check: &Check, lease: &LeaseId) -> Result<Applied, StoreError> {
        one(self.apply(&[Op::release(check, lease)]).await)
    }

    async fn renew(&self, check: &Check, lease: &LeaseId) -> Result<Applied, StoreError> {
        one(self.apply(&[Op::renew(check, lease)]).await)
    }
}

/// The one answer of a call of one operation.
fn one(mut answers: Vec<Result<Applied, StoreError>>) -> Result<Applied, StoreError> {
    match answers.pop() {
        Some(answer) if answers.is_empty() => answer,
        _ => Err(StoreError::Backend(
            "a store answered one operation with other than one answer".into(),
        )),
    }
}
