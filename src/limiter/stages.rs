//! Deciding a check, in stages, each a function of its own so that a new
//! feature is a stage (or part of one), not another optional field on the
//! path:
//! 1. a local answer, without the store (the deny cache);
//! 2. admission by the failure domain's circuit breaker;
//! 3. the store call, for one check or for many in one round trip;
//! 4. observation (`Limiter::observe`: metrics, the heavy-hitters sketch);
//! 5. the fallback (`Limiter::degraded`): the failure mode's answer.
//!
//! A single check goes through them one after the other; a list of checks
//! ([`Limiter::check_many`]) takes stages 1 and 2 per check, stage 3 once
//! for every check the store must answer, and stages 4 and 5 per check.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::deny_cache::DenyCache;
use super::domains::Permit;
use super::wait::queue::Waiters;
use super::{Limiter, LimiterError, health};
use crate::domain::{Check, Decision, LeaseId, Outcome, Reservation};
use crate::store::{Op, Store, StoreError};

impl Limiter {
    /// One check through the stages, without observing it (a waiting check
    /// counts its answer once, not each try: see `wait`).
    pub(super) async fn decide(&self, check: &Check) -> Result<Decision, LimiterError> {
        self.decide_reserving(check, None).await
    }

    /// [`Limiter::decide`], recording `reservation` in the store if every
    /// limit allows. Such a check is never answered from a leased chunk:
    /// its record must be written with its spend, in the same store call.
    pub(super) async fn decide_reserving(
        &self,
        check: &Check,
        reservation: Option<&Reservation>,
    ) -> Result<Decision, LimiterError> {
        if let Some(decision) = self.local_answer(check) {
            return Ok(decision);
        }
        if reservation.is_none()
            && let Some(answer) = self.leased(check).await
        {
            return answer;
        }
        let lease = lease_for(check);
        let Some(permit) = self.breakers.admit(self.store.failure_domain(check)) else {
            return Ok(self.degraded(check, lease));
        };
        let asked = self.asking();
        let guard = self.guard(check, lease.as_ref());
        let op = op_for(check, lease.as_ref()).reserving(reservation);
        let result = self.store.apply(&[op]).await.pop().unwrap_or_else(|| {
            Err(StoreError::Backend(
                "a store answered one operation with no answer".into(),
            ))
        });
        if result.is_ok()
            && let Some(guard) = guard
        {
            guard.disarm();
        }
        let result = result.map(|applied| applied.outcomes);
        self.answered(check, lease, Some(permit), &asked, result)
    }

    /// Several independent checks, each answered as it would be alone, the
    /// ones the store must answer in one store call (one round trip per
    /// cluster slot), applied in their order. Each is observed.
    pub async fn check_many(&self, checks: &[Check]) -> Vec<Result<Decision, LimiterError>> {
        self.check_many_reserving(checks, &[]).await
    }

