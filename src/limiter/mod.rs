//! The limiter: runs a check on the store and, when the store cannot answer,
//! applies the failure policy. The one place fail-open/closed is decided.
//!
//! Between the two sit the circuit breakers ([`breaker`], one per failure
//! domain in [`domains`]). An isolated error answers only its own check by
//! policy; a sustained failure opens the domain's breaker, and then checks
//! on it are answered by policy at once, for two reasons:
//! - callers are not kept waiting a full timeout on every check during an
//!   outage;
//! - a frozen Redis does not accumulate a backlog of EVALSHAs. fred cannot
//!   cancel a command it already wrote, so every check sent to a frozen
//!   Redis runs when it wakes up and counts against its key even though the
//!   caller already got the policy's answer. The breaker bounds that excess
//!   to the checks in flight when the outage began.
//!
//! A prober (`health.rs`) pings the store for readiness, and notices
//! recovery while no check is sent.
//!
//! With `failure.mode = "local"` the policy's answer comes from an embedded
//! [`MemoryStore`] that only this instance sees: same algorithms, so each
//! instance limits on its own during an outage. Once Redis answers again,
//! its state is authoritative and the local counts are simply no longer
//! consulted (nor copied back: Redis may have counted the same requests, or
//! lost everything in a restart, and there is no telling which).

mod adjust;
pub mod breaker;
pub mod deny_cache;
pub mod domains;
mod health;
mod invalidate;
pub mod lease;
mod leasing;
mod stages;
pub mod top;
pub mod wait;

use std::sync::Arc;
use std::sync::atomic::AtomicU8;

pub use self::adjust::Adjustment;
use self::breaker::BreakerConfig;
use self::deny_cache::DenyCache;
use self::domains::Breakers;
pub use self::health::NotReady;
use self::top::Top;
use self::wait::Waiting;
use self::wait::queue::Waiters;
use self::wait::timer::{Timer, TokioTimer};
pub use crate::domain::failure::{FailureMode, FailurePolicy};
use crate::domain::{Check, Clock, Decision, LeaseId, MonotonicClock, Reservation};
use crate::metrics::Metrics;
use crate::store::memory::MemoryStore;
use crate::store::{Store, StoreError};

/// A store error the failure policy must not hide (a script error, a key of
/// the wrong type): answered with a 500 so it is noticed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct LimiterError(#[from] pub StoreError);

pub struct Limiter {
    store: Arc<dyn Store>,
    policy: FailurePolicy,
    metrics: Arc<Metrics>,
    deny_cache: Option<Arc<DenyCache>>,
    /// The fallback of [`FailureMode::Local`].
    local: Option<MemoryStore>,
    breakers: Breakers,
    /// What the prober last saw: one of `health::{UNKNOWN, UP, DOWN}`.
    probed: AtomicU8,
    /// Why the store was last seen failing, for `/readyz`.
    last_failure: std::sync::Mutex<Option<NotReady>>,
    /// When a failed check last wrote `last_failure`, and its error kind
    /// (see `health::remember_check_failure`).
    last_failure_noted: health::Noted,
    /// Checks waiting for their `retry_after` (see [`wait`]).
    waiting: Waiting,
    /// Who is being checked and denied (see [`top`]); `None`: not counted.
    top: Option<Arc<Top>>,
    /// Hot keys' leased chunks (see [`lease`]); `None`: nothing leases.
    leases: Option<Arc<lease::Leases>>,
}

/// `limits.max_waiters` by default.
pub const DEFAULT_MAX_WAITERS: usize = 10_000;
/// `limits.max_waiters_per_key` by default.
pub const DEFAULT_MAX_WAITERS_PER_KEY: usize = 1_000;

impl Limiter {
    /// Starts with the store's health unknown (not ready) and the default
    /// breaker on a monotonic clock. Call [`probe`](Self::probe) once
    /// before serving.
    pub fn new(store: Arc<dyn Store>, policy: FailurePolicy, metrics: Arc<Metrics>) -> Limiter {
        let breakers = Breakers::new(
            BreakerConfig::default(),
            Arc::new(MonotonicClock::default()),
            metrics.clone(),
            store.name(),
            policy.mode,
        );
        let waiting = Waiting {
            waiters: Arc::new(Waiters::new(
                DEFAULT_MAX_WAITERS,
                DEFAULT_MAX_WAITERS_PER_KEY,
                metrics.waiters.clone(),
                metrics.wait_rejected.clone(),
            )),
            timer: Arc::new(TokioTimer::default()),
        };
        Limiter {
            store,
            policy,
            metrics,
            waiting,
            deny_cache: None,
            local: None,
            breakers,
            probed: AtomicU8::new(health::UNKNOWN),
            last_failure: std::sync::Mutex::new(None),
            last_failure_noted: health::Noted::default(),
            top: None,
            leases: None,
        }
    }

    /// Circuit breakers with `config`, timed by `clock` (monotonic in
    /// production; tests drive a manual one).
    pub fn with_breaker(mut self, config: BreakerConfig, clock: Arc<dyn Clock>) -> Limiter {
        self.breakers.reconfigure(config, clock);
        self
    }

