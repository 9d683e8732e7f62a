//! Stage 5 of the pipeline (see `pipeline.rs`): the answer when the store
//! cannot give one.
//!
//! - A check is answered by its failure mode (its policy's, or the
//!   service's): the local store's under `Local` (when it can answer), the
//!   policy's otherwise.
//! - Any other operation (reset, refund, settle, release, renew) is the
//!   store's answer or an error, never the failure policy's: a made-up
//!   answer would tell the caller that capacity came back when nothing
//!   changed (or hide that it did), so an outage is reported and the
//!   caller retries. One exception: under `Local` the local store may hold
//!   leases it handed out while the store was down, so a release or
//!   renewal goes to it too, and a lease live there is its answer.

use super::pipeline::{State, Step};
use super::request::Answer;
use super::{FailureMode, Limiter};
use crate::domain::{Check, Decision, Lease, LeaseId};
use crate::store::{Op, OpKind};
use crate::telemetry::otel;

impl Limiter {
    /// Stage 5 for one step: answers it if the store could not, and
    /// shapes a lease's answer.
    pub(super) fn fall_back(&self, step: &mut Step<'_, '_>) {
        if let State::Failed(error) = &step.state {
            otel::record_failure(error.kind());
        }
        if step.route.check {
            if let State::Failed(_) = step.state {
                let decision = self.degraded(step.check(), step.lease.take());
                step.answer(Ok(Answer::of(decision)));
            }
            return;
        }
        if matches!(step.kind(), OpKind::Release | OpKind::Renew) {
            self.release_locally(step);
        }
        if let State::Failed(error) = &step.state {
            let op = step.kind().name();
            if error.is_transient() {
                tracing::warn!(%error, op, "store could not adjust");
            } else {
                tracing::error!(%error, op, "store error");
            }
            let error = error.clone();
            step.answer(Err(error.into()));
        }
        if step.kind() == OpKind::Renew {
            renewed(step);
        }
    }

    /// A check's answer by its failure mode. A check that would take
    /// `lease` gets it only from the local store (which then holds it
    /// until it is released there or expires): the policy's answers hold
    /// no lease, so nothing is handed out that no store knows.
    pub(super) fn degraded(&self, check: &Check, lease: Option<LeaseId>) -> Decision {
        let mode = self.fallback.policy.mode_for(check);
        self.metrics.decisions.record_degraded(mode);
        if let (FailureMode::Local, Some(local)) = (mode, &self.fallback.local) {
            let op = Op {
                lease: lease.as_ref(),
                ..Op::check(check)
            };
            match local.apply_now(&op) {
                Ok(applied) => {
                    return Decision::from_outcomes(check, &applied.outcomes)
                        .with_lease(check, lease)
                        .degraded();
                }
                Err(error) => self.metrics.store.record_error(&error),
            }
        }
        self.fallback.policy.decide(mode, check)
    }

    /// A release or renewal under `Local` also goes to the local store: a
    /// lease it holds is freed (or extended) there, and answers if the
    /// store cannot.
    fn release_locally(&self, step: &mut Step<'_, '_>) {
        let check = step.check();
        if self.fallback.policy.mode_for(check) != FailureMode::Local {
            return;
        }
        let Some(local) = &self.fallback.local else {
            return;
        };
        let Ok(applied) = local.apply_now(&step.request.op) else {
            return;
        };
        let live = applied.lease;
        match &mut step.state {
            State::Answered(Ok(answer)) => {
                answer.lease = match (answer.lease, live) {
                    (Some(a), Some(b)) => Some(a || b),
                    (a, b) => a.or(b),
                };
            }
            State::Failed(_) if live == Some(true) => {
                // The lease was the local store's own: its answer stands.
                let decision = Decision::from_outcomes(check, &applied.outcomes).degraded();
                step.answer(Ok(Answer {
                    lease: Some(true),
                    ..Answer::of(decision)
                }));
            }
            _ => {}
        }
    }
}

/// A renewed lease's answer holds it with its new expiry.
fn renewed(step: &mut Step<'_, '_>) {
    let check = step.check();
    let (Some(lease), Some(limit)) = (step.request.op.lease, check.concurrency()) else {
        return;
    };
    if let State::Answered(Ok(answer)) = &mut step.state
        && answer.lease == Some(true)
    {
        answer.decision.lease = Some(Lease {
            id: lease.clone(),
            expires_in_ms: limit.rule.window_us() / 1_000,
        });
    }
}
