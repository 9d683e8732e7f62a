//! The table of slots: its bound, and refills that end without an answer.

use crate::limiter::testing::LimiterExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::domain::{Algorithm, Check, LeaseMode, Rule};

fn check(key: &str) -> Check {
    let rule = Rule::with_length(Algorithm::FixedWindow, 1_000_000, 60_000_000, 1_000_000);
    let mut check = Check::single(key, rule, 1);
    check.policy = Some("p".into());
    check.lease = Some(LeaseMode {
        max_units: 100,
        ttl_us: 1_000_000,
        hot_rate: 1,
    });
    check
}

fn leases(max_slots: usize) -> (Leases, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let leases = Leases::new(max_slots, metrics.clone());
    leases.subscribed(true);
    (leases, metrics)
}

#[test]
fn a_full_table_makes_room_from_a_key_that_went_quiet() {
    let (leases, metrics) = leases(1);
    let t0 = Instant::now();
    assert_eq!(leases.take(&check("a"), t0).0, Take::Direct);
    // Room is made within a shard: a key that shares "a"'s.
    let b = (0..)
        .map(|i| format!("b{i}"))
        .find(|b| std::ptr::eq(leases.shard(b), leases.shard("a")))
        .unwrap();
    // "a" was checked just now: it may be measured hot, so it stays.
    leases.take(&check(&b), t0);
    assert_eq!(metrics.leases.table_full.get(), 1, "counted when full");
    assert_eq!(leases.slots.load(Ordering::Relaxed), 1);
    // Quiet for a rate period, holding nothing: it gives way.
    leases.take(&check(&b), t0 + slot::RATE_PERIOD);
    assert_eq!(metrics.leases.table_full.get(), 1);
    assert_eq!(
        leases.slots.load(Ordering::Relaxed),
        1,
        "never past the cap"
    );
    assert_eq!(metrics.leases.keys.get(), 1);
    let shard = leases.shard("a").lock().unwrap();
    assert!(shard.contains_key(&b) && !shard.contains_key("a"));
}

#[test]
fn a_refill_whose_caller_went_frees_the_key_to_reserve_again() {
    let (leases, metrics) = leases(10);
    let c = check("hot");
    let t0 = Instant::now();
    leases.take(&c, t0);
    let left = crate::domain::Outcome {
        allowed: true,
        remaining: 10_000,
        retry_after_us: 0,
        reset_after_us: 1,
    };
    leases.observed(&c, &[left]);
    let t = t0 + slot::RATE_PERIOD + Duration::from_millis(1);
    let (take, generation) = leases.take(&c, t);
    assert!(matches!(take, Take::Reserve(_)), "{take:?}");
    assert_eq!(leases.take(&c, t).0, Take::Direct, "one refill at a time");
    leases.refill_abandoned(&c, generation);
    assert!(matches!(leases.take(&c, t).0, Take::Reserve(_)));
    assert_eq!(metrics.leases.failed.get(), 1);
}

/// Answers checks of cost 1 at once, and never answers a larger one (a
/// reservation): the call a client hangs up on.
struct StuckOnReservations;

#[async_trait::async_trait]
impl crate::store::Store for StuckOnReservations {
    async fn apply(
        &self,
        ops: &[crate::store::Op<'_>],
    ) -> Vec<Result<crate::store::Applied, crate::store::StoreError>> {
        if ops.iter().any(|op| op.check.cost > 1) {
            std::future::pending::<()>().await;
        }
        let allowed = crate::domain::Outcome {
            allowed: true,
            remaining: 100_000,
            retry_after_us: 0,
            reset_after_us: 1_000_000,
        };
        ops.iter()
            .map(|op| {
                let outcomes = vec![allowed; op.check.limits.len()];
                Ok(crate::store::Applied::unshared(outcomes).at(1))
            })
            .collect()
    }

    async fn ping(&self) -> Result<(), crate::store::StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "stuck"
    }
}

#[tokio::test]
async fn a_reservation_dropped_mid_call_does_not_stop_the_key_leasing() {
    use crate::limiter::{FailureMode, FailurePolicy, Limiter};
    let metrics = Arc::new(Metrics::new());
    let leases = Leases::new(10, metrics.clone());
    leases.subscribed(true);
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let limiter = Arc::new(
        Limiter::new(Arc::new(StuckOnReservations), policy, metrics.clone()).with_leases(leases),
    );
    let c = check("hot");
    // Hot after a rate period: the next check reserves, and hangs.
    limiter.check(&c).await.unwrap();
    tokio::time::sleep(slot::RATE_PERIOD).await;
    for attempt in 1..=2 {
        let hung = tokio::time::timeout(Duration::from_millis(20), limiter.check(&c)).await;
        assert!(hung.is_err(), "the reservation hangs");
        assert_eq!(
            metrics.leases.failed.get(),
            attempt,
            "the dropped refill ended, so the next check reserved again"
        );
    }
}
