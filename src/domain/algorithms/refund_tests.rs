//! Refund and reset of every algorithm, on a controlled clock.

use super::test_support::*;
use super::*;

fn spend(state: &mut State, rule: &Rule, now: u64, cost: u64) {
    assert!(
        state.apply(rule, now, cost).allowed,
        "spend {cost} at {now}"
    );
}

fn look(state: &State, rule: &Rule, now: u64) -> Outcome {
    state.clone().apply(rule, now, 0)
}

#[test]
fn fixed_window_gives_back_the_current_window_only_and_not_below_zero() {
    let r = rule(Algorithm::FixedWindow, 5, 10 * SEC);
    let mut s = State::fresh(Algorithm::FixedWindow);
    let t = 1_000 * SEC;
    spend(&mut s, &r, t, 4);
    assert_eq!(s.refund(&r, t + SEC, 3), None);
    assert_eq!(look(&s, &r, t + SEC).remaining, 4);
    s.refund(&r, t + SEC, 100);
    assert_eq!(look(&s, &r, t + SEC).remaining, 5, "never beyond the limit");
    // A count of a past window is not given back into the current one.
    spend(&mut s, &r, t, 5);
    let next = t + 10 * SEC;
    s.refund(&r, next, 5);
    spend(&mut s, &r, next, 5);
    assert!(!look(&s, &r, next).allowed);
}

#[test]
fn sliding_window_takes_from_the_current_window_first_then_the_previous() {
    let r = rule(Algorithm::SlidingWindow, 10, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingWindow);
    let t = 1_000 * SEC;
    spend(&mut s, &r, t, 6);
    let next = t + 10 * SEC; // start of the next window: prev weighs fully
    spend(&mut s, &r, next, 3);
    assert_eq!(look(&s, &r, next).remaining, 1);
    s.refund(&r, next, 5); // 3 from the current window, 2 from the previous
    let State::SlidingWindow(w) = &s else {
        unreachable!()
    };
    assert_eq!((w.prev, w.curr), (4, 0));
    assert_eq!(look(&s, &r, next).remaining, 6);
    s.refund(&r, next, 50);
    assert_eq!(look(&s, &r, next).remaining, 10);
}

/// A refund in the window after the last spend lowers that spend's count
/// and keeps its index: rolled to the new window, the Redis key would keep
/// the expiry of the old one and die a window early.
#[test]
fn sliding_window_refund_in_the_next_window_keeps_the_index() {
    let r = rule(Algorithm::SlidingWindow, 10, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingWindow);
    let t = 1_000 * SEC;
    spend(&mut s, &r, t, 6);
    let next = t + 10 * SEC;
    s.refund(&r, next, 2);
    let State::SlidingWindow(w) = &s else {
        unreachable!()
    };
    assert_eq!((w.window_index, w.curr), (100, 4));
    assert_eq!(look(&s, &r, next).remaining, 6);
}

#[test]
fn sliding_log_removes_the_newest_units_splitting_an_entry() {
    let r = rule(Algorithm::SlidingLog, 10, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingLog);
    let t = 1_000 * SEC;
    spend(&mut s, &r, t, 3);
    spend(&mut s, &r, t + SEC, 2);
    spend(&mut s, &r, t + 2 * SEC, 4);
    s.refund(&r, t + 3 * SEC, 5);
    let State::SlidingLog(log) = &s else {
        unreachable!()
    };
    assert_eq!(Vec::from(log.entries.clone()), [(t, 3), (t + SEC, 1)]);
    // The oldest units still leave when they would have.
    assert_eq!(look(&s, &r, t + 3 * SEC).remaining, 6);
    assert_eq!(look(&s, &r, t + 10 * SEC).remaining, 9);
    s.refund(&r, t + 3 * SEC, 50);
    assert_eq!(s, State::fresh(Algorithm::SlidingLog));
}

#[test]
fn sliding_log_leaves_expired_entries_alone() {
    let r = rule(Algorithm::SlidingLog, 10, 10 * SEC);
    let mut s = State::fresh(Algorithm::SlidingLog);
    let t = 1_000 * SEC;
    spend(&mut s, &r, t, 3);
    s.refund(&r, t + 10 * SEC, 3);
    let State::SlidingLog(log) = &s else {
        unreachable!()
    };
    assert_eq!(
        log.entries.len(),
        1,
        "expired: nothing in the window to refund"
    );
}

