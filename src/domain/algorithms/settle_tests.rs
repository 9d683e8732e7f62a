//! Settling afterwards, every algorithm on a controlled clock: below the
//! reservation a refund, above it a forced spend past the limit, paid back
//! as the algorithm recovers, with exact retry-afters and an expiry that
//! outlives the debt.

use super::settle::{OVERDRAFT_CAPACITIES, overdraft_rule};
use super::test_support::*;
use super::*;

fn bucket(algorithm: Algorithm, limit: u64, window: u64, burst: u64) -> Rule {
    Rule {
        burst,
        ..rule(algorithm, limit, window)
    }
}

/// Every algorithm at 10 per 10 s (buckets: burst 10).
fn rules() -> Vec<Rule> {
    Algorithm::RATES
        .iter()
        .map(|&a| rule(a, 10, 10 * SEC))
        .collect()
}

fn settle(state: &mut State, rule: &Rule, now: u64, reserved: u64, actual: u64) -> Outcome {
    settle_all(std::slice::from_mut(state), &[rule], now, reserved, actual)[0]
}

fn look(state: &State, rule: &Rule, now: u64) -> Outcome {
    state.clone().apply(rule, now, 0)
}

#[test]
fn below_the_reservation_a_settle_is_exactly_a_refund() {
    for r in rules() {
        let t = 1_000 * SEC + 3 * SEC;
        let mut settled = State::fresh(r.algorithm);
        assert!(settled.apply(&r, t, 8).allowed);
        let mut refunded = settled.clone();
        let answer = settle(&mut settled, &r, t, 8, 3);
        let expected = refund_all(std::slice::from_mut(&mut refunded), &[&r], t, 5);
        assert_eq!(settled, refunded, "{:?}", r.algorithm);
        assert_eq!(answer, expected[0]);
        assert_eq!(answer.remaining, 7, "{:?}", r.algorithm);
    }
}

#[test]
fn at_the_reservation_nothing_changes() {
    for r in rules() {
        let t = 1_000 * SEC;
        let mut s = State::fresh(r.algorithm);
        assert!(s.apply(&r, t, 4).allowed);
        let before = s.clone();
        let answer = settle(&mut s, &r, t + SEC, 4, 4);
        assert_eq!(s, before);
        assert_eq!(answer, look(&before, &r, t + SEC));
    }
}

/// Above the reservation: past the limit, every later check denied with an
/// exact retry-after (for costs 0, 1 and the whole capacity), and at the
/// state's reset it reads as never seen.
#[test]
fn above_the_reservation_the_overspend_is_paid_back_with_exact_retries() {
    for r in rules() {
        let t = 1_000 * SEC + 3 * SEC;
        let mut s = State::fresh(r.algorithm);
        assert!(s.apply(&r, t, 10).allowed);
        let answer = settle(&mut s, &r, t, 2, 9);
        assert!(!answer.allowed, "{:?}: 17 of 10 used", r.algorithm);
        assert_eq!(answer.remaining, 0);
        for at in [t, t + 2 * SEC, t + 9 * SEC] {
            for cost in [0, 1, 10] {
                let o = look(&s, &r, at);
                let o = if cost == 0 {
                    o
                } else {
                    s.clone().apply(&r, at, cost)
                };
                if !o.allowed {
                    assert_retry_exact(&s, &r, at, cost, o);
                }
            }
        }
        let fresh = State::fresh(r.algorithm);
        let reset_at = t + answer.reset_after_us;
        for cost in [0, 1, 10] {
            assert_eq!(
                s.clone().apply(&r, reset_at, cost),
                fresh.clone().apply(&r, reset_at, cost),
                "{:?} at its reset, cost {cost}",
                r.algorithm
            );
        }
    }
}

#[test]
fn the_debt_of_each_algorithm() {
    let t = 1_000 * SEC + 4 * SEC;
    // fixed_window: the current window's count is 15 of 10 until it ends.
    let r = rule(Algorithm::FixedWindow, 10, 10 * SEC);
    let mut s = State::fresh(Algorithm::FixedWindow);
    assert!(s.apply(&r, t, 10).allowed);
    let o = settle(&mut s, &r, t + SEC, 1, 6);
    assert_eq!(
        (o.allowed, o.retry_after_us, o.reset_after_us),
        (false, 5 * SEC, 5 * SEC)
    );
    // sliding_window: 20 of 10 in this window, weighing below 10 once more
    // than half of the next one has passed.
    let r = rule(Algorithm::SlidingWindow, 10, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingWindow);
    let start = 1_000 * SEC;
    assert!(s.apply(&r, start, 10).allowed);
    let o = settle(&mut s, &r, start, 0, 10);
    assert_eq!(o.retry_after_us, 15 * SEC + 1);
    assert_eq!(o.reset_after_us, 20 * SEC);
    // sliding_log: 3 at t, 2 more logged at t + 1 s: the third unit leaves
    // with the entry at t.
    let r = rule(Algorithm::SlidingLog, 3, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingLog);
    assert!(s.apply(&r, t, 3).allowed);
    let o = settle(&mut s, &r, t + SEC, 1, 3);
    assert_eq!((o.retry_after_us, o.reset_after_us), (9 * SEC, 10 * SEC));
    // The buckets: 10 per second, burst 3, 5 tokens owed.
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let r = bucket(algorithm, 10, SEC, 3);
        let mut s = State::fresh(algorithm);
        assert!(s.apply(&r, t, 3).allowed);
        let o = settle(&mut s, &r, t, 3, 8);
        assert_eq!(
            (o.allowed, o.remaining, o.retry_after_us, o.reset_after_us),
            (false, 0, 600 * MS, 800 * MS),
            "{algorithm:?}"
        );
        assert_retry_exact(&s, &r, t, 1, o);
        assert_retry_exact(
            &s,
            &r,
            t + 250 * MS,
            3,
            s.clone().apply(&r, t + 250 * MS, 3),
        );
    }
}

/// However many settles come, the usage stays within 101 capacities: the
/// buckets owe at most 100 bursts, so a key is never locked for longer
/// than 101 refills of its bucket.
#[test]
fn the_overdraft_is_capped() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let r = bucket(algorithm, 10, SEC, 3);
        let mut s = State::fresh(algorithm);
        for _ in 0..5 {
            settle(&mut s, &r, 0, 0, 1_000);
        }
        let o = look(&s, &r, 0);
        assert_eq!(o.retry_after_us, 301 * 100 * MS, "{algorithm:?}");
        assert_eq!(o.reset_after_us, 303 * 100 * MS, "{algorithm:?}");
    }
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let r = rule(algorithm, 10, 10 * SEC);
        let mut s = State::fresh(algorithm);
        for i in 0..5 {
            settle(&mut s, &r, i, 0, 1_000);
        }
        let raised = overdraft_rule(&r);
        assert_eq!(raised.limit, 10 * OVERDRAFT_CAPACITIES);
        assert_eq!(look(&s, &raised, 5).remaining, 0, "{algorithm:?}");
    }
}

/// A forced spend on a key never seen writes state and an expiry, as a
/// check spending would.
#[test]
fn a_spend_on_a_fresh_key_lives_until_it_is_paid_back() {
    for r in rules() {
        let mut s = State::fresh(r.algorithm);
        let spent = s.spend(&r, 1_000 * SEC, 15).spend.expect("spent");
        assert!(
            spent.reset_after_us >= 10 * SEC,
            "{:?}: {spent:?}",
            r.algorithm
        );
        let o = look(&s, &r, 1_000 * SEC);
        assert!(!o.allowed);
        assert_retry_exact(&s, &r, 1_000 * SEC, 1, o);
    }
}
