//! The six algorithms as pure functions. Each takes the key's state (a
//! `Default` state means "never seen"), the rule, the current time and the
//! cost, updates the state and returns the [`Outcome`].
//!
//! Shared conventions, mirrored line for line by `lua/*.lua`:
//! - `need = max(cost, 1)`: a check is allowed iff `need` units are
//!   available, so `cost: 0` asks "is at least one unit left?" and consumes
//!   nothing.
//! - Denied checks consume nothing.
//! - State is written only when a check is allowed and spends (`cost > 0`),
//!   exactly when the Lua writes. Rolling a window or refilling a bucket
//!   happens on a copy: it is a function of time, so storing it would change
//!   nothing going forward, except when the clock steps back, and then the
//!   two sides must still hold the same state.
//! - Counters and timestamps are integers below 2^53; the one place floats
//!   appear (sliding window weighting) uses the same IEEE operations in the
//!   same order as the Lua, so both produce bit-identical results.

pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod give_back;
pub mod settle;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

pub use give_back::{GiveBackUnsupported, give_back_all};
pub use settle::{MAX_SETTLE_CAPACITIES, settle_all};

use super::{Algorithm, Outcome, Rule};

/// The stored state of one key under one algorithm.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    FixedWindow(fixed_window::FixedWindowState),
    SlidingWindow(sliding_window::SlidingWindowState),
    SlidingLog(sliding_log::SlidingLogState),
    TokenBucket(token_bucket::TokenBucketState),
    Gcra(gcra::GcraState),
    Concurrency(concurrency::ConcurrencyState),
}

impl State {
    /// The "never seen" state for `algorithm`.
    pub fn fresh(algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::FixedWindow => State::FixedWindow(Default::default()),
            Algorithm::SlidingWindow => State::SlidingWindow(Default::default()),
            Algorithm::SlidingLog => State::SlidingLog(Default::default()),
            Algorithm::TokenBucket => State::TokenBucket(Default::default()),
            Algorithm::Gcra => State::Gcra(Default::default()),
            Algorithm::Concurrency => State::Concurrency(Default::default()),
        }
    }

    /// Runs the rule's algorithm on this state. A state of another algorithm
    /// is replaced by a fresh one (storage keys include the algorithm, so this
    /// only happens if a caller mixes them up).
    ///
    /// ```
    /// use ratekeeper::domain::algorithms::State;
    /// use ratekeeper::domain::{Algorithm, Rule};
    ///
    /// // 10 per second, bucket of 3: spending 3 leaves nothing, and one more
    /// // token arrives 100 ms later.
    /// let rule = Rule::with_length(Algorithm::Gcra, 10, 1_000_000, 3);
    /// let mut state = State::fresh(Algorithm::Gcra);
    /// let first = state.apply(&rule, 0, 3);
    /// assert!(first.allowed && first.remaining == 0);
    /// let denied = state.apply(&rule, 0, 1);
    /// assert_eq!((denied.allowed, denied.retry_after_us), (false, 100_000));
    /// ```
    pub fn apply(&mut self, rule: &Rule, now_us: u64, cost: u64) -> Outcome {
        self.apply_leased(rule, now_us, cost, "")
    }

    /// [`State::apply`] for a check that acquires the lease `lease` on a
    /// concurrency limit (the other algorithms ignore it). The Lua sends
    /// `''` when a check carries no lease, and so does [`State::apply`].
    pub fn apply_leased(&mut self, rule: &Rule, now_us: u64, cost: u64, lease: &str) -> Outcome {
        if !self.is(rule.algorithm) {
            *self = State::fresh(rule.algorithm);
        }
        match self {
            State::FixedWindow(s) => fixed_window::check(s, rule, now_us, cost),
            State::SlidingWindow(s) => sliding_window::check(s, rule, now_us, cost),
            State::SlidingLog(s) => sliding_log::check(s, rule, now_us, cost),
            State::TokenBucket(s) => token_bucket::check(s, rule, now_us, cost),
            State::Gcra(s) => gcra::check(s, rule, now_us, cost),
            State::Concurrency(s) => concurrency::check(s, rule, now_us, cost, lease),
        }
    }

    /// Releases (`renew: false`) or renews the lease `lease` of a
    /// concurrency limit; whether it was live. Any other algorithm's state
    /// is left alone and answers `None`.
    pub fn lease(&mut self, rule: &Rule, now_us: u64, lease: &str, renew: bool) -> Option<bool> {
        if rule.algorithm != Algorithm::Concurrency {
            return None;
        }
        if !self.is(rule.algorithm) {
            *self = State::fresh(rule.algorithm);
        }
        let State::Concurrency(s) = self else {
            return None;
        };
        Some(if renew {
            concurrency::renew(s, rule, now_us, lease)
        } else {
            concurrency::release(s, now_us, lease)
        })
    }

    /// Gives back up to `cost` units of the most recent spending, never
    /// beyond full capacity; a state never seen is left alone. Returns
    /// `Some(us)` when the state was rewritten to live `us` more (the
    /// buckets: their Lua sets that expiry), `None` when the expiry stays
    /// (the windows and the log only ever shrink, so the last spend's
    /// expiry still covers them).
    pub fn refund(&mut self, rule: &Rule, now_us: u64, cost: u64) -> Option<u64> {
        // Nothing to give back, so nothing to rewrite (`refund_all` in the
        // Lua skips a cost of 0 the same way).
        if cost == 0 {
            return None;
        }
        if !self.is(rule.algorithm) {
            *self = State::fresh(rule.algorithm);
        }
        match self {
            State::FixedWindow(s) => fixed_window::refund(s, rule, now_us, cost),
            State::SlidingWindow(s) => sliding_window::refund(s, rule, now_us, cost),
            State::SlidingLog(s) => sliding_log::refund(s, rule, now_us, cost),
            State::TokenBucket(s) => return token_bucket::refund(s, rule, now_us, cost),
            State::Gcra(s) => return gcra::refund(s, rule, now_us, cost),
            // Only a release frees a lease (see `concurrency`).
            State::Concurrency(_) => {}
        }
        None
    }

    fn is(&self, algorithm: Algorithm) -> bool {
        matches!(
            (self, algorithm),
            (State::FixedWindow(_), Algorithm::FixedWindow)
                | (State::SlidingWindow(_), Algorithm::SlidingWindow)
                | (State::SlidingLog(_), Algorithm::SlidingLog)
                | (State::TokenBucket(_), Algorithm::TokenBucket)
                | (State::Gcra(_), Algorithm::Gcra)
                | (State::Concurrency(_), Algorithm::Concurrency)
        )
    }
}

