//! fixed_window on a controlled clock, apart from the algorithm so that its file
//! imports nothing of the shared test support (which imports every algorithm).

use super::super::test_support::*;
use super::super::*;

fn fw(limit: u64) -> Rule {
    rule(Algorithm::FixedWindow, limit, 10 * SEC)
}

#[test]
fn counts_up_to_the_limit_then_denies_until_the_next_window() {
    let r = fw(3);
    let mut s = State::fresh(Algorithm::FixedWindow);
    let t0 = 1_000 * SEC + 4 * SEC; // 4 s into a window
    for expected in [2, 1, 0] {
        let o = s.apply(&r, t0, 1);
        assert!(o.allowed);
        assert_eq!(o.remaining, expected);
        assert_eq!(o.reset_after_us, 6 * SEC);
    }
    let o = s.apply(&r, t0, 1);
    assert_eq!(o.retry_after_us, 6 * SEC);
    assert_retry_exact(&s, &r, t0, 1, o);
}

#[test]
fn admits_twice_the_limit_across_a_boundary() {
    assert_eq!(
        boundary_burst_allowed(Algorithm::FixedWindow),
        20,
        "the known weakness of fixed windows"
    );
}

#[test]
fn cost_greater_than_one_and_denials_do_not_count() {
    let r = fw(10);
    let mut s = State::fresh(Algorithm::FixedWindow);
    let t = 5 * SEC;
    assert_eq!(s.apply(&r, t, 7).remaining, 3);
    let denied = s.apply(&r, t, 4);
    assert!(!denied.allowed);
    assert_eq!(denied.remaining, 3, "a denied check consumes nothing");
    assert!(s.apply(&r, t, 3).allowed);
}

#[test]
fn cost_zero_reports_without_consuming() {
    let r = fw(2);
    let mut s = State::fresh(Algorithm::FixedWindow);
    let probe = s.apply(&r, SEC, 0);
    assert!(probe.allowed);
    assert_eq!((probe.remaining, probe.reset_after_us), (2, 0));
    s.apply(&r, SEC, 2);
    let probe = s.apply(&r, SEC, 0);
    assert!(
        !probe.allowed,
        "cost 0 is allowed iff at least one unit remains"
    );
    assert_retry_exact(&s, &r, SEC, 0, probe);
}

#[test]
fn state_expires_with_its_window() {
    let r = fw(1);
    let mut s = State::fresh(Algorithm::FixedWindow);
    assert!(s.apply(&r, 3 * SEC, 1).allowed);
    assert!(!s.apply(&r, 9 * SEC, 1).allowed);
    let later = s.apply(&r, 10 * SEC, 1);
    assert!(later.allowed);
    assert_eq!(later.reset_after_us, 10 * SEC);
}