#[test]
fn token_bucket_adds_tokens_up_to_the_burst() {
    // One token per 100 ms, bucket of 5.
    let r = Rule {
        burst: 5,
        ..rule(Algorithm::TokenBucket, 10, SEC)
    };
    let mut s = State::fresh(Algorithm::TokenBucket);
    assert_eq!(s.refund(&r, SEC, 3), None, "never seen: nothing to give");
    assert_eq!(s, State::fresh(Algorithm::TokenBucket));
    spend(&mut s, &r, SEC, 5);
    assert_eq!(s.refund(&r, SEC + 50 * MS, 2), Some(250 * MS));
    let o = look(&s, &r, SEC + 50 * MS);
    assert_eq!((o.remaining, o.reset_after_us), (2, 250 * MS));
    assert_eq!(s.refund(&r, SEC + 50 * MS, 9), Some(0));
    assert_eq!(
        look(&s, &r, SEC + 50 * MS).remaining,
        5,
        "never beyond burst"
    );
}

#[test]
fn gcra_moves_the_tat_back_but_not_before_now() {
    let r = Rule {
        burst: 5,
        ..rule(Algorithm::Gcra, 10, SEC)
    };
    let mut s = State::fresh(Algorithm::Gcra);
    assert_eq!(s.refund(&r, SEC, 3), None);
    spend(&mut s, &r, SEC, 5); // TAT at now + 500 ms
    assert_eq!(s.refund(&r, SEC, 2), Some(300 * MS));
    assert_eq!(look(&s, &r, SEC).remaining, 2);
    assert_eq!(s.refund(&r, SEC, 7), Some(0));
    assert_eq!(
        s,
        State::fresh(Algorithm::Gcra),
        "a TAT of now holds nothing"
    );
    assert_eq!(look(&s, &r, SEC).remaining, 5);
}

#[test]
fn token_bucket_and_gcra_refund_alike() {
    let tb = Rule {
        burst: 4,
        ..rule(Algorithm::TokenBucket, 7, 3 * SEC)
    };
    let gcra = Rule {
        algorithm: Algorithm::Gcra,
        ..tb
    };
    let (mut a, mut b) = (State::fresh(tb.algorithm), State::fresh(gcra.algorithm));
    let mut now = 50 * SEC;
    for (step, cost, back) in [
        (0, 3, 1),
        (100, 1, 2),
        (900, 2, 0),
        (5, 0, 4),
        (2_000, 4, 1),
    ] {
        now += step * MS;
        assert_eq!(a.apply(&tb, now, cost), b.apply(&gcra, now, cost));
        a.refund(&tb, now, back);
        b.refund(&gcra, now, back);
        assert_eq!(look(&a, &tb, now), look(&b, &gcra, now), "at {now}");
    }
}

#[test]
fn multi_limit_refund_gives_back_on_each_limit_and_reset_empties_all() {
    let short = rule(Algorithm::FixedWindow, 2, SEC);
    let daily = rule(Algorithm::SlidingLog, 5, 86_400 * SEC);
    let rules = [&short, &daily];
    let mut states = [State::fresh(short.algorithm), State::fresh(daily.algorithm)];
    let t = 1_000 * SEC;
    assert!(
        apply_all(&mut states, &rules, t, 2)
            .iter()
            .all(|o| o.allowed)
    );
    assert!(
        apply_all(&mut states, &rules, t + SEC, 2)
            .iter()
            .all(|o| o.allowed)
    );
    // The short limit has 2 spent in this window, the daily one 4: a
    // refund of 3 gives back 2 and 3.
    let after = refund_all(&mut states, &rules, t + SEC, 3);
    assert_eq!(
        after.iter().map(|o| o.remaining).collect::<Vec<_>>(),
        [2, 4]
    );
    let after = reset_all(&mut states, &rules, t + SEC);
    assert_eq!(
        after.iter().map(|o| o.remaining).collect::<Vec<_>>(),
        [2, 5]
    );
    assert!(after.iter().all(|o| o.allowed && o.reset_after_us == 0));
}
