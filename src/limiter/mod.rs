//! The limiter: runs a check on the store and, when the store cannot answer,
//! applies the failure policy. The one place fail-open/closed is decided.
//!
//! It also acts as a circuit breaker. After a transient store error it
//! stops sending checks to the store and answers by policy at once, and a
//! prober pings the store until it answers again. Two reasons:
//! - callers are not kept waiting a full timeout on every check during an
//!   outage;
//! - a frozen Redis does not accumulate a backlog of EVALSHAs. fred cannot
//!   cancel a command it already wrote, so every check sent to a frozen
//!   Redis runs when it wakes up and counts against its key even though the
//!   caller already got the policy's answer. The breaker bounds that excess
//!   to the checks in flight when the outage began.

pub mod deny_cache;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use self::deny_cache::DenyCache;
pub use crate::domain::failure::{FailureMode, FailurePolicy};
use crate::domain::{Check, Decision};
use crate::metrics::Metrics;
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
    deny_cache: Option<DenyCache>,
    /// One of UNKNOWN, UP, DOWN: only real transitions are logged, and the
    /// first probe at startup is not one.
    health: AtomicU8,
}

const UNKNOWN: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

impl Limiter {
    /// Starts with the store's health unknown (answered like down); the first
    /// [`probe`](Self::probe) settles it. Call `probe` once before serving.
    pub fn new(store: Arc<dyn Store>, policy: FailurePolicy, metrics: Arc<Metrics>) -> Limiter {
        Limiter {
            store,
            policy,
            metrics,
            deny_cache: None,
            health: AtomicU8::new(UNKNOWN),
        }
    }

    /// Answers repeated denials locally (see [`crate::deny_cache`]).
    pub fn with_deny_cache(mut self, cache: DenyCache) -> Limiter {
        self.deny_cache = Some(cache);
        self
    }

    pub fn store_name(&self) -> &'static str {
        self.store.name()
    }

    /// Keys the store holds, if it counts them (the embedded store).
    pub fn store_key_count(&self) -> Option<usize> {
        self.store.key_count()
    }

    /// Whether checks currently reach the store.
    pub fn is_ready(&self) -> bool {
        self.health.load(Ordering::Acquire) == UP
    }

    pub async fn check(&self, check: &Check) -> Result<Decision, LimiterError> {
        let cache = self.deny_cache.as_ref();
        // A recorded denial is the store's own answer, even while the store
        // is unreachable: nothing can have been allowed since.
        let decision = if let Some(outcome) = cache.and_then(|c| c.lookup(check)) {
            self.metrics.deny_cache_hits.inc();
            Decision::from_outcome(check, outcome)
        } else if self.is_ready() {
            let asked_at = cache.map(DenyCache::now_us);
            let started = Instant::now();
            let result = self.store.check(check).await;
            self.metrics
                .backend_duration
                .observe(started.elapsed().as_secs_f64());
            match result {
                Ok(outcome) => {
                    if let (Some(cache), Some(asked_at)) = (cache, asked_at) {
                        cache.record(check, asked_at, &outcome);
                    }
                    Decision::from_outcome(check, outcome)
                }
                Err(error) => {
                    self.metrics.record_backend_error(error.kind());
                    if !error.is_transient() {
                        tracing::error!(%error, "store error");
                        return Err(error.into());
                    }
                    if error.store_is_down() {
                        self.mark_down(&error);
                    }
                    self.degraded(check)
                }
            }
        } else {
            self.degraded(check)
        };
        self.metrics
            .record_decision(check.rule.algorithm, decision.allowed);
        Ok(decision)
    }

    fn degraded(&self, check: &Check) -> Decision {
        self.metrics.record_degraded(self.policy.mode);
        self.policy.decide(check)
    }

    /// Pings the store and records whether it answers. Logs transitions only.
    pub async fn probe(&self) {
        match self.store.ping().await {
            Ok(()) => {
                if self.health.swap(UP, Ordering::AcqRel) == DOWN {
                    info!(
                        store = self.store.name(),
                        "{} back: checks reach it again",
                        self.store.name()
                    );
                }
                self.metrics.store_up.set(1);
            }
            Err(error) => {
                self.metrics.record_backend_error(error.kind());
                self.mark_down(&error);
            }
        }
    }

    fn mark_down(&self, error: &StoreError) {
        self.metrics.store_up.set(0);
        if self.health.swap(DOWN, Ordering::AcqRel) != DOWN {
            warn!(
                store = self.store.name(),
                %error,
                "{} unreachable: failing {}",
                self.store.name(),
                self.policy.mode.as_str()
            );
        }
    }

    /// Probes every `interval` while the store is down (and every 4 intervals
    /// while it is up, so readiness notices an idle outage).
    pub fn spawn_prober(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let limiter = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut idle_rounds = 0u32;
            loop {
                tokio::time::sleep(interval).await;
                let Some(limiter) = limiter.upgrade() else {
                    return;
                };
                idle_rounds += 1;
                if !limiter.is_ready() || idle_rounds >= 4 {
                    idle_rounds = 0;
                    limiter.probe().await;
                }
            }
        })
    }
}
