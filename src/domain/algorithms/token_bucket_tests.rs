//! token_bucket on a controlled clock, apart from the algorithm so that its file
//! imports nothing of the shared test support (which imports every algorithm).

use super::super::test_support::*;
use super::super::*;

fn tb(limit: u64, window: u64, burst: u64) -> Rule {
    Rule {
        burst,
        ..rule(Algorithm::TokenBucket, limit, window)
    }
}

#[test]
fn spends_the_burst_then_refills_at_the_rate() {
    // 10 per second = one token per 100 ms, bucket of 3.
    let r = tb(10, SEC, 3);
    let mut s = State::fresh(Algorithm::TokenBucket);
    let t = 1_000 * SEC;
    for left in [2, 1, 0] {
        assert_eq!(s.apply(&r, t, 1).remaining, left);
    }
    let denied = s.apply(&r, t + 30 * MS, 1);
    assert_eq!(denied.retry_after_us, 70 * MS);
    assert_eq!(denied.reset_after_us, 270 * MS);
    assert_retry_exact(&s, &r, t + 30 * MS, 1, denied);
    let denied3 = s.apply(&r, t + 30 * MS, 3);
    assert_eq!(denied3.retry_after_us, 270 * MS);
    assert_retry_exact(&s, &r, t + 30 * MS, 3, denied3);
}

#[test]
fn never_holds_more_than_the_burst() {
    let r = tb(10, SEC, 3);
    let mut s = State::fresh(Algorithm::TokenBucket);
    s.apply(&r, 0, 3);
    let o = s.apply(&r, 3_600 * SEC, 0);
    assert_eq!((o.remaining, o.reset_after_us), (3, 0));
}

#[test]
fn partial_intervals_are_kept_not_lost() {
    let r = tb(10, SEC, 1);
    let mut s = State::fresh(Algorithm::TokenBucket);
    s.apply(&r, 0, 1);
    // Checking at 60 ms earns nothing but must not restart the 100 ms.
    assert!(!s.apply(&r, 60 * MS, 1).allowed);
    assert!(s.apply(&r, 100 * MS, 1).allowed);
}

#[test]
fn cost_zero_is_allowed_iff_a_token_is_left() {
    let r = tb(1, SEC, 2);
    let mut s = State::fresh(Algorithm::TokenBucket);
    assert!(s.apply(&r, 0, 2).allowed);
    let probe = s.apply(&r, 0, 0);
    assert!(!probe.allowed);
    assert_eq!(probe.retry_after_us, SEC);
    assert_retry_exact(&s, &r, 0, 0, probe);
}
