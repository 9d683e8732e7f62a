//! gcra under a changed rule: the units used are kept, a huge debt capped.

use super::super::test_support::*;
use super::super::*;
use crate::domain::MAX_WINDOW_US;

const DAY: u64 = 86_400 * SEC;

fn gcra(limit: u64, window: u64, burst: u64) -> Rule {
    Rule {
        burst,
        ..rule(Algorithm::Gcra, limit, window)
    }
}

/// 8 of 10/day spent: 5/day owes 3 and repays them at its own rate
/// (not at the old, faster one), 20/day has 12 left.
#[test]
fn a_changed_limit_keeps_the_units_used() {
    let mut s = State::fresh(Algorithm::Gcra);
    let t = 1_000 * DAY;
    assert!(s.apply(&gcra(10, DAY, 10), t, 8).allowed);
    let lowered = gcra(5, DAY, 5);
    let denied = s.apply(&lowered, t, 1);
    assert_eq!((denied.allowed, denied.remaining), (false, 0));
    // Three owed and one to spend, a fifth of a day each.
    assert_eq!(denied.retry_after_us, 4 * DAY / 5);
    assert_retry_exact(&s, &lowered, t, 1, denied);
    let raised = s.apply(&gcra(20, DAY, 20), t, 0);
    assert_eq!((raised.allowed, raised.remaining), (true, 12));
    // Back to the first rule: still 8 used.
    assert_eq!(s.apply(&gcra(10, DAY, 10), t, 0).remaining, 2);
}

/// The units are counted when written, so a later read at another rate
/// keeps the refill earned since at that rate, like the token bucket.
#[test]
fn the_units_drain_at_the_new_rate_from_when_they_were_counted() {
    let mut s = State::fresh(Algorithm::Gcra);
    let t = 1_000 * SEC;
    assert!(s.apply(&gcra(10, SEC, 10), t, 10).allowed);
    // 10 used at 10/s; at 5/s one comes back every 200 ms from t.
    let slower = gcra(5, SEC, 5);
    for (at, remaining) in [(0, 0), (1_199, 0), (1_200, 1), (1_400, 2), (2_000, 5)] {
        let o = s.clone().apply(&slower, t + at * MS, 0);
        assert_eq!(o.remaining, remaining, "at +{at}ms");
    }
    let o = s.apply(&slower, t + 1_300 * MS, 1);
    assert!(o.allowed);
    // Written back at 5/s: the 100 ms earned toward the next unit stay.
    assert_eq!(s.apply(&slower, t + 1_400 * MS, 0).remaining, 1);
}

#[test]
fn a_changed_burst_keeps_the_units_used() {
    let mut s = State::fresh(Algorithm::Gcra);
    assert!(s.apply(&gcra(10, SEC, 10), 0, 8).allowed);
    let smaller = s.apply(&gcra(10, SEC, 5), 0, 1);
    assert_eq!((smaller.allowed, smaller.remaining), (false, 0));
    assert_eq!(s.apply(&gcra(10, SEC, 20), 0, 0).remaining, 12);
}

/// A limit lowered far below its usage owes at most 366 days of refill
/// beyond its burst, so nothing overflows.
#[test]
fn a_huge_debt_is_capped() {
    let fast = gcra(1_000_000_000_000, MAX_WINDOW_US, 1_000_000_000_000);
    let mut s = State::fresh(Algorithm::Gcra);
    assert!(s.apply(&fast, 0, fast.burst).allowed);
    let slow = gcra(1, MAX_WINDOW_US, 1);
    let denied = s.apply(&slow, 0, 1);
    assert_eq!((denied.allowed, denied.remaining), (false, 0));
    assert_eq!(denied.retry_after_us, 2 * MAX_WINDOW_US);
    assert_eq!(denied.reset_after_us, 2 * MAX_WINDOW_US);
    let mut bucket = State::fresh(Algorithm::TokenBucket);
    let tb = |r: &Rule| Rule {
        algorithm: Algorithm::TokenBucket,
        ..*r
    };
    bucket.apply(&tb(&fast), 0, fast.burst);
    assert_eq!(bucket.apply(&tb(&slow), 0, 1), denied);
}
