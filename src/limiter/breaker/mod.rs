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
//! Failures that come together are one failure. Calls in flight at once
//! fail at once when their connection drops (every check pipelined on it),
//! or when one batch call that carried up to 128 checks fails; counting
//! each of them would open the breaker on a single event, such as a Redis
//! restart that is over in milliseconds. So a failed call adds to the
//! `consecutive_failures` run only if no counted failure was recorded while
//! it was in flight; the ones that overlapped such a failure neither add to
//! the run nor reset it. The price: a frozen Redis opens the breaker after
//! `consecutive_failures` rounds of timeouts (each round sent after the
//! previous one failed), about `consecutive_failures × redis.timeout`,
//! rather than after the first round. The ratio still counts every check,
//! so a partial failure under concurrency, where most failures overlap
//! another, still shows.
//!
//! Each admission carries the generation it was admitted in. A result from
//! an older generation (a call sent before the breaker opened, answered
//! after) is ignored, so a late success cannot close an open breaker and a
//! late failure cannot re-open a closed one.

use std::time::Duration;

pub use crate::domain::BreakerState as State;

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
///
/// It holds the low bits of the counters (31 of the generation, 32 of the
/// counted failures), so that it fits in a [`Breaker::snapshot`] word; a
/// ticket would need to stay in flight across 2^31 transitions to be
/// mistaken for a current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    generation: u32,
    /// `Breaker::counted_failures` when the call was admitted.
    counted_failures: u32,
}

const CLOSED_BIT: u64 = 1 << 63;
const GENERATION_MASK: u64 = (1 << 31) - 1;

impl Ticket {
    /// The ticket a closed breaker would hand out, from its
    /// [`Breaker::snapshot`]; `None` when it was not closed. Lets a caller
    /// admit a check to a closed breaker without locking it: the worst a
    /// stale snapshot does is admit a call whose result is then ignored,
    /// like one sent just before the breaker opened.
    pub fn from_snapshot(word: u64) -> Option<Ticket> {
        (word & CLOSED_BIT != 0).then_some(Ticket {
            generation: ((word >> 32) & GENERATION_MASK) as u32,
            counted_failures: word as u32,
        })
    }
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
    /// Failures counted into a run so far (never reset): a ticket that saw
    /// an older value overlapped one of them.
    counted_failures: u64,
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
            counted_failures: 0,
            buckets: [Bucket::default(); BUCKETS],
            bucket_width_us: (config.interval.as_micros() as u64 / BUCKETS as u64).max(1),
            open_until_us: 0,
            next_trial_us: 0,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// What [`Ticket::from_snapshot`] needs, in one word: 0 unless closed.
    /// Changes only in [`admit`](Self::admit), [`record`](Self::record)
    /// and [`store_recovered`](Self::store_recovered).
    pub fn snapshot(&self) -> u64 {
        match self.state {
            State::Closed => {
                let ticket = self.ticket();
                CLOSED_BIT | (ticket.generation as u64) << 32 | ticket.counted_failures as u64
            }
            _ => 0,
        }
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
        if ticket.generation != self.ticket().generation {
            return None;
        }
        match self.state {
            State::Closed => {
                self.count(failed, ticket.counted_failures, now_us);
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
            generation: (self.generation & GENERATION_MASK) as u32,
            counted_failures: self.counted_failures as u32,
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

    /// `seen`: `counted_failures` when the call was admitted.
    fn count(&mut self, failed: bool, seen: u32, now_us: u64) {
        if !failed {
            self.consecutive = 0;
        } else if seen == self.counted_failures as u32 {
            self.consecutive += 1;
            self.counted_failures += 1;
        }
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
mod tests;