/// All or nothing over the limits of one check. If every limit allows
/// `cost` (and `cost > 0`), each spends it and reports what it decided.
/// Otherwise a check of several limits writes nothing, not even a sliding
/// log's trim: a denying limit reports its denial, and a limit that would
/// have allowed reports its state as it is (a zero-cost look on a copy, so
/// its `remaining` and `reset` are not those of a spend that did not
/// happen). The Lua twin is `check_all` in `lua/check.lua`.
///
/// ```
/// use ratekeeper::domain::algorithms::{State, apply_all};
/// use ratekeeper::domain::{Algorithm, Rule};
///
/// let burst = Rule::with_length(Algorithm::FixedWindow, 1, 1_000_000, 1);
/// let daily = Rule::with_length(Algorithm::FixedWindow, 5, 86_400_000_000, 5);
/// let mut states = [State::fresh(Algorithm::FixedWindow), State::fresh(Algorithm::FixedWindow)];
/// assert!(apply_all(&mut states, &[&burst, &daily], 0, 1).iter().all(|o| o.allowed));
/// let second = apply_all(&mut states, &[&burst, &daily], 0, 1);
/// assert!(!second[0].allowed && second[1].allowed);
/// // The denied check spent nothing of the daily limit: 4 left, not 3.
/// assert_eq!(second[1].remaining, 4);
/// ```
pub fn apply_all(states: &mut [State], rules: &[&Rule], now_us: u64, cost: u64) -> Vec<Outcome> {
    apply_all_leased(states, rules, now_us, cost, "")
}

/// [`apply_all`] for a check acquiring the lease `lease` on its
/// concurrency limit, if it has one (`check_all` hands the operation's
/// lease to every limit's function; only concurrency reads it).
pub fn apply_all_leased(
    states: &mut [State],
    rules: &[&Rule],
    now_us: u64,
    cost: u64,
    lease: &str,
) -> Vec<Outcome> {
    debug_assert_eq!(states.len(), rules.len());
    if let ([state], [rule]) = (&mut *states, rules) {
        // One limit: `apply` already writes only when it allows.
        return vec![state.apply_leased(rule, now_us, cost, lease)];
    }
    let mut outcomes: Vec<Outcome> = states
        .iter()
        .zip(rules)
        .map(|(state, rule)| state.clone().apply_leased(rule, now_us, cost, lease))
        .collect();
    // A cost of 0 spends nothing, so there is nothing to write: the states
    // stay exactly as they were, as in the Lua, whose write pass runs only
    // for a positive cost (rewriting would drop a sliding log's expired
    // entries, which a clock stepping back would count again).
    let all_allow = outcomes.iter().all(|o| o.allowed);
    for ((state, rule), outcome) in states.iter_mut().zip(rules).zip(&mut outcomes) {
        if all_allow {
            if cost > 0 {
                state.apply_leased(rule, now_us, cost, lease);
            }
        } else if outcome.allowed {
            // Nothing is spent: look at this limit as it is, on a copy, as
            // the Lua's dry look writes nothing either.
            *outcome = state.clone().apply(rule, now_us, 0);
        }
    }
    outcomes
}

