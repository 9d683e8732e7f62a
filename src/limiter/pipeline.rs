//! The one way anything is decided: a list of requests through the
//! stages, in this order. A single check is a list of one; a batch, the
//! RLS's descriptors, forward-auth, reset, refund, settle, release and
//! renew are lists too. Each stage is a function over the list's steps
//! that leaves alone the steps it does not apply to ([`Route`] says which
//! those are) and those already answered:
//! 0. runtime blocks (`tenants.rs`): a blocked key's check is denied at
//!    once, without the store (and after stage 5, an exempt key's check is
//!    answered allowed);
//! 1. the deny cache (`stages.rs`): a recorded denial answers a check
//!    without the store;
//! 2. hot-key leasing (`leasing.rs`): this instance's chunk of a hot key
//!    answers a check alone;
//! 3. the circuit breaker (`stages.rs`): admission by the failure domain's
//!    breaker, or the step fails at once;
//! 4. the store call (`stages.rs`): one [`Store::apply`](crate::store::Store::apply)
//!    for every admitted step (one round trip per cluster slot), each
//!    failure domain's breaker told once;
//! 5. the degraded answer (`fallback.rs`): a failed check is answered by
//!    its failure mode; a failed adjustment is an error, unless the local
//!    store held the lease it names;
//! 6. waiting (`wait`): a denied check alone that may wait runs stages 1 to
//!    5 again at each `retry_after`;
//! 7. invalidation (`invalidate.rs`): whatever freed capacity ends cached
//!    denials and leased chunks of its key and wakes its waiters;
//! 8. observation (`observe` below): metrics and the heavy-hitters
//!    sketch, once per request, however many tries it took.

use std::sync::Arc;

use super::domains::Permit;
use super::lease_guard::LeaseGuard;
use super::request::{Answer, Request, Route};
use super::{Limiter, LimiterError};
use crate::domain::{Check, LeaseId};
use crate::store::{Op, OpKind, StoreError};
use crate::telemetry::otel;

/// One request on its way through the stages.
pub(super) struct Step<'r, 'a> {
    pub request: &'r Request<'a>,
    pub route: Route,
    /// The lease a check acquires on its concurrency limit: generated
    /// before the store call, so the store only records it.
    pub lease: Option<LeaseId>,
    pub state: State,
    /// An adjustment's: whether the store answered (so the invalidation
    /// stage knows a release freed nothing), and what it said about
    /// telling the other instances.
    /// `Some` once the store answered it: what it said of the PUBLISH.
    pub published: Option<Option<bool>>,
    /// Armed while the store call acquiring `lease` is under way.
    /// Boxed: only an acquiring check has one, and every step would
    /// otherwise carry its room (a whole check).
    pub guard: Option<Box<LeaseGuard>>,
}

/// Where a step is.
pub(super) enum State {
    /// No stage has answered it yet.
    Pending,
    /// Admitted by its breaker (stage 3), for the store call.
    Admitted(Permit),
    /// The store could not answer (stage 3 or 4): for stage 5.
    Failed(StoreError),
    Answered(Result<Answer, LimiterError>),
}

impl<'r, 'a> Step<'r, 'a> {
    pub(super) fn new(request: &'r Request<'a>, alone: bool) -> Step<'r, 'a> {
        let route = Route::of(request, alone);
        Step {
            request,
            route,
            lease: route.check.then(|| lease_for(request.op.check)).flatten(),
            state: State::Pending,
            published: None,
            guard: None,
        }
    }

    pub(super) fn check(&self) -> &'a Check {
        self.request.op.check
    }

    /// The store operation: a check acquires the lease generated for it.
    pub(super) fn op(&self) -> Op<'_> {
        Op {
            lease: self.lease.as_ref().or(self.request.op.lease),
            ..self.request.op
        }
    }

    pub(super) fn kind(&self) -> OpKind {
        self.request.op.kind
    }

    pub(super) fn is_pending(&self) -> bool {
        matches!(self.state, State::Pending)
    }

    pub(super) fn answer(&mut self, answer: Result<Answer, LimiterError>) {
        self.state = State::Answered(answer);
    }

    fn into_answer(self) -> Result<Answer, LimiterError> {
        match self.state {
            State::Answered(answer) => answer,
            // Unreachable: stage 5 answers every step the others did not.
            _ => Err(StoreError::Backend("a request went unanswered".into()).into()),
        }
    }
}