    /// The embedded store that answers while the store cannot, under
    /// [`FailureMode::Local`]. Without one, `Local` answers as `Open`.
    pub fn with_local_store(mut self, store: MemoryStore) -> Limiter {
        self.local = Some(store);
        self
    }

    /// Answers repeated denials locally (see [`deny_cache`]).
    pub fn with_deny_cache(mut self, cache: DenyCache) -> Limiter {
        self.deny_cache = Some(Arc::new(cache));
        self
    }

    /// At most `max_waiters` checks wait at once (`limits.max_waiters`),
    /// at most `max_per_key` of them in one line
    /// (`limits.max_waiters_per_key`), sleeping on `timer` (tokio's in
    /// production; tests drive a manual one).
    pub fn with_waiting(
        mut self,
        max_waiters: usize,
        max_per_key: usize,
        timer: Arc<dyn Timer>,
    ) -> Limiter {
        self.waiting = Waiting {
            waiters: Arc::new(Waiters::new(
                max_waiters,
                max_per_key,
                self.metrics.waiters.clone(),
                self.metrics.wait_rejected.clone(),
            )),
            timer,
        };
        self
    }

    /// Counts every answered check in `top`'s sketches.
    pub fn with_top(mut self, top: Arc<Top>) -> Limiter {
        self.top = Some(top);
        self
    }

    /// The heavy-hitters sketches, when kept.
    pub fn top(&self) -> Option<&Arc<Top>> {
        self.top.as_ref()
    }

    /// Checks waiting now, in every line.
    pub fn waiters(&self) -> usize {
        self.waiting.waiters.len()
    }

    /// The server drains: every waiting check answers its last denial at
    /// once, and checks from now on do not wait.
    pub fn stop_waiting(&self) {
        self.waiting.waiters.close();
    }

    pub fn store_name(&self) -> &'static str {
        self.store.name()
    }

    /// Keys the store holds, if it counts them (the embedded store).
    pub fn store_key_count(&self) -> Option<usize> {
        self.store.key_count()
    }

    /// Leases the store's keys hold, if it bounds them (the embedded store).
    pub fn store_lease_count(&self) -> Option<usize> {
        self.store.lease_count()
    }

    /// Reservations the store holds, if it counts them (the embedded store).
    pub fn store_reservation_count(&self) -> Option<usize> {
        self.store.reservation_count()
    }

    /// Keys the store evicted before their reset, if it evicts (the embedded store).
    pub fn store_evictions(&self) -> Option<u64> {
        self.store.evictions()
    }

    /// Store connections replaced because they stopped answering (Redis).
    pub fn store_connections_replaced(&self) -> Option<u64> {
        self.store.connections_replaced()
    }

    /// Store calls that decided checks, if checks share calls (Redis).
    pub fn store_check_calls(&self) -> Option<u64> {
        self.store.check_calls()
    }

    pub async fn check(&self, check: &Check) -> Result<Decision, LimiterError> {
        let decision = self.decide(check).await?;
        self.observe(check, &decision);
        Ok(decision)
    }

    /// [`Limiter::check`] that records `reservation` in the store, in the
    /// same call, if every limit allows (`domain::reservation`). The
    /// reservation is the caller's iff [`Decision::reserved`]: a denial, a
    /// degraded answer or a shadow policy's allowed denial recorded none.
    pub async fn check_reserving(
        &self,
        check: &Check,
        reservation: &Reservation,
    ) -> Result<Decision, LimiterError> {
        let decision = self.decide_reserving(check, Some(reservation)).await?;
        self.observe(check, &decision);
        Ok(decision)
    }

    /// Stage 4, observation: an answered check's metrics, and its key in
    /// the sketches. Once per check, however many tries a waiting check
    /// took.
    fn observe(&self, check: &Check, decision: &Decision) {
        self.metrics.record_decision(check, decision);
        if let Some(top) = &self.top {
            top.observe(check, decision);
        }
    }

    /// Stage 5, the fallback: the answer when the store cannot give one,
    /// by the check's failure mode (its policy's, or the service's): the
    /// local store's under `Local` (when it can answer), the policy's
    /// otherwise.
    ///
    /// A check that would take `lease` gets it only from the local store
    /// (which then holds it until it is released there or expires): the
    /// policy's answers hold no lease, so nothing is handed out that no
    /// store knows.
    fn degraded(&self, check: &Check, lease: Option<LeaseId>) -> Decision {
        let mode = self.policy.mode_for(check);
        self.metrics.record_degraded(mode);
        if let (FailureMode::Local, Some(local)) = (mode, &self.local) {
            match local.apply_now(&stages::op_for(check, lease.as_ref())) {
                Ok(applied) => {
                    return Decision::from_outcomes(check, &applied.outcomes)
                        .with_lease(check, lease)
                        .degraded();
                }
                Err(error) => self.metrics.record_store_error(error.kind()),
            }
        }
        self.policy.decide(mode, check)
    }
}
