//! The tests' shorthand for the one decision pipeline
//! ([`Limiter::run`]): a check, a reset, a settle, ... as a list of one
//! (or, for `check_many`, of many). Production code builds its
//! [`Request`]s itself; these exist so a test reads as what it does.
//! The unit tests under `src/limiter` include this file too.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::domain::{Check, Decision, LeaseId, Reservation};
use ratekeeper::limiter::{Answer, Limiter, LimiterError, Request};
use ratekeeper::store::Op;

/// A check's decision and how long it waited.
pub type Waited = Answer;

#[allow(async_fn_in_trait)]
pub trait LimiterExt {
    async fn check(&self, check: &Check) -> Result<Decision, LimiterError>;
    async fn check_reserving(
        &self,
        check: &Check,
        reservation: &Reservation,
    ) -> Result<Decision, LimiterError>;
    async fn check_waiting(&self, check: &Check, wait: Duration) -> Result<Answer, LimiterError>;
    async fn check_many(&self, checks: &[Check]) -> Vec<Result<Decision, LimiterError>>;
    async fn reset(&self, check: &Check) -> Result<Decision, LimiterError>;
    async fn refund(&self, check: &Check) -> Result<Decision, LimiterError>;
    async fn settle(
        &self,
        check: &Check,
        actual: u64,
        reservation: Option<&Reservation>,
    ) -> Result<Answer, LimiterError>;
    async fn release(&self, check: &Check, lease: &LeaseId) -> Result<Answer, LimiterError>;
    async fn renew(&self, check: &Check, lease: &LeaseId) -> Result<Answer, LimiterError>;
}

impl LimiterExt for Arc<Limiter> {
    async fn check(&self, check: &Check) -> Result<Decision, LimiterError> {
        decision(self.run_one(Request::new(Op::check(check))).await)
    }

    async fn check_reserving(
        &self,
        check: &Check,
        reservation: &Reservation,
    ) -> Result<Decision, LimiterError> {
        let op = Op::check(check).reserving(Some(reservation));
        decision(self.run_one(Request::new(op)).await)
    }

    async fn check_waiting(&self, check: &Check, wait: Duration) -> Result<Answer, LimiterError> {
        self.run_one(Request::new(Op::check(check)).waiting(wait))
            .await
    }

    async fn check_many(&self, checks: &[Check]) -> Vec<Result<Decision, LimiterError>> {
        let requests: Vec<Request> = checks.iter().map(|c| Request::new(Op::check(c))).collect();
        self.run(&requests)
            .await
            .into_iter()
            .map(decision)
            .collect()
    }

    async fn reset(&self, check: &Check) -> Result<Decision, LimiterError> {
        decision(self.run_one(Request::new(Op::reset(check))).await)
    }

    async fn refund(&self, check: &Check) -> Result<Decision, LimiterError> {
        decision(self.run_one(Request::new(Op::refund(check))).await)
    }

    async fn settle(
        &self,
        check: &Check,
        actual: u64,
        reservation: Option<&Reservation>,
    ) -> Result<Answer, LimiterError> {
        let op = Op::settle(check, actual).reserving(reservation);
        self.run_one(Request::new(op)).await
    }

    async fn release(&self, check: &Check, lease: &LeaseId) -> Result<Answer, LimiterError> {
        self.run_one(Request::new(Op::release(check, lease))).await
    }

    async fn renew(&self, check: &Check, lease: &LeaseId) -> Result<Answer, LimiterError> {
        self.run_one(Request::new(Op::renew(check, lease))).await
    }
}

fn decision(answer: Result<Answer, LimiterError>) -> Result<Decision, LimiterError> {
    answer.map(|a| a.decision)
}