/// Deletes the state of every limit, then answers like a check of cost 0
/// (`reset_all` in `lua/adjust.lua`).
pub fn reset_all(states: &mut [State], rules: &[&Rule], now_us: u64) -> Vec<Outcome> {
    for (state, rule) in states.iter_mut().zip(rules) {
        *state = State::fresh(rule.algorithm);
    }
    apply_all(states, rules, now_us, 0)
}

/// Gives back up to `cost` units on every limit, each on its own (not all
/// or nothing: a refund only ever makes room), then answers like a check
/// of cost 0 (`refund_all` in `lua/adjust.lua`).
pub fn refund_all(states: &mut [State], rules: &[&Rule], now_us: u64, cost: u64) -> Vec<Outcome> {
    for (state, rule) in states.iter_mut().zip(rules) {
        state.refund(rule, now_us, cost);
    }
    apply_all(states, rules, now_us, 0)
}

/// Releases (`renew: false`) or renews the lease `lease` on the
/// concurrency limit among `rules`, then answers like a check of cost 0
/// (`lease_all` in `lua/adjust.lua`). Whether the lease was live: `None`
/// when no limit is a concurrency limit.
pub fn lease_all(
    states: &mut [State],
    rules: &[&Rule],
    now_us: u64,
    lease: &str,
    renew: bool,
) -> (Option<bool>, Vec<Outcome>) {
    let mut live = None;
    for (state, rule) in states.iter_mut().zip(rules) {
        if let Some(was) = state.lease(rule, now_us, lease, renew) {
            live = Some(live.unwrap_or(false) || was);
        }
    }
    (live, apply_all(states, rules, now_us, 0))
}

#[cfg(test)]
mod give_back_tests;

#[cfg(test)]
mod refund_tests;

#[cfg(test)]
mod settle_tests;

#[cfg(test)]
mod apply_all_tests {
    use super::test_support::*;
    use super::*;

    /// A check of several limits that spends nothing writes nothing: not
    /// even a sliding log's expired entries go, since a clock stepping back
    /// would count them again (and the Lua leaves them).
    #[test]
    fn a_cost_zero_check_of_several_limits_changes_no_state() {
        let log = rule(Algorithm::SlidingLog, 1, 7 * MS);
        let daily = rule(Algorithm::FixedWindow, 5, 86_400 * SEC);
        let mut states = [
            State::fresh(Algorithm::SlidingLog),
            State::fresh(Algorithm::FixedWindow),
        ];
        let t = 1_000 * SEC;
        assert!(apply_all(&mut states, &[&log, &daily], t, 1)[0].allowed);
        let before = states.clone();
        let probe = apply_all(&mut states, &[&log, &daily], t + 10 * MS, 0);
        assert!(probe.iter().all(|o| o.allowed));
        assert_eq!(states, before);
        // Back before the entry left the window: it still counts.
        let back = apply_all(&mut states, &[&log, &daily], t + MS, 1);
        assert!(!back[0].allowed);
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub const MS: u64 = 1_000;
    pub const SEC: u64 = 1_000_000;

    pub fn rule(algorithm: Algorithm, limit: u64, window_us: u64) -> Rule {
        Rule {
            algorithm,
            limit,
            window: crate::domain::Window::Length(window_us),
            burst: limit,
        }
    }

    /// How many of 20 checks just before a window boundary and 20 at it pass,
    /// for a limit of 10 per 10 s.
    pub fn boundary_burst_allowed(algorithm: Algorithm) -> usize {
        let r = rule(algorithm, 10, 10 * SEC);
        let mut s = State::fresh(algorithm);
        let boundary = 1_000 * SEC;
        [boundary - MS, boundary]
            .iter()
            .map(|&t| (0..20).filter(|_| s.apply(&r, t, 1).allowed).count())
            .sum()
    }

    /// Asserts the retry-after is exact: the same check (on a copy of the
    /// state, so nothing is consumed) is denied 1 ms before it and allowed at it.
    pub fn assert_retry_exact(state: &State, rule: &Rule, now: u64, cost: u64, outcome: Outcome) {
        assert!(!outcome.allowed, "expected a denial, got {outcome:?}");
        let retry_ms = crate::domain::us_to_ms_ceil(outcome.retry_after_us);
        assert!(retry_ms > 0);
        let early = state.clone().apply(rule, now + (retry_ms - 1) * MS, cost);
        assert!(
            !early.allowed,
            "allowed 1ms before retry_after ({retry_ms}ms)"
        );
        let on_time = state.clone().apply(rule, now + retry_ms * MS, cost);
        assert!(
            on_time.allowed,
            "still denied at retry_after ({retry_ms}ms): {on_time:?}"
        );
    }
}
