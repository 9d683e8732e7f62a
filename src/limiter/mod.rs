//! The limiter: runs a check on the store and, when the store cannot answer,
//! applies the failure policy. The one place fail-open/closed is decided.
//!
//! Everything goes through one pipeline ([`Limiter::run`], `pipeline.rs`):
//! a list of [`Request`]s (a single check is a list of one), each through
//! the stages in order (deny cache, leasing, breaker, store call, degraded
//! answer, waiting, invalidation, observation), each stage a function over
//! the list that `request.rs`'s `Route` says which requests it applies to.
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

pub mod breaker;
pub mod deny_cache;
pub mod domains;
mod fallback;
mod health;
mod invalidate;
pub mod lease;
mod lease_guard;
mod leasing;
mod pipeline;
mod request;
mod stages;
mod tenants;
pub mod top;
pub mod wait;

/// The tests' shorthand for the pipeline, shared with the integration
/// tests.
#[cfg(test)]
#[path = "../../tests/support/limiter_ext.rs"]
pub(crate) mod testing;

use std::sync::Arc;

use self::breaker::BreakerConfig;
use self::deny_cache::DenyCache;
use self::domains::Breakers;
pub use self::health::NotReady;
pub use self::request::{Answer, Request};
use self::top::Top;
use self::wait::Waiting;
use self::wait::queue::Waiters;
use self::wait::timer::{Timer, TokioTimer};
pub use crate::domain::failure::{FailureMode, FailurePolicy};
use crate::domain::{Clock, MonotonicClock};
use crate::metrics::Metrics;
use crate::store::memory::MemoryStore;
use crate::store::{Store, StoreError, StoreStats};
use crate::tasks::Tasks;

/// A store error the failure policy must not hide (a script error, a key of
/// the wrong type): answered with a 500 so it is noticed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct LimiterError(#[from] pub StoreError);

/// The decision pipeline (`pipeline.rs`) and what its stages keep.
pub struct Limiter {
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    /// Stage 1: recorded denials (see [`deny_cache`]); `None`: none kept.
    deny_cache: Option<Arc<DenyCache>>,
    /// Stage 2: hot keys' leased chunks (see [`lease`]); `None`: nothing
    /// leases.
    leases: Option<Arc<lease::Leases>>,
    /// Stage 3: one breaker per failure domain.
    breakers: Breakers,
    /// Stage 5: the failure policy, and the local store of `Local`.
    fallback: Fallback,
    /// Stage 6: checks waiting for their `retry_after` (see [`wait`]).
    waiting: Waiting,
    /// Stage 8: who is being checked and denied (see [`top`]); `None`:
    /// not counted.
    top: Option<Arc<Top>>,
    /// Runtime blocks and exemptions (`tenants.rs`, stage 0).
    tenants: Option<Arc<crate::tenants::Tenants>>,
    /// What the prober and the checks saw of the store (`health.rs`).
    health: health::Health,
    /// Where the limiter's own tasks run (a lease's release, a waiter's
    /// try, the prober, the sweeper), so shutdown can wait for them.
    tasks: Tasks,
}

/// Stage 5's: the answer when the store cannot give one.
struct Fallback {
    policy: FailurePolicy,
    /// The local store of [`FailureMode::Local`]; without one, `Local`
    /// answers as `Open`.
    local: Option<MemoryStore>,
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
                metrics.waiting.waiters.clone(),
                metrics.waiting.rejected.clone(),
            )),
            timer: Arc::new(TokioTimer::default()),
        };
        Limiter {
            store,
            metrics,
            deny_cache: None,
            leases: None,
            breakers,
            fallback: Fallback {
                policy,
                local: None,
            },
            waiting,
            top: None,
            tenants: None,
            health: health::Health::default(),
            tasks: Tasks::new(),
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
        self.fallback.local = Some(store);
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
                self.metrics.waiting.waiters.clone(),
                self.metrics.waiting.rejected.clone(),
            )),
            timer,
        };
        self
    }

    /// Spawns its tasks on `tasks` (the service's, so shutdown waits for
    /// them; by default its own).
    pub fn with_tasks(mut self, tasks: Tasks) -> Limiter {
        self.tasks = tasks;
        self
    }

    /// Counts every answered check in `top`'s sketches.
    /// Blocks and exemptions set at runtime apply to every check.
    pub fn with_tenants(mut self, tenants: Arc<crate::tenants::Tenants>) -> Limiter {
        self.tenants = Some(tenants);
        self
    }

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

    /// What the store counts of itself (keys, leases, evictions, ...).
    pub fn store_stats(&self) -> StoreStats {
        self.store.stats()
    }
}
