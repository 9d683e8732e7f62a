//! The circuit breaker of one failure domain, as a pure state machine.
//!
//! Time is passed in (microseconds on a monotonic clock) and nothing here
//! sleeps or locks, so every transition is unit-tested deterministically;
//! [`super::domains`] wraps one per failure domain behind a lock.
//!
//! - **Closed**: every check goes to the store. An isolated error answers
//!   only its own check by policy. The breaker opens on a *sustained*
//!   failure: `consecutive_failures` in a row, or at least `min_calls` calls
//!   in the last `interval` of which `failure_ratio` or more failed.
//! - **Open**: no check goes to the store; the failure policy answers at
//!   once. Callers are not kept waiting a timeout each, and a frozen Redis
//!   does not accumulate a backlog of EVALSHAs that fred cannot cancel and
//!   that would all count against their keys when it wakes up.
//! - **Half-open**, after `open_for`: one real check per `trial_interval`
//!   goes through. Its success closes the breaker, its failure re-opens it.
//!
//! Each admission carries the generation it was admitted in. A result from
//! an older generation (a call sent before the breaker opened, answered
//! after) is ignored, so a late success cannot close an open breaker and a
//! late failure cannot re-open a closed one.

use std::time::Duration;

/// When to open and how to recover. See `[breaker]` in `config/default.toml`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Opens after this many failed calls in a row.
    pub consecutive_failures: u32,
    /// Or when at least this share of the calls in `interval` failed...
    pub failure_ratio: f64,
    /// ...over this sliding interval...
    pub interval: Duration,
    /// ...and there were at least this many calls in it.
    pub min_calls: u32,
    /// How long it stays open before the first trial.
    pub open_for: Duration,
    /// In half-open, at most one trial call per this interval.
    pub trial_interval: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: 5,
            failure_ratio: 0.5,
            interval: Duration::from_secs(1),
            min_calls: 20,
            open_for: Duration::from_secs(1),
            trial_interval: Duration::from_millis(250),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

impl State {
    pub const ALL: [State; 3] = [State::Closed, State::Open, State::HalfOpen];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }
}

/// Why the breaker opened, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenReason {
    Consecutive,
    Ratio,
    TrialFailed,
}

impl OpenReason {
    pub fn as_str(self) -> &'static str {
        match self {
            OpenReason::Consecutive => "consecutive failures",
            OpenReason::Ratio => "failure ratio",
            OpenReason::TrialFailed => "trial call failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Opened(OpenReason),
    HalfOpened,
    Closed,
}

impl Transition {
    /// The state entered.
    pub fn to(self) -> State {
        match self {
            Transition::Opened(_) => State::Open,
            Transition::HalfOpened => State::HalfOpen,
            Transition::Closed => State::Closed,
        }
    }
}

/// Permission to send one call; hand it back to [`Breaker::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    generation: u64,
}

/// Buckets of the sliding interval: the ratio forgets old calls in steps of
/// `interval / BUCKETS`.
const BUCKETS: usize = 10;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// `now / width` when this bucket was last written.
    epoch: u64,
    calls: u32,
    failures: u32,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    state: State,
    generation: u64,
    consecutive: u32,
    buckets: [Bucket; BUCKETS],
    bucket_width_us: u64,
    open_until_us: u64,
    next_trial_us: u64,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Breaker {
        Breaker {
            config,
            state: State::Closed,
            generation: 0,
            consecutive: 0,
            buckets: [Bucket::default(); BUCKETS],
            bucket_width_us: (config.interval.as_micros() as u64 / BUCKETS as u64).max(1),
            open_until_us: 0,
            next_trial_us: 0,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Whether a call may go to the store now. In half-open, a `Some`
    /// ticket is the trial; the others are answered by policy.
    pub fn admit(&mut self, now_us: u64) -> (Option<Ticket>, Option<Transition>) {
        let mut transition = None;
        if self.state == State::Open && now_us >= self.open_until_us {
            self.enter(State::HalfOpen);
            self.next_trial_us = now_us;
            transition = Some(Transition::HalfOpened);
        }
        let ticket = match self.state {
            State::Closed => Some(self.ticket()),
            State::Open => None,
            // One trial per interval rather than "one in flight": a trial
            // whose caller went away never reports, and must not wedge it.
            State::HalfOpen if now_us >= self.next_trial_us => {
                self.next_trial_us = now_us + self.config.trial_interval.as_micros() as u64;
                Some(self.ticket())
            }
            State::HalfOpen => None,
        };
        (ticket, transition)
    }

    /// Records how an admitted call ended: `failed` when the store was
    /// unreachable or too slow (not for answers such as a script error).
    pub fn record(&mut self, ticket: Ticket, failed: bool, now_us: u64) -> Option<Transition> {
        if ticket.generation != self.generation {
            return None;
        }
        match self.state {
            State::Closed => {
                self.count(failed, now_us);
                let reason = self.should_open(now_us)?;
                self.open(now_us);
                Some(Transition::Opened(reason))
            }
            State::HalfOpen if failed => {
                self.open(now_us);
                Some(Transition::Opened(OpenReason::TrialFailed))
            }
            State::HalfOpen => {
                self.enter(State::Closed);
                Some(Transition::Closed)
            }
            // Unreachable: opening bumps the generation.
            State::Open => None,
        }
    }

    /// The prober saw the store answer. After an outage (`at_once`), try a
    /// real call now instead of waiting out the open period; otherwise only
    /// once it is over, so an idle breaker is not left open for want of a
    /// check to move it (readiness would keep traffic away for good).
    pub fn store_recovered(&mut self, now_us: u64, at_once: bool) -> Option<Transition> {
        if self.state != State::Open || !(at_once || now_us >= self.open_until_us) {
            return None;
        }
        self.enter(State::HalfOpen);
        self.next_trial_us = now_us;
        Some(Transition::HalfOpened)
    }

    fn ticket(&self) -> Ticket {
        Ticket {
            generation: self.generation,
        }
    }

    fn open(&mut self, now_us: u64) {
        self.enter(State::Open);
        self.open_until_us = now_us + self.config.open_for.as_micros() as u64;
    }

    /// Every transition starts a new generation with fresh statistics.
    fn enter(&mut self, state: State) {
        self.state = state;
        self.generation += 1;
        self.consecutive = 0;
        self.buckets = [Bucket::default(); BUCKETS];
    }

    fn count(&mut self, failed: bool, now_us: u64) {
        self.consecutive = if failed { self.consecutive + 1 } else { 0 };
        let epoch = now_us / self.bucket_width_us;
        let bucket = &mut self.buckets[epoch as usize % BUCKETS];
        if bucket.epoch != epoch {
            *bucket = Bucket {
                epoch,
                ..Bucket::default()
            };
        }
        bucket.calls += 1;
        bucket.failures += failed as u32;
    }

    fn should_open(&self, now_us: u64) -> Option<OpenReason> {
        if self.consecutive >= self.config.consecutive_failures {
            return Some(OpenReason::Consecutive);
        }
        let epoch = now_us / self.bucket_width_us;
        let (calls, failures) = self
            .buckets
            .iter()
            .filter(|b| b.calls > 0 && epoch.saturating_sub(b.epoch) < BUCKETS as u64)
            .fold((0u64, 0u64), |(c, f), b| {
                (c + b.calls as u64, f + b.failures as u64)
            });
        let sustained = calls >= self.config.min_calls as u64
            && failures as f64 >= self.config.failure_ratio * calls as f64;
        sustained.then_some(OpenReason::Ratio)
    }
}

#[cfg(test)]
mod tests {
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
}
