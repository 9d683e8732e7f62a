//! Give-back of an earlier check's units, on a controlled clock: exact
//! where the check's count is still kept, nothing where it is gone.

use super::test_support::*;
use super::*;

/// One step of a sequence around a reservation.
#[derive(Clone, Copy)]
enum Step {
    /// A check of this cost at this instant (allowed or not).
    Spend(u64, u64),
    /// A refund of this cost at this instant.
    Refund(u64, u64),
    /// The reservation, at this instant.
    Reserve(u64),
    /// The give-back of the reservation's unused units, at this instant.
    GiveBack(u64),
}

/// Runs `steps` with a reservation of `reserved`, giving back `unused` at
/// the give-back step; returns the state and the give-back's answer.
fn run(rule: &Rule, steps: &[Step], reserved: u64, unused: u64) -> (State, Vec<Outcome>) {
    let mut states = [State::fresh(rule.algorithm)];
    let (mut at, mut answer) = (0, Vec::new());
    for step in steps {
        match *step {
            Step::Spend(t, cost) => {
                apply_all(&mut states, &[rule], t, cost);
            }
            Step::Refund(t, cost) => {
                refund_all(&mut states, &[rule], t, cost);
            }
            Step::Reserve(t) => {
                assert!(apply_all(&mut states, &[rule], t, reserved)[0].allowed);
                at = t;
            }
            Step::GiveBack(t) => {
                answer = give_back_all(&mut states, &[rule], t, at, unused).unwrap();
                assert_eq!(answer, apply_all(&mut states.clone(), &[rule], t, 0));
            }
        }
    }
    let [state] = states;
    (state, answer)
}

/// Giving back `unused` of `reserved` leaves exactly the counts a
/// reservation of `reserved - unused` would have left. Counts, not the
/// whole state: a reservation of 0 writes nothing, so its twin's state may
/// be born at a later write.
fn assert_exact(rule: &Rule, steps: &[Step], reserved: u64, unused: u64) -> State {
    let (given_back, answer) = run(rule, steps, reserved, unused);
    let (smaller, twin) = run(rule, steps, reserved - unused, 0);
    assert_eq!(
        counts(&given_back),
        counts(&smaller),
        "as if it had spent {}",
        reserved - unused
    );
    assert_eq!(answer, twin);
    given_back
}

fn counts(state: &State) -> (u64, u64, u64) {
    match state {
        State::FixedWindow(s) => (s.window_index, 0, s.count),
        State::SlidingWindow(s) => (s.window_index, s.prev, s.curr),
        _ => unreachable!(),
    }
}

const T: u64 = 1_000 * SEC;

#[test]
fn fixed_window_given_back_in_the_same_window_restores_exactly() {
    let r = rule(Algorithm::FixedWindow, 10, 10 * SEC);
    let steps = [
        Step::Spend(T, 2),
        Step::Reserve(T + SEC),
        Step::Spend(T + 2 * SEC, 1),
        Step::GiveBack(T + 9 * SEC),
    ];
    let state = assert_exact(&r, &steps, 6, 4);
    assert_eq!(counts(&state), (100, 0, 5));
    // All of it, too: as if it had never been.
    let state = assert_exact(&r, &steps, 6, 6);
    assert_eq!(counts(&state), (100, 0, 3));
}

#[test]
fn fixed_window_after_its_period_ended_gives_back_nothing() {
    let r = rule(Algorithm::FixedWindow, 10, 10 * SEC);
    // Nothing spent since: the stored count is the old period's.
    let steps = [Step::Reserve(T + 9 * SEC), Step::GiveBack(T + 10 * SEC)];
    let (state, answer) = run(&r, &steps, 6, 6);
    assert_eq!(counts(&state), (100, 0, 6), "left alone");
    assert_eq!(answer[0].remaining, 10, "it counts for nothing now");
    // A spend in the new period: its count is not the reservation's.
    let steps = [
        Step::Reserve(T + 9 * SEC),
        Step::Spend(T + 11 * SEC, 3),
        Step::GiveBack(T + 12 * SEC),
    ];
    let (state, answer) = run(&r, &steps, 6, 6);
    assert_eq!(counts(&state), (101, 0, 3));
    assert_eq!(answer[0].remaining, 7);
    // And with the clock back in the old period, the count is no longer
    // the stored one: nothing either.
    let steps = [
        Step::Reserve(T + 9 * SEC),
        Step::Spend(T + 11 * SEC, 3),
        Step::GiveBack(T + 9 * SEC),
    ];
    assert_eq!(counts(&run(&r, &steps, 6, 6).0), (101, 0, 3));
}