    /// [`Limiter::check_many`], each check recording the reservation at
    /// its index in `reservations` (if any) when every limit allows.
    pub async fn check_many_reserving(
        &self,
        checks: &[Check],
        reservations: &[Option<Reservation>],
    ) -> Vec<Result<Decision, LimiterError>> {
        let mut answers: Vec<Option<Result<Decision, LimiterError>>> =
            checks.iter().map(|_| None).collect();
        let mut to_store: Vec<(usize, Permit)> = Vec::new();
        let mut leases: Vec<Option<LeaseId>> = checks.iter().map(lease_for).collect();
        for (i, check) in checks.iter().enumerate() {
            if let Some(decision) = self.local_answer(check) {
                answers[i] = Some(Ok(decision));
            } else if let Some(permit) = self.breakers.admit(self.store.failure_domain(check)) {
                to_store.push((i, permit));
            } else {
                answers[i] = Some(Ok(self.degraded(check, leases[i].take())));
            }
        }
        if !to_store.is_empty() {
            let asked = self.asking();
            let mut guards: Vec<Option<LeaseGuard>> = to_store
                .iter()
                .map(|&(i, _)| self.guard(&checks[i], leases[i].as_ref()))
                .collect();
            let ops: Vec<Op> = to_store
                .iter()
                .map(|&(i, _)| {
                    let reservation = reservations.get(i).and_then(Option::as_ref);
                    op_for(&checks[i], leases[i].as_ref()).reserving(reservation)
                })
                .collect();
            let results: Vec<_> = self
                .store
                .apply(&ops)
                .await
                .into_iter()
                .map(|result| result.map(|applied| applied.outcomes))
                .collect();
            // The breaker hears each failure domain once per list, not once
            // per check: 100 checks failing in one call are one failed call,
            // and must not open the breaker for everyone as 100 would. It
            // hears a failure if any of the domain's checks met one.
            let mut heard: Vec<(Permit, Option<StoreError>)> = Vec::new();
            for (guard, result) in guards.iter_mut().zip(&results) {
                if result.is_ok()
                    && let Some(guard) = guard.take()
                {
                    guard.disarm();
                }
            }
            drop(guards);
            for ((i, permit), result) in to_store.into_iter().zip(results) {
                let error = result.as_ref().err().filter(|e| e.store_is_down());
                match heard
                    .iter_mut()
                    .find(|(p, _)| p.domain() == permit.domain())
                {
                    Some((_, seen)) if seen.is_none() => *seen = error.cloned(),
                    Some(_) => {}
                    None => heard.push((permit, error.cloned())),
                }
                let lease = leases[i].take();
                answers[i] = Some(self.answered(&checks[i], lease, None, &asked, result));
            }
            for (permit, error) in heard {
                self.breakers.record(permit, error.as_ref());
            }
        }
        answers
            .into_iter()
            .zip(checks)
            .map(|(answer, check)| {
                let answer = answer.expect("every check has an answer");
                if let Ok(decision) = &answer {
                    self.observe(check, decision);
                }
                answer
            })
            .collect()
    }

    /// Stage 1: a recorded denial is the store's own answer, even while
    /// the store is unreachable: nothing can have been allowed since.
    fn local_answer(&self, check: &Check) -> Option<Decision> {
        let outcomes = self.deny_cache.as_ref()?.lookup(check)?;
        self.metrics.deny_cache_hits.inc();
        Some(Decision::from_outcomes(check, &outcomes))
    }

    /// When a store call starts: for its latency, and for the deny cache
    /// (a denial is cached only if nothing invalidated the key since).
    pub(super) fn asking(&self) -> Asked {
        Asked {
            started: Instant::now(),
            cache_now: self.deny_cache.as_ref().map(|c| c.now_us()),
        }
    }

    /// After stage 3, for one check: the breaker (given its `permit`; a
    /// list tells it once per call itself) and latency are told, a denial
    /// is cached, and an error is answered by the fallback (stage 5)
    /// unless it is a bug, which surfaces.
    pub(super) fn answered(
        &self,
        check: &Check,
        lease: Option<LeaseId>,
        permit: Option<Permit>,
        asked: &Asked,
        result: Result<Vec<Outcome>, StoreError>,
    ) -> Result<Decision, LimiterError> {
        self.metrics
            .store_duration
            .observe(asked.started.elapsed().as_secs_f64());
        if let Some(permit) = permit {
            self.breakers.record(permit, result.as_ref().err());
        }
        match result {
            Ok(outcomes) => {
                if self.probed.load(Ordering::Relaxed) != health::UP {
                    self.check_answered();
                }
                if let (Some(cache), Some(at)) = (&self.deny_cache, asked.cache_now) {
                    cache.record(check, at, &outcomes);
                }
                if let Some(leases) = &self.leases {
                    leases.observed(check, &outcomes);
                }
                Ok(Decision::from_outcomes(check, &outcomes).with_lease(check, lease))
            }
            Err(error) => {
                self.metrics.record_store_error(error.kind());
                if !error.is_transient() {
                    tracing::error!(%error, "store error");
                    return Err(error.into());
                }
                if error.store_is_down() {
                    self.remember_check_failure(&error);
                }
                // Only this check: the breaker decides whether the store
                // as a whole is down. The lease was not taken (or, if the
                // reply was lost, is unknown to the caller and expires).
                Ok(self.degraded(check, lease))
            }
        }
    }
}

