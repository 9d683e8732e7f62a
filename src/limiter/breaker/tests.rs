//! Every transition of the breaker, on explicit timestamps.

use super::*;

const MS: u64 = 1_000;

fn breaker() -> Breaker {
    Breaker::new(BreakerConfig {
        consecutive_failures: 3,
        failure_ratio: 0.5,
        interval: Duration::from_secs(1),
        min_calls: 10,
        open_for: Duration::from_millis(500),
        trial_interval: Duration::from_millis(100),
    })
}

/// Admits and records one call at `now`; returns the transitions.
fn call(b: &mut Breaker, now: u64, failed: bool) -> Vec<Transition> {
    let (ticket, t1) = b.admit(now);
    let t2 = ticket.and_then(|t| b.record(t, failed, now));
    t1.into_iter().chain(t2).collect()
}

#[test]
fn an_isolated_failure_keeps_it_closed() {
    let mut b = breaker();
    for i in 0..100 {
        assert!(call(&mut b, i * MS, i % 10 == 3).is_empty());
    }
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn consecutive_failures_open_it() {
    let mut b = breaker();
    assert!(call(&mut b, 0, true).is_empty());
    assert!(call(&mut b, 1, true).is_empty());
    assert!(
        call(&mut b, 2, false).is_empty(),
        "a success resets the run"
    );
    assert!(call(&mut b, 3, true).is_empty());
    assert!(call(&mut b, 4, true).is_empty());
    assert_eq!(
        call(&mut b, 5, true),
        [Transition::Opened(OpenReason::Consecutive)]
    );
    assert_eq!(b.admit(6).0, None, "open: answered by policy");
}

/// Issue 6, defect 5: a dropped connection fails every call pipelined on
/// it, and a failed batch call every check it carried, all at once. That
/// is one failure, not one per check: a Redis restart over in milliseconds
/// used to open the breaker for a whole `open_for`.
#[test]
fn failures_of_calls_in_flight_together_count_once() {
    let mut b = breaker();
    // Under load (the ratio counts every check, so a burst of failures
    // after an idle spell is a ratio question, not this one).
    for i in 0..256 {
        call(&mut b, i, false);
    }
    // 128 checks in flight (one batch call, or one connection's pipeline)
    // fail together.
    let tickets: Vec<Ticket> = (0..128).map(|_| b.admit(0).0.unwrap()).collect();
    for ticket in tickets {
        assert_eq!(b.record(ticket, true, MS), None);
    }
    assert_eq!(b.state(), State::Closed, "one event, not 128 failures");
    // Calls sent after it fail too: a sustained failure opens it.
    assert!(call(&mut b, 2 * MS, true).is_empty());
    assert_eq!(
        call(&mut b, 3 * MS, true),
        [Transition::Opened(OpenReason::Consecutive)]
    );
}

#[test]
fn an_overlapping_failure_neither_adds_to_the_run_nor_resets_it() {
    let mut b = breaker();
    let (in_flight, _) = b.admit(0);
    assert!(call(&mut b, MS, true).is_empty());
    assert!(call(&mut b, 2 * MS, true).is_empty());
    // Sent before the two failures above, failed after them.
    assert_eq!(b.record(in_flight.unwrap(), true, 3 * MS), None);
    assert_eq!(b.state(), State::Closed, "still a run of 2");
    assert_eq!(
        call(&mut b, 4 * MS, true),
        [Transition::Opened(OpenReason::Consecutive)],
        "the run went on"
    );
}

#[test]
fn a_failure_ratio_over_the_interval_opens_it() {
    let mut b = breaker();
    // Alternating: never 3 in a row, but half of the calls fail.
    for i in 0..9 {
        assert!(call(&mut b, i * MS, i % 2 == 0).is_empty(), "call {i}");
    }
    // 5 of 10 failed once the 10th (a success) is in: 5/10 >= 0.5.
    assert_eq!(
        call(&mut b, 9 * MS, false),
        [Transition::Opened(OpenReason::Ratio)]
    );
}

#[test]
fn the_ratio_forgets_calls_older_than_the_interval() {
    let mut b = breaker();
    // 6 of 9 failed, never 3 in a row, below min_calls.
    for i in 0..9 {
        assert!(call(&mut b, i * MS, i % 3 != 2).is_empty());
    }
    // Two seconds later: 4 of 10 failed. With the old calls still
    // counted it would be 10 of 19, over the ratio.
    for i in 0..10 {
        assert!(call(&mut b, 2_000 * MS + i * MS, i < 8 && i % 2 == 0).is_empty());
    }
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn below_min_calls_the_ratio_does_not_count() {
    let mut b = breaker();
    for i in 0..4 {
        // 2 failures of 4: ratio 0.5 but only 4 calls.
        assert!(call(&mut b, i * MS, i % 2 == 1).is_empty());
    }
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn half_open_lets_one_trial_per_interval_and_success_closes() {
    let mut b = breaker();
    for _ in 0..3 {
        call(&mut b, 0, true);
    }
    assert_eq!(b.admit(499 * MS).0, None, "still open");
    let (trial, t) = b.admit(500 * MS);
    assert_eq!(t, Some(Transition::HalfOpened));
    let trial = trial.expect("the first half-open call is a trial");
    assert_eq!(b.admit(501 * MS).0, None, "one trial at a time");
    assert_eq!(b.admit(599 * MS).0, None);
    assert!(b.admit(600 * MS).0.is_some(), "next interval, next trial");
    assert_eq!(b.record(trial, false, 610 * MS), Some(Transition::Closed));
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn a_failed_trial_reopens_for_another_period() {
    let mut b = breaker();
    for _ in 0..3 {
        call(&mut b, 0, true);
    }
    let (trial, _) = b.admit(500 * MS);
    assert_eq!(
        b.record(trial.unwrap(), true, 520 * MS),
        Some(Transition::Opened(OpenReason::TrialFailed))
    );
    assert_eq!(b.admit(1_019 * MS).0, None);
    assert!(b.admit(1_020 * MS).0.is_some());
}

#[test]
fn late_results_from_an_older_generation_are_ignored() {
    let mut b = breaker();
    let (slow, _) = b.admit(0);
    for _ in 0..3 {
        call(&mut b, 0, true);
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.record(slow.unwrap(), false, 10), None, "no late close");
    assert_eq!(b.state(), State::Open);

    let (trial, _) = b.admit(500 * MS);
    let (before_close, _) = b.admit(600 * MS);
    b.record(trial.unwrap(), false, 601 * MS);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(
        b.record(before_close.unwrap(), true, 602 * MS),
        None,
        "a half-open trial that failed after the close is ignored"
    );
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn the_prober_moves_open_to_half_open_at_once() {
    let mut b = breaker();
    assert_eq!(b.store_recovered(0, true), None, "closed stays closed");
    for _ in 0..3 {
        call(&mut b, 0, true);
    }
    assert_eq!(b.store_recovered(10 * MS, false), None, "still open");
    assert_eq!(
        b.store_recovered(10 * MS, true),
        Some(Transition::HalfOpened)
    );
    assert!(b.admit(10 * MS).0.is_some(), "trial without waiting");
}

#[test]
fn a_ping_after_the_open_period_half_opens_an_idle_breaker() {
    let mut b = breaker();
    for _ in 0..3 {
        call(&mut b, 0, true);
    }
    assert_eq!(b.store_recovered(499 * MS, false), None);
    assert_eq!(
        b.store_recovered(500 * MS, false),
        Some(Transition::HalfOpened)
    );
}

#[test]
fn a_snapshot_hands_out_the_ticket_of_a_closed_breaker_only() {
    let mut b = breaker();
    let from_snapshot = Ticket::from_snapshot(b.snapshot());
    assert_eq!(from_snapshot, b.admit(0).0);
    // A counted failure changes the ticket (and what overlaps it).
    call(&mut b, 0, true);
    assert_eq!(Ticket::from_snapshot(b.snapshot()), b.admit(0).0);
    assert_ne!(Ticket::from_snapshot(b.snapshot()), from_snapshot);
    for i in 1..3 {
        call(&mut b, i, true);
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(Ticket::from_snapshot(b.snapshot()), None);
    // A ticket from before it opened is ignored.
    assert_eq!(b.record(from_snapshot.unwrap(), false, 3), None);
    assert_eq!(b.state(), State::Open);
}
