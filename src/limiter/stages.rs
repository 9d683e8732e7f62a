//! Stages 1, 3 and 4 of the pipeline (see `pipeline.rs`): the deny cache,
//! the breaker, and the store call, with what a store answer does to a
//! step ([`Limiter::take_result`], which the leasing stage's own store
//! call shares).

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::domains::Permit;
use super::pipeline::{State, Step};
use super::request::Answer;
use super::{Limiter, health};
use crate::domain::Decision;
use crate::store::{Applied, Op, StoreError};
use crate::telemetry::otel;

impl Limiter {
    /// Stage 1: a recorded denial is the store's own answer, even while
    /// the store is unreachable: nothing can have been allowed since.
    pub(super) fn deny_cached(&self, step: &mut Step<'_, '_>) {
        // A levels check spans several client keys, and an invalidation
        // names one: a cached denial of it could outlive a reset of a
        // level. It always asks the store.
        if !step.route.check || !step.is_pending() || step.check().has_levels() {
            return;
        }
        let Some(cache) = &self.deny_cache else {
            return;
        };
        if let Some(outcomes) = cache.lookup(step.check()) {
            self.metrics.deny_cache.hits.inc();
            let decision = Decision::from_outcomes(step.check(), &outcomes);
            step.answer(Ok(Answer::of(decision)));
        }
    }

    /// Stage 3: the failure domain's breaker admits the step to the store
    /// call, or it fails at once (an open breaker makes no call).
    pub(super) fn admit(&self, step: &mut Step<'_, '_>) {
        if !step.is_pending() {
            return;
        }
        let domain = self.store.failure_domain(step.check());
        step.state = match self.breakers.admit(domain) {
            Some(permit) => State::Admitted(permit),
            None => State::Failed(StoreError::Unavailable("circuit breaker open".into())),
        };
    }

    /// Stage 4: one store call for every admitted step. The breaker hears
    /// each failure domain once per call, not once per step: 100 checks
    /// failing in one call are one failed call, and must not open the
    /// breaker for everyone as 100 would. It hears a failure if any of
    /// the domain's steps met one.
    pub(super) async fn call_store(&self, steps: &mut [Step<'_, '_>]) {
        for step in steps.iter_mut() {
            if matches!(step.state, State::Admitted(_)) {
                step.guard = self.guard(step);
            }
        }
        let admitted = |s: &&Step<'_, '_>| matches!(s.state, State::Admitted(_));
        // One step (most calls) without a list on the heap.
        let one: Op;
        let many: Vec<Op>;
        let ops: &[Op] = match &*steps {
            [step] if admitted(&step) => {
                one = step.op();
                std::slice::from_ref(&one)
            }
            [_] => return,
            steps => {
                many = steps.iter().filter(admitted).map(|s| s.op()).collect();
                &many
            }
        };
        if ops.is_empty() {
            return;
        }
        let asked = self.asking();
        let span = otel::store_call(|| self.store.name(), ops.len());
        let mut results = self.store.apply(ops).await.into_iter();
        drop(span);
        let mut heard = Heard::default();
        for step in steps.iter_mut() {
            // Taken out only from an admitted step: the others keep theirs.
            let permit = match std::mem::replace(&mut step.state, State::Pending) {
                State::Admitted(permit) => permit,
                other => {
                    step.state = other;
                    continue;
                }
            };
            let result = results.next().unwrap_or_else(|| {
                Err(StoreError::Backend(
                    "a store answered a list with too few answers".into(),
                ))
            });
            // Dropped armed after an error: the lease goes back.
            let guard = step.guard.take();
            if let (Ok(_), Some(guard)) = (&result, guard) {
                guard.disarm();
            }
            heard.add(permit, result.as_ref().err());
            self.take_result(step, &asked, result);
        }
        for (permit, error) in heard.first.into_iter().chain(heard.rest) {
            self.breakers.record(permit, error.as_ref());
        }
    }

    /// What a store answer does to a step: latency is counted; a check's
    /// answer marks the store up, is cached if a denial, and feeds the
    /// leases; an error fails the step for stage 5, unless it is a bug,
    /// which surfaces.
    pub(super) fn take_result(
        &self,
        step: &mut Step<'_, '_>,
        asked: &Asked,
        result: Result<Applied, StoreError>,
    ) {
        self.metrics
            .store
            .duration
            .observe(asked.started.elapsed().as_secs_f64());
        let applied = match result {
            Ok(applied) => applied,
            Err(error) => {
                self.metrics.store.record_error(&error);
                if !step.route.check {
                    // The call may or may not have published.
                    self.metrics.invalidations.sent_error.inc();
                } else if !error.is_transient() {
                    tracing::error!(%error, "store error");
                    step.answer(Err(error.into()));
                    return;
                } else if error.store_is_down() {
                    self.remember_check_failure(&error);
                }
                step.state = State::Failed(error);
                return;
            }
        };
        let check = step.check();
        let decision = Decision::from_outcomes(check, &applied.outcomes);
        if !step.route.check {
            let answer = Answer {
                lease: applied.lease,
                reservation: applied.reservation,
                drawn: applied.drawn,
                ..Answer::of(decision)
            };
            step.published = Some(applied.published);
            step.answer(Ok(answer));
            return;
        }
        if self.health.probed.load(Ordering::Relaxed) != health::UP {
            self.check_answered();
        }
        if let (Some(cache), Some(at)) = (&self.deny_cache, asked.cache_now)
            && !check.has_levels()
        {
            cache.record(check, at, &applied.outcomes);
        }
        if let Some(leases) = &self.leases {
            leases.observed(check, &applied.outcomes);
        }
        let decision = decision.with_lease(check, step.lease.clone());
        step.answer(Ok(Answer::of(decision)));
    }

    /// When a store call starts: for its latency, and for the deny cache
    /// (a denial is cached only if nothing invalidated the key since).
    pub(super) fn asking(&self) -> Asked {
        Asked {
            started: Instant::now(),
            cache_now: self.deny_cache.as_ref().map(|c| c.now_us()),
        }
    }
}

/// What a store call tells the breakers: each failure domain once, a
/// failure if any of its steps met one (only an unreachable or slow store
/// counts). The first domain is kept inline: with one Redis node every
/// step is of it.
#[derive(Default)]
struct Heard {
    first: Option<(Permit, Option<StoreError>)>,
    rest: Vec<(Permit, Option<StoreError>)>,
}

impl Heard {
    fn add(&mut self, permit: Permit, error: Option<&StoreError>) {
        let error = error.filter(|e| e.store_is_down());
        let domain = permit.domain();
        let known = |(p, _): &&mut (Permit, Option<StoreError>)| p.domain() == domain;
        if let Some((_, seen)) = self
            .first
            .iter_mut()
            .chain(self.rest.iter_mut())
            .find(known)
        {
            if seen.is_none() {
                *seen = error.cloned();
            }
        } else if self.first.is_none() {
            self.first = Some((permit, error.cloned()));
        } else {
            self.rest.push((permit, error.cloned()));
        }
    }
}

/// A store call under way.
pub(super) struct Asked {
    started: Instant,
    /// The deny cache's clock when the call started.
    cache_now: Option<u64>,
}

#[cfg(test)]
#[path = "stages_tests.rs"]
mod tests;
