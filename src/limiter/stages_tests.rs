//! A list of checks tells the circuit breaker once per failure domain.

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
    let limiter = Limiter::new(Arc::new(TimingOut), policy, metrics.clone()).with_breaker(
        BreakerConfig::default(),
        Arc::new(ManualClock::new(1_700_000_000_000_000)),
    );
    let rule = Rule::with_length(Algorithm::FixedWindow, 10, 60_000_000, 10);
    let checks: Vec<Check> = (0..30)
        .map(|i| Check::single(format!("k{i}"), rule, 1))
        .collect();
    let answers = limiter.check_many(&checks).await;
    assert!(answers.iter().all(|a| a.as_ref().is_ok_and(|d| d.degraded)));
    assert_eq!(
        metrics.breaker_opened.get(),
        0,
        "30 failed checks of one call"
    );
    // Four more failed calls make five in a row: now it opens.
    for _ in 0..4 {
        limiter.check_many(&checks[..2]).await;
    }
    assert_eq!(metrics.breaker_opened.get(), 1);
}