/// A fresh lease for a check that takes one: it has a concurrency limit
/// and spends (a look takes none). Generated before the store call, so the
/// store only records it.
fn lease_for(check: &Check) -> Option<LeaseId> {
    (check.cost > 0 && check.concurrency().is_some()).then(LeaseId::generate)
}

/// The check as a store operation: acquiring `lease` if it takes one.
pub(super) fn op_for<'a>(check: &'a Check, lease: Option<&'a LeaseId>) -> Op<'a> {
    match lease {
        Some(lease) => Op::acquire(check, lease),
        None => Op::check(check),
    }
}

impl Limiter {
    /// A guard for the store call acquiring `lease` for `check`, if any.
    fn guard(&self, check: &Check, lease: Option<&LeaseId>) -> Option<LeaseGuard> {
        lease.map(|lease| LeaseGuard {
            store: self.store.clone(),
            cache: self.deny_cache.clone(),
            waiters: self.waiting.waiters.clone(),
            held: Some((check.clone(), lease.clone())),
        })
    }
}

/// A lease being acquired, released unless its answer came back. Without
/// it, a client that hangs up while the store call is under way (hyper
/// drops the request's future) would leave a lease the store took and
/// nobody knows the id of, holding a slot for its whole TTL; so would a
/// call whose reply was lost (a timeout) after the script ran. Either way
/// the guard drops armed and a release goes out, on its own task
/// ([`release_unanswered`]).
struct LeaseGuard {
    store: Arc<dyn Store>,
    cache: Option<Arc<DenyCache>>,
    waiters: Arc<Waiters>,
    held: Option<(Check, LeaseId)>,
}

impl LeaseGuard {
    /// The store answered: the caller gets the lease (or none was taken).
    fn disarm(mut self) {
        self.held = None;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some((check, lease)) = self.held.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, cache, waiters) = (self.store.clone(), self.cache.take(), self.waiters.clone());
        runtime.spawn(async move {
            if release_unanswered(store.as_ref(), &check, &lease).await {
                tracing::debug!("released a lease whose answer was never delivered");
                if let Some(cache) = cache {
                    cache.invalidate(&check.key);
                }
                waiters.wake(&check.key);
            }
        });
    }
}

/// The first wait between two releases the store did not answer; it
/// doubles up to [`RELEASE_BACKOFF_MAX`].
const RELEASE_BACKOFF: Duration = Duration::from_millis(100);
const RELEASE_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// After a release answered "no such lease": the acquire may still be
/// queued behind it on another connection of the pool (a Redis waking
/// from a freeze serves its connections in no set order), so one more
/// try this much later settles it.
const RELEASE_RECHECK: Duration = Duration::from_secs(1);

/// Frees `lease`, which an acquire that nobody got the answer of may have
/// taken; true if it was held. A store that does not answer (frozen, down)
/// is asked again, with back-off, until it answers, for as long as the
/// lease could live (its TTL): an acquire written to a frozen Redis runs
/// when it wakes, however late, and timed-out releases sent before then
/// may have run before it, or died with their connection. Nothing is
/// freed that the caller holds: nobody but this task knows the id.
async fn release_unanswered(store: &dyn Store, check: &Check, lease: &LeaseId) -> bool {
    let ttl = check.concurrency().map_or(Duration::ZERO, |limit| {
        Duration::from_micros(limit.rule.window_us())
    });
    let give_up = Instant::now() + ttl;
    let mut backoff = RELEASE_BACKOFF;
    let mut seen_absent = false;
    loop {
        let released = store.apply(&[Op::release(check, lease)]).await;
        match released.first() {
            Some(Ok(applied)) if applied.lease == Some(true) => return true,
            Some(Ok(_)) if seen_absent => return false,
            Some(Ok(_)) => seen_absent = true,
            // No answer: ask again once the store may be back.
            _ => {}
        }
        let wait = if seen_absent {
            RELEASE_RECHECK
        } else {
            backoff
        };
        if Instant::now() + wait >= give_up {
            return false;
        }
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(RELEASE_BACKOFF_MAX);
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