#[test]
fn sliding_window_one_window_later_takes_from_prev_and_the_weight_drops() {
    let r = rule(Algorithm::SlidingWindow, 10, 10 * SEC);
    let steps = [
        Step::Reserve(T + 5 * SEC),
        Step::Spend(T + 12 * SEC, 1),
        Step::GiveBack(T + 15 * SEC),
    ];
    let (before, _) = run(&r, &steps[..2], 8, 0);
    assert_eq!(counts(&before), (101, 8, 1));
    let now = T + 15 * SEC;
    // 8 * 0.5 + 1 = 5 used before; 2 * 0.5 + 1 = 2 after.
    assert_eq!(before.clone().apply(&r, now, 0).remaining, 5);
    let state = assert_exact(&r, &steps, 8, 6);
    assert_eq!(counts(&state), (101, 2, 1), "prev, not the current count");
    assert_eq!(state.clone().apply(&r, now, 0).remaining, 8);
}

#[test]
fn sliding_window_unrolled_state_one_window_later_takes_from_curr() {
    // No spend since the reservation: the stored index is still its
    // window, and its count still `curr` (never rolled by a give-back).
    let r = rule(Algorithm::SlidingWindow, 10, 10 * SEC);
    let steps = [Step::Reserve(T + 5 * SEC), Step::GiveBack(T + 13 * SEC)];
    let state = assert_exact(&r, &steps, 8, 5);
    assert_eq!(counts(&state), (100, 0, 3));
    // In the same window, too.
    let steps = [
        Step::Spend(T, 1),
        Step::Reserve(T + 5 * SEC),
        Step::Spend(T + 6 * SEC, 1),
        Step::GiveBack(T + 7 * SEC),
    ];
    assert_eq!(counts(&assert_exact(&r, &steps, 8, 5)), (100, 0, 5));
}

#[test]
fn sliding_window_two_windows_later_gives_back_nothing() {
    let r = rule(Algorithm::SlidingWindow, 10, 10 * SEC);
    for (earlier, now) in [
        (vec![Step::Reserve(T + 5 * SEC)], T + 20 * SEC),
        (
            vec![Step::Reserve(T + 5 * SEC), Step::Spend(T + 12 * SEC, 1)],
            T + 25 * SEC,
        ),
    ] {
        let (before, _) = run(&r, &earlier, 8, 0);
        let steps = [earlier, vec![Step::GiveBack(now)]].concat();
        let (after, answer) = run(&r, &steps, 8, 8);
        assert_eq!(after, before);
        assert_eq!(
            answer[0].remaining,
            before.clone().apply(&r, now, 0).remaining
        );
    }
    // Rolled past it by a spend two windows on: the stored prev is the
    // next window's, not the reservation's.
    let steps = [
        Step::Reserve(T + 5 * SEC),
        Step::Spend(T + 12 * SEC, 1),
        Step::Spend(T + 21 * SEC, 2),
        Step::GiveBack(T + 19 * SEC),
    ];
    assert_eq!(counts(&run(&r, &steps, 8, 8).0), (102, 1, 2));
}

