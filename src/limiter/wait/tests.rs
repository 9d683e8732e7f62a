//! Waiting checks on a manual clock: the embedded store and the waiters'
//! sleeps follow one [`ManualClock`], moved by the test.

use crate::domain::Window;
use crate::limiter::testing::LimiterExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::timer::ManualTimer;
use crate::domain::{Algorithm, Check, FailureMode, FailurePolicy, ManualClock, Rule};
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::store::memory::MemoryStore;

pub(super) struct Rig {
    pub limiter: Arc<Limiter>,
    pub timer: ManualTimer,
    pub metrics: Arc<Metrics>,
}

pub(super) fn rig(max_waiters: usize) -> Rig {
    rig_with(max_waiters, max_waiters)
}

pub(super) fn rig_with(max_waiters: usize, max_per_key: usize) -> Rig {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::new(Arc::new(clock.clone()), 1_000);
    let metrics = Arc::new(Metrics::new());
    let timer = ManualTimer::new(clock);
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let limiter = Limiter::new(Arc::new(store), policy, metrics.clone()).with_waiting(
        max_waiters,
        max_per_key,
        Arc::new(timer.clone()),
    );
    Rig {
        limiter: Arc::new(limiter),
        timer,
        metrics,
    }
}

impl Rig {
    /// Store calls so far (each is timed once).
    pub(super) fn store_calls(&self) -> u64 {
        self.metrics.store.duration.get_sample_count()
    }

    /// Moves time on by `ms` and lets every woken task run.
    pub(super) async fn advance_ms(&self, ms: u64) {
        self.timer.advance_us(ms * 1_000);
        settle().await;
    }
}

/// Lets spawned tasks run until they block again (the store answers
/// without I/O, so a few rounds of yielding are enough).
pub(super) async fn settle() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

/// 10 per second, one at a time: a unit frees up every 100 ms.
pub(super) fn bucket(key: &str) -> Check {
    let rule = Rule {
        algorithm: Algorithm::TokenBucket,
        limit: 10,
        window: Window::Length(1_000_000),
        burst: 1,
    };
    Check::single(key, rule, 1)
}

pub(super) const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_denied_check_waits_for_its_retry_and_is_allowed() {
    let rig = rig(10);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let limiter = rig.limiter.clone();
    let waiter = tokio::spawn(async move { limiter.check_waiting(&check, SECOND).await });
    settle().await;
    assert_eq!(rig.limiter.waiters(), 1);
    assert_eq!(rig.metrics.waiting.waiters.get(), 1);
    rig.advance_ms(99).await;
    assert!(!waiter.is_finished(), "not before its retry_after");
    rig.advance_ms(1).await;
    let waited = waiter.await.unwrap().unwrap();
    assert!(waited.decision.allowed);
    assert_eq!(waited.waited, Duration::from_millis(100));
    assert_eq!(rig.limiter.waiters(), 0);
    assert_eq!(rig.metrics.waiting.waiters.get(), 0);
    assert_eq!(rig.store_calls(), 3, "allowed, denied, allowed");
    // One request, one count, whatever its tries.
    let rendered = rig.metrics.render();
    assert!(!rendered.contains("decision=\"denied\""), "{rendered}");
    assert!(
        rendered.contains("decision=\"allowed\",limit=\"0\",policy=\"inline\"} 2"),
        "{rendered}"
    );
    assert_eq!(rig.metrics.waiting.duration.get_sample_count(), 1);
}

#[tokio::test]
async fn a_wait_too_short_for_the_retry_is_answered_at_once() {
    let rig = rig(10);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let waited = rig
        .limiter
        .check_waiting(&check, Duration::from_millis(99))
        .await
        .unwrap();
    assert!(!waited.decision.allowed);
    assert_eq!(waited.decision.retry_after_ms, 100);
    assert_eq!(waited.waited, Duration::ZERO);
    assert_eq!(rig.store_calls(), 2);
    assert_eq!(
        rig.metrics.waiting.duration.get_sample_count(),
        0,
        "never waited"
    );
}

#[tokio::test]
async fn waiters_on_one_key_get_one_freed_unit_each_in_arrival_order() {
    let rig = rig(100);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let calls_before = rig.store_calls();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let (limiter, check, order) = (rig.limiter.clone(), check.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let waited = limiter.check_waiting(&check, SECOND).await.unwrap();
            assert!(waited.decision.allowed, "waiter {i}");
            order.lock().unwrap().push((i, waited.waited.as_millis()));
        }));
        settle().await;
    }
    assert_eq!(rig.limiter.waiters(), 5);
    for step in 1..=5 {
        rig.advance_ms(100).await;
        assert_eq!(order.lock().unwrap().len(), step, "one unit, one waiter");
    }
    for task in tasks {
        task.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, [(0, 100), (1, 200), (2, 300), (3, 400), (4, 500)]);
    // The first waiter's denied try, then per waiter its allowed try and
    // (all but the last) the next head's denied try: 2 per granted waiter.
    assert_eq!(rig.store_calls() - calls_before, 10);
}

