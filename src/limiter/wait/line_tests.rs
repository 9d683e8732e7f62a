//! The line's bounds and wake-ups on a manual clock: the per-key cap,
//! store load with many waiters, resets, smaller costs, shutdown.

use crate::domain::Window;
use crate::limiter::testing::LimiterExt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use super::tests::{SECOND, bucket, rig, rig_with, settle};
use crate::domain::{Algorithm, Check, Rule};

#[tokio::test]
async fn a_hundred_waiters_on_ten_per_second_cost_under_three_store_calls_per_grant() {
    let rig = rig(10_000);
    let check = bucket("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let calls_before = rig.store_calls();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (limiter, check) = (rig.limiter.clone(), check.clone());
        tasks.push(tokio::spawn(async move {
            limiter.check_waiting(&check, SECOND).await
        }));
    }
    settle().await;
    // Only those the line can serve within 1 s stay: one unit per 100 ms.
    assert_eq!(rig.limiter.waiters(), 10);
    for _ in 0..10 {
        rig.advance_ms(100).await;
    }
    let mut granted = 0;
    for task in tasks {
        granted += u64::from(task.await.unwrap().unwrap().decision.allowed);
    }
    assert_eq!(granted, 10);
    let calls = rig.store_calls() - calls_before;
    assert!(
        calls < 3 * granted,
        "{calls} store calls for {granted} grants"
    );
}

#[tokio::test]
async fn beyond_max_waiters_per_key_a_check_is_answered_at_once_and_counted() {
    let rig = rig_with(100, 2);
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
    let third = rig.limiter.check_waiting(&check, SECOND).await.unwrap();
    assert!(!third.decision.allowed);
    assert_eq!(third.waited, Duration::ZERO);
    assert_eq!(rig.metrics.waiting.rejected.get(), 1);
    // Another key still has room.
    let other = bucket("other");
    assert!(rig.limiter.check(&other).await.unwrap().allowed);
    let (limiter, o) = (rig.limiter.clone(), other.clone());
    let other_waiter = tokio::spawn(async move { limiter.check_waiting(&o, SECOND).await });
    settle().await;
    assert_eq!(rig.limiter.waiters(), 3);
    rig.advance_ms(100).await;
    rig.advance_ms(100).await;
    for task in tasks {
        assert!(task.await.unwrap().unwrap().decision.allowed);
    }
    assert!(other_waiter.await.unwrap().unwrap().decision.allowed);
}

/// One per 10 s: a denied head sleeps 10 s.
fn slow(key: &str) -> Check {
    let rule = Rule {
        algorithm: Algorithm::TokenBucket,
        limit: 1,
        window: Window::Length(10_000_000),
        burst: 1,
    };
    Check::single(key, rule, 1)
}

#[tokio::test]
async fn a_reset_wakes_the_head_which_is_allowed_at_once() {
    let rig = rig(10);
    let check = slow("k");
    assert!(rig.limiter.check(&check).await.unwrap().allowed);
    let (limiter, c) = (rig.limiter.clone(), check.clone());
    let head =
        tokio::spawn(async move { limiter.check_waiting(&c, Duration::from_secs(60)).await });
    settle().await;
    assert_eq!(rig.limiter.waiters(), 1);
    rig.limiter.reset(&check).await.unwrap();
    settle().await;
    // The clock has not moved.
    assert!(head.is_finished(), "woken by the reset");
    let waited = head.await.unwrap().unwrap();
    assert!(waited.decision.allowed);
    assert_eq!(waited.waited, Duration::ZERO);
}

#[tokio::test]
async fn a_check_smaller_than_the_heads_asks_the_store_first() {
    let rig = rig(10);
    // 10 per second, bursts of 3: a cost-3 head waits 300 ms from empty.
    let rule = Rule {
        algorithm: Algorithm::TokenBucket,
        limit: 10,
        window: Window::Length(1_000_000),
        burst: 3,
    };
    let big = Check::single("k", rule, 3);
    let small = Check::single("k", rule, 1);
    assert!(rig.limiter.check(&big).await.unwrap().allowed);
    let (limiter, b) = (rig.limiter.clone(), big.clone());
    let head = tokio::spawn(async move { limiter.check_waiting(&b, SECOND).await });
    settle().await;
    rig.advance_ms(100).await;
    // One unit is there: the small check takes it rather than queue.
    let answered = rig.limiter.check_waiting(&small, SECOND).await.unwrap();
    assert!(answered.decision.allowed);
    assert_eq!(answered.waited, Duration::ZERO);
    // The head is served later, still in time.
    for _ in 0..4 {
        rig.advance_ms(100).await;
    }
    assert!(head.await.unwrap().unwrap().decision.allowed);
}

#[tokio::test]
async fn draining_answers_every_waiter_its_last_denial_at_once() {
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
    let calls = rig.store_calls();
    rig.limiter.stop_waiting();
    settle().await;
    for task in tasks {
        let waited = task.await.unwrap().unwrap();
        assert!(!waited.decision.allowed);
        assert_eq!(waited.waited, Duration::ZERO);
    }
    assert_eq!(rig.store_calls(), calls, "answered from the head's denial");
    assert_eq!(rig.limiter.waiters(), 0);
    // From now on nobody waits.
    let late = rig.limiter.check_waiting(&check, SECOND).await.unwrap();
    assert!(!late.decision.allowed);
    assert_eq!(late.waited, Duration::ZERO);
}

/// Polls `waiting` once, as a server would before the client hangs up.
fn poll_once<F: Future>(waiting: Pin<&mut F>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    waiting.poll(&mut cx).is_ready()
}

#[tokio::test]
async fn a_unit_allowed_to_a_waiter_that_hung_up_is_given_back() {
    // The answer arrives before the hang-up (given back when the unread
    // answer is dropped), or after it (given back by the try's task).
    for answered_first in [true, false] {
        let rig = rig(10);
        let check = bucket("k");
        assert!(rig.limiter.check(&check).await.unwrap().allowed);
        // Boxed, so that dropping it drops the future itself.
        let mut waiting = Box::pin(rig.limiter.check_waiting(&check, SECOND));
        assert!(!poll_once(waiting.as_mut()), "in line");
        rig.timer.advance_us(100_000);
        let calls = rig.store_calls();
        assert!(!poll_once(waiting.as_mut()), "its retry is sent");
        if answered_first {
            settle().await;
            assert_eq!(rig.store_calls(), calls + 1, "and answered");
        }
        // The client hangs up: the request's future is dropped.
        drop(waiting);
        settle().await;
        assert_eq!(rig.store_calls(), calls + 2, "the try and its refund");
        let given_back = rig.limiter.check(&check).await.unwrap();
        assert!(given_back.allowed, "answered first: {answered_first}");
        assert_eq!(rig.limiter.waiters(), 0);
    }
}
