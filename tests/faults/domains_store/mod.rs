//! The embedded store split into failure domains that fail on demand, and
//! a limiter over it on a manual clock: shared by the breaker tests.
#![allow(dead_code)]

use crate::support::LimiterExt;
use ratekeeper::domain::Window;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ratekeeper::domain::{Algorithm, Check, ManualClock, Outcome, Rule};
use ratekeeper::limiter::breaker::BreakerConfig;
use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
use ratekeeper::metrics::Metrics;
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::{Applied, Op, OpKind, Store, StoreError};
/// The embedded store, split into failure domains by key prefix (`"d3:x"` is
/// domain 3), any of which can be made to fail with a chosen error.
pub struct Domains {
    inner: MemoryStore,
    down: Mutex<HashSet<u64>>,
    error: Mutex<StoreError>,
    pub pings_fail: AtomicBool,
    /// Checks that reached the store, per domain 1 (what a test watches).
    pub calls_on_1: AtomicU64,
}

impl Domains {
    pub fn new(error: StoreError) -> Arc<Domains> {
        Arc::new(Domains {
            inner: MemoryStore::new(Arc::new(ManualClock::new(0)), 10_000),
            down: Mutex::new(HashSet::new()),
            error: Mutex::new(error),
            pings_fail: false.into(),
            calls_on_1: 0.into(),
        })
    }

    pub fn set_error(&self, error: StoreError) {
        *self.error.lock().unwrap() = error;
    }

    pub fn set_down(&self, domain: u64, down: bool) {
        let mut set = self.down.lock().unwrap();
        if down {
            set.insert(domain);
        } else {
            set.remove(&domain);
        }
    }
}

impl Domains {
    /// A check alone, as [`Store::apply`] below sends each.
    async fn check_alone(&self, check: &Check) -> Result<Vec<Outcome>, StoreError> {
        if self.failure_domain(check) == 1 {
            self.calls_on_1.fetch_add(1, Ordering::SeqCst);
        }
        if self
            .down
            .lock()
            .unwrap()
            .contains(&self.failure_domain(check))
        {
            return Err(self.error.lock().unwrap().clone());
        }
        self.inner.check_now(check)
    }
}

#[async_trait]
impl Store for Domains {
    /// Checks through [`check_alone`](Self::check_alone); the rest as the
    /// wrapped store does.
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            answers.push(match op.kind {
                OpKind::Check => self.check_alone(op.check).await.map(Applied::unshared),
                _ => self.inner.apply_now(op),
            });
        }
        answers
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if self.pings_fail.load(Ordering::SeqCst) {
            return Err(self.error.lock().unwrap().clone());
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn failure_domain(&self, check: &Check) -> u64 {
        check.key[1..check.key.find(':').unwrap()].parse().unwrap()
    }
}

pub fn check_on(key: &str) -> Check {
    Check::single(
        key,
        Rule {
            algorithm: Algorithm::FixedWindow,
            limit: 1_000,
            window: Window::Length(60_000_000),
            burst: 1_000,
        },
        1,
    )
}

pub const MS: u64 = 1_000;

pub async fn manual_limiter(
    store: Arc<Domains>,
    clock: &ManualClock,
) -> (Arc<Limiter>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let limiter = Arc::new(Limiter::new(store, policy, metrics.clone()).with_breaker(
        BreakerConfig {
            consecutive_failures: 5,
            failure_ratio: 0.5,
            interval: Duration::from_secs(1),
            min_calls: 20,
            open_for: Duration::from_secs(1),
            trial_interval: Duration::from_millis(250),
        },
        Arc::new(clock.clone()),
    ));
    limiter.probe().await;
    (limiter, metrics)
}

/// Whether the store answered (not degraded).
pub async fn reached(limiter: &Arc<Limiter>, key: &str) -> bool {
    !limiter.check(&check_on(key)).await.unwrap().degraded
}