#[tokio::test]
async fn a_waiter_the_line_cannot_serve_in_time_is_answered_at_once_without_a_try() {
    let rig = rig(10);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let (limiter, first) = (rig.limiter.clone(), check.clone());
    let head = tokio::spawn(async move { limiter.check_waiting(&first, SECOND).await });
    settle().await;
    let calls = rig.store_calls();
    // Second in line: served at the earliest at 200 ms, past its 150.
    let short = rig
        .limiter
        .check_waiting(&check, Duration::from_millis(150))
        .await
        .unwrap();
    assert!(!short.decision.allowed);
    assert_eq!(short.waited, Duration::ZERO);
    assert_eq!(
        short.decision.retry_after_ms, 200,
        "when its turn would come"
    );
    assert_eq!(rig.store_calls(), calls, "the head's denial, no try");
    assert_eq!(rig.limiter.waiters(), 1);
    rig.advance_ms(100).await;
    assert!(head.await.unwrap().unwrap().decision.allowed);
}

#[tokio::test]
async fn a_waiter_in_line_leaves_once_the_heads_plan_cannot_serve_it_in_time() {
    let rig = rig(10);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let mut tasks = Vec::new();
    // The head (next try at 100 ms), one whose 250 ms cover its turn at
    // 200 ms, and one with time.
    for wait in [SECOND, Duration::from_millis(250), SECOND] {
        let (limiter, check) = (rig.limiter.clone(), check.clone());
        tasks.push(tokio::spawn(async move {
            limiter.check_waiting(&check, wait).await
        }));
        settle().await;
    }
    assert_eq!(rig.limiter.waiters(), 3);
    // At 100 ms someone else (another instance) takes the unit before the
    // head's try: the head plans 200 ms, so the second's turn is 300 ms.
    rig.timer.advance_us(100_000);
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    settle().await;
    assert!(tasks[1].is_finished(), "told to leave at once");
    let calls = rig.store_calls();
    let second = tasks.remove(1).await.unwrap().unwrap();
    assert!(!second.decision.allowed);
    assert_eq!(second.waited, Duration::from_millis(100));
    assert_eq!(second.decision.retry_after_ms, 200);
    assert_eq!(rig.store_calls(), calls);
    rig.advance_ms(100).await;
    rig.advance_ms(100).await;
    for task in tasks {
        assert!(task.await.unwrap().unwrap().decision.allowed);
    }
}

#[tokio::test]
async fn over_max_waiters_a_check_is_answered_at_once_and_counted() {
    let rig = rig(1);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let (limiter, first) = (rig.limiter.clone(), check.clone());
    let waiter = tokio::spawn(async move { limiter.check_waiting(&first, SECOND).await });
    settle().await;
    let other = bucket("other");
    assert!(rig.limiter.check(&other).await.unwrap().allowed);
    for check in [&check, &other] {
        let waited = rig.limiter.check_waiting(check, SECOND).await.unwrap();
        assert!(!waited.decision.allowed);
        assert_eq!(waited.waited, Duration::ZERO);
    }
    assert_eq!(rig.metrics.waiting.rejected.get(), 2);
    rig.advance_ms(100).await;
    assert!(waiter.await.unwrap().unwrap().decision.allowed);
    assert_eq!(rig.limiter.waiters(), 0);
}

#[tokio::test]
async fn a_dropped_waiter_leaves_the_line_and_spends_nothing() {
    let rig = rig(10);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (limiter, check) = (rig.limiter.clone(), check.clone());
        tasks.push(tokio::spawn(async move {
            limiter.check_waiting(&check, SECOND).await
        }));
        settle().await;
    }
    // The head goes away mid-sleep: the next in line takes over.
    tasks[0].abort();
    settle().await;
    assert_eq!(rig.limiter.waiters(), 1);
    rig.advance_ms(100).await;
    let second = tasks.pop().unwrap().await.unwrap().unwrap();
    assert!(second.decision.allowed);
    assert_eq!(second.decision.remaining, 0);
    // Nobody waits now; the dropped one never spent: the next unit is there
    // at 200 ms for anyone.
    assert_eq!(rig.limiter.waiters(), 0);
    rig.advance_ms(100).await;
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
}

#[tokio::test]
async fn shadow_checks_and_zero_waits_never_wait() {
    let rig = rig(10);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let zero = rig
        .limiter
        .check_waiting(&check, Duration::ZERO)
        .await
        .unwrap();
    assert!(!zero.decision.allowed);
    let shadow = Check {
        shadow: true,
        ..check.clone()
    };
    let answered = rig.limiter.check_waiting(&shadow, SECOND).await.unwrap();
    assert!(answered.decision.allowed && answered.decision.shadow);
    assert_eq!(answered.waited, Duration::ZERO);
    assert_eq!(rig.limiter.waiters(), 0);
}