#[test]
fn never_below_zero_and_never_more_than_an_interleaved_refund_left() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let r = rule(algorithm, 10, 10 * SEC);
        // A refund took more than the others spent: some of the
        // reservation's units are gone already, and are not given twice.
        let steps = [
            Step::Reserve(T),
            Step::Spend(T + SEC, 2),
            Step::Refund(T + 2 * SEC, 4),
            Step::GiveBack(T + 3 * SEC),
        ];
        let state = assert_exact(&r, &steps, 5, 5);
        assert_eq!(counts(&state).2, 0, "{algorithm}");
        // Others' spending stays counted: only the reservation's goes.
        let steps = [
            Step::Spend(T, 3),
            Step::Reserve(T + SEC),
            Step::Spend(T + 2 * SEC, 2),
            Step::GiveBack(T + 3 * SEC),
        ];
        let state = assert_exact(&r, &steps, 5, 5);
        assert_eq!(counts(&state).2, 5, "{algorithm}");
        // A refund took it all: nothing left to give back.
        let steps = [
            Step::Reserve(T),
            Step::Refund(T + SEC, 50),
            Step::GiveBack(T + 2 * SEC),
        ];
        assert_eq!(counts(&run(&r, &steps, 5, 5).0).2, 0, "{algorithm}");
    }
    // One window on, the refund takes the current window's first.
    let r = rule(Algorithm::SlidingWindow, 10, 10 * SEC);
    let steps = [
        Step::Reserve(T),
        Step::Spend(T + 10 * SEC, 3),
        Step::Refund(T + 11 * SEC, 4),
        Step::GiveBack(T + 12 * SEC),
    ];
    assert_eq!(counts(&assert_exact(&r, &steps, 5, 5)), (101, 0, 0));
}

#[test]
fn a_state_never_seen_stays_so() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let r = rule(algorithm, 10, 10 * SEC);
        let mut s = State::fresh(algorithm);
        s.give_back(&r, T, T, 5).unwrap();
        assert_eq!(s, State::fresh(algorithm));
    }
}

#[test]
fn other_algorithms_refuse_and_nothing_is_written() {
    let fw = rule(Algorithm::FixedWindow, 10, 10 * SEC);
    for algorithm in [
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::Concurrency,
    ] {
        let other = rule(algorithm, 10, 10 * SEC);
        let mut states = [
            State::fresh(Algorithm::FixedWindow),
            State::fresh(algorithm),
        ];
        apply_all(&mut states, &[&fw, &other], T, 4);
        let before = states.clone();
        let refused = give_back_all(&mut states, &[&fw, &other], T, T, 4);
        assert_eq!(refused, Err(GiveBackUnsupported(algorithm)));
        assert_eq!(states, before, "{algorithm}: the window left alone too");
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("only defined for fixed_window and sliding_window"));
    }
}

/// A give-back already on its way when a reset runs: the state recreated
/// after the reset is born after the reservation, so nothing of what
/// others spent since is freed, even within the same window.
#[test]
fn a_give_back_after_a_reset_gives_back_nothing() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let r = rule(algorithm, 10, 10 * SEC);
        let mut states = [State::fresh(algorithm)];
        assert!(apply_all(&mut states, &[&r], T + SEC, 5)[0].allowed);
        reset_all(&mut states, &[&r], T + 2 * SEC);
        assert!(apply_all(&mut states, &[&r], T + 3 * SEC, 10)[0].allowed);
        let before = states.clone();
        give_back_all(&mut states, &[&r], T + 4 * SEC, T + SEC, 5).unwrap();
        assert_eq!(states, before, "{algorithm:?}");
        let more = apply_all(&mut states, &[&r], T + 4 * SEC, 5)[0].allowed;
        assert!(
            !more,
            "{algorithm:?}: 15 admitted after the reset, limit 10"
        );
    }
}

/// A state written before `born_us` existed gives nothing back (its birth
/// is unknown); its next spend records one, after which give-backs of
/// checks from then on are exact again.
#[test]
fn a_state_without_a_birth_gives_back_nothing_until_its_next_spend() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let r = rule(algorithm, 10, 10 * SEC);
        let mut states = [State::fresh(algorithm)];
        apply_all(&mut states, &[&r], T + SEC, 5);
        match &mut states[0] {
            State::FixedWindow(s) => s.born_us = None,
            State::SlidingWindow(s) => s.born_us = None,
            _ => unreachable!(),
        }
        give_back_all(&mut states, &[&r], T + 2 * SEC, T + SEC, 5).unwrap();
        assert_eq!(counts(&states[0]).2, 5, "{algorithm:?}: unknown birth");
        apply_all(&mut states, &[&r], T + 3 * SEC, 1);
        give_back_all(&mut states, &[&r], T + 4 * SEC, T + 3 * SEC, 1).unwrap();
        assert_eq!(counts(&states[0]).2, 5, "{algorithm:?}: born at its spend");
    }
}