/// A fresh lease for a check that takes one: it has a concurrency limit
/// and spends (a look takes none).
fn lease_for(check: &Check) -> Option<LeaseId> {
    (check.cost > 0 && check.concurrency().is_some()).then(LeaseId::generate)
}

impl Limiter {
    /// Decides every request, each answered as it would be alone, in one
    /// store call for all those the store must answer.
    pub async fn run(
        self: &Arc<Self>,
        requests: &[Request<'_>],
    ) -> Vec<Result<Answer, LimiterError>> {
        let alone = requests.len() == 1;
        otel::record_batch_size(requests.len());
        let mut steps: Vec<Step> = requests.iter().map(|r| Step::new(r, alone)).collect();
        self.process(&mut steps).await;
        steps.into_iter().map(Step::into_answer).collect()
    }

    /// [`run`](Self::run) on a list of one, kept on the stack: most calls
    /// are one check, and this is their hot path.
    pub async fn run_one(self: &Arc<Self>, request: Request<'_>) -> Result<Answer, LimiterError> {
        let mut steps = [Step::new(&request, true)];
        self.process(&mut steps).await;
        let [step] = steps;
        step.into_answer()
    }

    /// The stages, in order, over every step.
    async fn process(self: &Arc<Self>, steps: &mut [Step<'_, '_>]) {
        match &mut *steps {
            [step] if step.route.waiting => {
                // Boxed: a waiting check's future is large, and every other
                // request would carry its room.
                let waiting = otel::stage("waiting");
                let answer = Box::pin(self.wait(step.request)).await;
                drop(waiting);
                step.answer(answer);
            }
            steps => self.decide(steps).await,
        }
        let alone = steps.len() == 1;
        for step in steps.iter_mut() {
            self.invalidate(step);
            self.observe(step, alone);
        }
    }

    /// Stages 1 to 5: every step answered, nothing observed (a waiting
    /// check is counted once, not at each try).
    pub(super) async fn decide(&self, steps: &mut [Step<'_, '_>]) {
        // Runtime blocks are looked up in the same pass.
        let stage = otel::stage("deny_cache");
        for step in steps.iter_mut() {
            self.blocked(step);
            self.deny_cached(step);
        }
        drop(stage);
        if let [step] = steps
            && step.route.leasing
            && step.is_pending()
        {
            let stage = otel::stage("lease");
            self.leased(step).await;
            drop(stage);
        }
        let stage = otel::stage("breaker");
        for step in steps.iter_mut() {
            self.admit(step);
        }
        drop(stage);
        self.call_store(steps).await;
        for step in steps.iter_mut() {
            self.fall_back(step);
            self.exempted(step);
        }
    }

    /// [`decide`](Self::decide) for one check, as the waiting stage tries
    /// it.
    pub(super) async fn decide_one(&self, request: &Request<'_>) -> Result<Answer, LimiterError> {
        let mut steps = [Step::new(request, true)];
        self.decide(&mut steps).await;
        let [step] = steps;
        step.into_answer()
    }

    /// Stage 8: an answered check's metrics and its key in the sketches;
    /// an adjustment's count.
    fn observe(&self, step: &Step<'_, '_>, alone: bool) {
        let State::Answered(answer) = &step.state else {
            return;
        };
        if !step.route.check {
            self.metrics.adjustments.record(step.kind(), answer.is_ok());
            return;
        }
        if let Ok(answer) = answer {
            self.metrics
                .decisions
                .record(step.check(), &answer.decision);
            otel::record_check(step.check(), &answer.decision, || self.store.name(), alone);
            if let Some(top) = &self.top {
                top.observe(step.check(), &answer.decision);
            }
        }
    }

    /// A guard for the store call acquiring the step's lease, if any.
    pub(super) fn guard(&self, step: &Step<'_, '_>) -> Option<Box<LeaseGuard>> {
        step.lease
            .as_ref()
            .map(|lease| Box::new(LeaseGuard::new(self, step.check(), lease)))
    }
}
