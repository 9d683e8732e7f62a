//! gcra on a controlled clock, apart from the algorithm so that its file
//! imports nothing of the shared test support (which imports every algorithm).

use super::super::test_support::*;
use super::super::*;

fn gcra(limit: u64, window: u64, burst: u64) -> Rule {
    Rule {
        burst,
        ..rule(Algorithm::Gcra, limit, window)
    }
}

#[test]
fn admits_the_burst_then_one_per_interval() {
    let r = gcra(10, SEC, 3);
    let mut s = State::fresh(Algorithm::Gcra);
    let t = 1_000 * SEC;
    for left in [2, 1, 0] {
        assert_eq!(s.apply(&r, t, 1).remaining, left);
    }
    let denied = s.apply(&r, t + 30 * MS, 1);
    assert_eq!(
        (denied.retry_after_us, denied.reset_after_us),
        (70 * MS, 270 * MS)
    );
    assert_retry_exact(&s, &r, t + 30 * MS, 1, denied);
    let denied2 = s.apply(&r, t + 30 * MS, 2);
    assert_eq!(denied2.retry_after_us, 170 * MS);
    assert_retry_exact(&s, &r, t + 30 * MS, 2, denied2);
}

#[test]
fn uneven_interval_still_admits_the_whole_burst() {
    // 3 per second: 333_333 us per unit; integers mean no float drift.
    let r = gcra(3, SEC, 3);
    let mut s = State::fresh(Algorithm::Gcra);
    assert_eq!((0..3).filter(|_| s.apply(&r, 7, 1).allowed).count(), 3);
    assert!(!s.apply(&r, 7, 1).allowed);
}

#[test]
fn cost_zero_and_expiry() {
    let r = gcra(2, SEC, 2);
    let mut s = State::fresh(Algorithm::Gcra);
    let o = s.apply(&r, 0, 0);
    assert_eq!((o.allowed, o.remaining, o.reset_after_us), (true, 2, 0));
    assert_eq!(s.apply(&r, 0, 2).reset_after_us, SEC);
    let probe = s.apply(&r, 0, 0);
    assert!(!probe.allowed);
    assert_retry_exact(&s, &r, 0, 0, probe);
    let o = s.apply(&r, SEC, 0);
    assert_eq!((o.remaining, o.reset_after_us), (2, 0));
}
