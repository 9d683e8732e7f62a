//! A list of checks tells the circuit breaker once per failure domain.

use crate::limiter::testing::LimiterExt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::domain::{Algorithm, Check, FailureMode, FailurePolicy, ManualClock, Rule};
use crate::limiter::Limiter;
use crate::limiter::breaker::BreakerConfig;
use crate::metrics::Metrics;
use crate::store::{Applied, Op, Store, StoreError};

/// Every call times out, as a Redis too slow for it would.
struct TimingOut;

#[async_trait]
impl Store for TimingOut {
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        vec![Err(StoreError::Timeout("too slow".into())); ops.len()]
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn name(&self) -> &'static str {
        "timing-out"
    }
}

#[tokio::test]
async fn a_failed_list_of_checks_is_one_failure_to_the_breaker() {
    let metrics = Arc::new(Metrics::new());
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    // Opens on half of at least 20 calls failing, or 5 in a row.
    let limiter = Arc::new(
        Limiter::new(Arc::new(TimingOut), policy, metrics.clone()).with_breaker(
            BreakerConfig::default(),
            Arc::new(ManualClock::new(1_700_000_000_000_000)),
        ),
    );
    let rule = Rule::with_length(Algorithm::FixedWindow, 10, 60_000_000, 10);
    let checks: Vec<Check> = (0..30)
        .map(|i| Check::single(format!("k{i}"), rule, 1))
        .collect();
    let answers = limiter.check_many(&checks).await;
    assert!(answers.iter().all(|a| a.as_ref().is_ok_and(|d| d.degraded)));
    assert_eq!(
        metrics.breakers.opened.get(),
        0,
        "30 failed checks of one call"
    );
    // Four more failed calls make five in a row: now it opens.
    for _ in 0..4 {
        limiter.check_many(&checks[..2]).await;
    }
    assert_eq!(metrics.breakers.opened.get(), 1);
}

/// The embedded store, answering each call only `delay` after applying
/// it: a Redis reply still on its way when the caller goes.
struct SlowReply {
    store: crate::store::memory::MemoryStore,
    delay: Duration,
}

#[async_trait]
impl Store for SlowReply {
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        let answers = self.store.apply(ops).await;
        tokio::time::sleep(self.delay).await;
        answers
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn name(&self) -> &'static str {
        "slow-reply"
    }
}

#[tokio::test]
async fn a_lease_whose_caller_went_away_is_released() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
    let store = crate::store::memory::MemoryStore::new(clock, 1_000);
    let slow = Arc::new(SlowReply {
        store: store.clone(),
        delay: Duration::from_millis(200),
    });
    let policy = FailurePolicy {
        mode: FailureMode::Closed,
        closed_retry_after: Duration::from_secs(1),
    };
    let limiter = Arc::new(Limiter::new(slow, policy, Arc::new(Metrics::new())));
    let rule = Rule::with_length(Algorithm::Concurrency, 1, 3_600_000_000, 1);
    let check = Check::single("k", rule, 1);
    let look = Check::single("k", rule, 0);
    // The caller hangs up while the reply is on its way: the store took
    // the lease, and nobody has its id.
    let gone = tokio::time::timeout(Duration::from_millis(50), limiter.check(&check)).await;
    assert!(gone.is_err(), "cancelled before the reply");
    assert_eq!(store.check_now(&look).unwrap()[0].remaining, 0, "taken");
    // Its guard released it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.check_now(&look).unwrap()[0].remaining, 1, "released");
    // A delivered answer keeps its lease.
    let decision = limiter.check(&check).await.unwrap();
    assert!(decision.lease.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.check_now(&look).unwrap()[0].remaining, 0, "held");
}

/// The embedded store behind a Redis that can freeze: while frozen, every
/// call times out, the acquires among them are kept to run on thaw (as a
/// frozen Redis runs what was written to it when it wakes), and the
/// releases are lost (their connection replaced before Redis read them).
struct Freezing {
    store: crate::store::memory::MemoryStore,
    frozen: std::sync::atomic::AtomicBool,
    queued: std::sync::Mutex<Vec<(Check, crate::domain::LeaseId)>>,
}

impl Freezing {
    async fn thaw(&self) {
        self.frozen
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let queued = std::mem::take(&mut *self.queued.lock().unwrap());
        for (check, lease) in queued {
            self.store.apply(&[Op::acquire(&check, &lease)]).await;
        }
    }
}

#[async_trait]
impl Store for Freezing {
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        if !self.frozen.load(std::sync::atomic::Ordering::SeqCst) {
            return self.store.apply(ops).await;
        }
        for op in ops {
            if let (crate::store::OpKind::Check, Some(lease)) = (op.kind, op.lease) {
                let held = (op.check.clone(), lease.clone());
                self.queued.lock().unwrap().push(held);
            }
        }
        vec![Err(StoreError::Timeout("frozen".into())); ops.len()]
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn name(&self) -> &'static str {
        "freezing"
    }
}

#[tokio::test]
async fn an_acquire_that_runs_after_a_long_freeze_is_released_once_the_store_answers() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
    let store = crate::store::memory::MemoryStore::new(clock, 1_000);
    let freezing = Arc::new(Freezing {
        store: store.clone(),
        frozen: true.into(),
        queued: Default::default(),
    });
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let limiter = Arc::new(Limiter::new(
        freezing.clone(),
        policy,
        Arc::new(Metrics::new()),
    ));
    let rule = Rule::with_length(Algorithm::Concurrency, 1, 3_600_000_000, 1);
    let check = Check::single("k", rule, 1);
    let look = Check::single("k", rule, 0);
    let decision = limiter.check(&check).await.unwrap();
    assert!(
        decision.degraded && decision.lease.is_none(),
        "{decision:?}"
    );
    // Frozen for longer than the old guard's two tries, a second apart.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    freezing.thaw().await;
    assert_eq!(
        store.check_now(&look).unwrap()[0].remaining,
        0,
        "the late acquire ran"
    );
    // The next try is at most RELEASE_BACKOFF_MAX (2 s) away.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(
        store.check_now(&look).unwrap()[0].remaining,
        1,
        "released once the store answered again, not held for the lease's hour"
    );
}
