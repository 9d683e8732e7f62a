//! sliding_window on a controlled clock, apart from the algorithm so that its file
//! imports nothing of the shared test support (which imports every algorithm).

use super::super::test_support::*;
use super::super::*;
use super::SlidingWindowState;

fn sw(limit: u64, window: u64) -> Rule {
    rule(Algorithm::SlidingWindow, limit, window)
}

fn state(window_index: u64, prev: u64, curr: u64) -> State {
    State::SlidingWindow(SlidingWindowState {
        window_index,
        prev,
        curr,
        born_us: Some(0),
    })
}

#[test]
fn seed_example_weighted_90_is_allowed_and_101_is_denied() {
    let r = sw(100, 60 * SEC);
    let at_25_percent = 1_000 * 60 * SEC + 15 * SEC;
    let mut s = state(1_000, 80, 30);
    let o = s.apply(&r, at_25_percent, 1);
    assert!(o.allowed, "80 * 0.75 + 30 = 90 < 100");
    assert_eq!(o.remaining, 9);

    let mut s = state(1_000, 80, 41);
    let o = s.apply(&r, at_25_percent, 1);
    assert!(!o.allowed, "80 * 0.75 + 41 = 101 >= 100");
    assert_eq!(o.remaining, 0);
    assert_retry_exact(&s, &r, at_25_percent, 1, o);
}

#[test]
fn does_not_admit_a_boundary_burst() {
    assert_eq!(boundary_burst_allowed(Algorithm::SlidingWindow), 10);
}

#[test]
fn retry_after_is_exact_mid_window_and_across_windows() {
    let r = sw(10, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingWindow);
    let t = 1_000 * SEC + 3 * SEC;
    assert!(s.apply(&r, t, 10).allowed);
    // curr is full: the earliest pass is in the next window, once enough
    // of this one has slid out.
    let o = s.apply(&r, t, 1);
    assert_retry_exact(&s, &r, t, 1, o);
    // At the boundary prev = 10 weighs exactly 10; one microsecond later it
    // weighs 9.999999, which floors to 9.
    assert_eq!(o.retry_after_us, 7 * SEC + 1);
    // cost > 1 waits longer.
    let o4 = s.apply(&r, t, 4);
    assert_retry_exact(&s, &r, t, 4, o4);
    // floor(10 * (1 - e/10s)) <= 6 needs e > 3 s.
    assert_eq!(o4.retry_after_us, 10 * SEC + 1);
}

#[test]
fn cost_zero_and_cost_above_one() {
    let r = sw(5, SEC);
    let mut s = State::fresh(Algorithm::SlidingWindow);
    assert_eq!(s.apply(&r, 0, 0).remaining, 5);
    assert_eq!(s.apply(&r, 0, 4).remaining, 1);
    let denied = s.apply(&r, 0, 2);
    assert!(!denied.allowed);
    assert!(s.apply(&r, 0, 0).allowed, "one unit is still left");
    assert!(s.apply(&r, 0, 1).allowed);
    let probe = s.apply(&r, 0, 0);
    assert!(!probe.allowed);
    assert_retry_exact(&s, &r, 0, 0, probe);
}

#[test]
fn remaining_is_what_a_next_check_may_take_when_the_weight_is_fractional() {
    // 10 spent in the previous window, 4 % of the window gone: the
    // weight is 9.6, which the decision counts as 9.
    let r = sw(10, 10 * SEC);
    let mut s = state(1_001, 0, 10);
    let now = 1_002 * 10 * SEC + 400 * MS;
    let probe = s.apply(&r, now, 0);
    assert!(probe.allowed);
    assert_eq!(
        probe.remaining, 1,
        "a cost-0 check passes iff a unit remains"
    );
    let spend = s.apply(&r, now, 1);
    assert!(spend.allowed);
    assert_eq!(spend.remaining, 0);
    assert!(!s.apply(&r, now, 1).allowed, "remaining 0 means denied");

    // Large numbers, where floor(weight) + cost and floor(weight + cost)
    // differ in the last unit (found by review): remaining must still
    // be exactly what passes.
    let r = sw(1_000_000_000_000, SEC);
    let mut s = state(1_000, 776_579_721_677, 62_512_645_676);
    let now = 1_000 * SEC + 674_037;
    let o = s.apply(&r, now, 270_034_426_635);
    assert!(o.allowed);
    let mut probe = s.clone();
    assert!(probe.apply(&r, now, o.remaining).allowed, "{o:?}");
    assert!(!s.apply(&r, now, o.remaining + 1).allowed, "{o:?}");
}

#[test]
fn state_expires_after_two_windows() {
    let r = sw(3, SEC);
    let mut s = State::fresh(Algorithm::SlidingWindow);
    let o = s.apply(&r, 5 * SEC + 200 * MS, 3);
    assert_eq!(o.reset_after_us, 2 * SEC - 200 * MS);
    let o = s.apply(&r, 7 * SEC, 3);
    assert!(o.allowed);
    assert_eq!(o.remaining, 0);
}
