//! sliding_log on a controlled clock, apart from the algorithm so that its file
//! imports nothing of the shared test support (which imports every algorithm).

use super::super::test_support::*;
use super::super::*;
use super::MAX_EXACT_ENTRIES;

fn sl(limit: u64, window: u64) -> Rule {
    rule(Algorithm::SlidingLog, limit, window)
}

#[test]
fn denies_at_the_limit_and_retries_when_the_oldest_entry_leaves() {
    let r = sl(3, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingLog);
    let t = 1_000 * SEC;
    assert!(s.apply(&r, t, 1).allowed);
    assert!(s.apply(&r, t + SEC, 1).allowed);
    let o = s.apply(&r, t + 2 * SEC, 1);
    assert_eq!((o.remaining, o.reset_after_us), (0, 10 * SEC));
    let denied = s.apply(&r, t + 5 * SEC, 1);
    assert_eq!(
        denied.retry_after_us,
        5 * SEC,
        "the entry at t leaves at t + 10 s"
    );
    assert_retry_exact(&s, &r, t + 5 * SEC, 1, denied);
    // Two units need the two oldest to leave.
    let denied2 = s.apply(&r, t + 5 * SEC, 2);
    assert_eq!(denied2.retry_after_us, 6 * SEC);
    assert_retry_exact(&s, &r, t + 5 * SEC, 2, denied2);
}

#[test]
fn does_not_admit_a_boundary_burst() {
    assert_eq!(boundary_burst_allowed(Algorithm::SlidingLog), 10);
}

/// A tiny deterministic generator, so the long runs below need no crate.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    *seed >> 33
}

#[test]
fn a_huge_cost_is_one_entry() {
    let r = sl(100_000, 366 * 86_400 * SEC);
    let mut s = State::fresh(Algorithm::SlidingLog);
    assert!(s.apply(&r, SEC, 100_000).allowed);
    let State::SlidingLog(log) = &s else {
        unreachable!()
    };
    assert_eq!(log.entries, [(SEC, 100_000)]);
}

/// Many small admissions at distinct instants: the log stays within its
/// bound, never admits more than `limit` in any window, and every
/// denial's retry_after is exact for the stored state.
#[test]
fn many_admissions_stay_bounded_and_never_over_admit() {
    for (limit, window) in [(100_000, 366 * 86_400 * SEC), (500, 10 * SEC), (64, 63)] {
        let r = sl(limit, window);
        let mut s = State::fresh(Algorithm::SlidingLog);
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut seed = limit;
        let mut now = 1_000 * SEC;
        for i in 0..5_000 {
            now += lcg(&mut seed) % (window / 40 + 1);
            let cost = 1 + lcg(&mut seed) % 3;
            let before = s.clone();
            let outcome = s.apply(&r, now, cost);
            if outcome.allowed {
                admitted.push((now, cost));
                let in_window: u64 = admitted
                    .iter()
                    .filter(|(t, _)| t + window > now)
                    .map(|(_, n)| n)
                    .sum();
                assert!(in_window <= limit, "step {i}: {in_window} > {limit}");
            } else if i % 50 == 0 {
                assert_retry_exact(&before, &r, now, cost, outcome);
            }
            let State::SlidingLog(log) = &s else {
                unreachable!()
            };
            assert!(log.entries.len() <= 2 * MAX_EXACT_ENTRIES + 1, "step {i}");
        }
    }
}

#[test]
fn a_short_log_is_exact_and_a_long_one_errs_late_by_under_a_slot() {
    let window = 63 * SEC; // slots of 1 s
    let r = sl(1_000, window);
    let mut s = State::fresh(Algorithm::SlidingLog);
    // 63 admissions 10 ms apart fill the exact part...
    for i in 0..63 {
        assert!(s.apply(&r, i * 10 * MS, 1).allowed);
    }
    // ...then three more in the slot of the newest join it, which moves
    // to the latest instant.
    for i in 63..66 {
        assert!(s.apply(&r, i * 10 * MS, 1).allowed);
    }
    let State::SlidingLog(log) = &s else {
        unreachable!()
    };
    assert_eq!(log.entries.len(), 63);
    assert_eq!(log.entries.back(), Some(&(650 * MS, 4)));
    // A later slot starts a new entry; a clock stepping back joins the newest.
    assert!(s.apply(&r, 1_500 * MS, 1).allowed);
    assert!(s.apply(&r, 1_200 * MS, 2).allowed);
    let State::SlidingLog(log) = &s else {
        unreachable!()
    };
    assert_eq!(log.entries.len(), 64);
    assert_eq!(log.entries.back(), Some(&(1_500 * MS, 3)));
}

#[test]
fn cost_is_logged_per_unit_and_cost_zero_logs_nothing() {
    let r = sl(5, SEC);
    let mut s = State::fresh(Algorithm::SlidingLog);
    assert_eq!(s.apply(&r, SEC, 0).remaining, 5);
    assert_eq!(s.apply(&r, SEC, 0).reset_after_us, 0);
    assert_eq!(s.apply(&r, SEC, 3).remaining, 2);
    assert!(!s.apply(&r, SEC, 3).allowed);
    assert_eq!(s.apply(&r, SEC, 2).remaining, 0);
    let probe = s.apply(&r, SEC + MS, 0);
    assert!(!probe.allowed);
    assert_retry_exact(&s, &r, SEC + MS, 0, probe);
}

#[test]
fn entries_expire_exactly_one_window_later() {
    let r = sl(1, SEC);
    let mut s = State::fresh(Algorithm::SlidingLog);
    assert!(s.apply(&r, 5 * SEC, 1).allowed);
    assert!(!s.apply(&r, 6 * SEC - 1, 1).allowed);
    assert!(
        s.apply(&r, 6 * SEC, 1).allowed,
        "at or before now - window is gone"
    );
}
