//! A rule as written ([`RuleInput`]) validated into a [`Rule`]: its limit,
//! its window ([`window_of`]) and its burst. Apart from `rule.rs` so that
//! the rule's types import nothing of their validation.

use super::duration::MAX_WINDOW_US;
use super::rule::{
    Algorithm, Bounds, MAX_LIMIT, Rule, RuleInput, ValidationError, WindowInput, invalid,
};
use super::window::Window;
use super::window_input::window_of;

impl Rule {
    /// Validates `input` into a rule. Errors name the rule's own fields
    /// (`limit`, `window`, `burst`); callers add the path.
    pub fn new(input: &RuleInput, bounds: &Bounds) -> Result<Rule, ValidationError> {
        // A calendar window is a fixed window's, so that is its default.
        let algorithm = input.algorithm.unwrap_or(if input.calendar.is_some() {
            Algorithm::FixedWindow
        } else {
            Algorithm::SlidingWindow
        });
        let limit = input.limit;
        check_limit(algorithm, limit, bounds)?;
        let window = window_of(input, algorithm, bounds)?;
        let window_us = window.nominal_us();

        let burst = burst_of(input.burst, algorithm, limit, window_us)?;
        Ok(Rule {
            algorithm,
            limit,
            window,
            burst,
        })
    }

    /// This rule with a runtime override's changes (`/v1/overrides`): a new
    /// `limit`, and for the buckets a `burst`. The algorithm and the window
    /// stay (a `window` may be given only as the policy's own): they name
    /// the counter, so the units already spent are the same counters, read
    /// against the new numbers. A `burst` not given is the new limit, as
    /// everywhere else.
    pub fn changed(
        &self,
        limit: u64,
        burst: Option<u64>,
        window: Option<&WindowInput>,
        bounds: &Bounds,
    ) -> Result<Rule, ValidationError> {
        let algorithm = self.algorithm;
        check_limit(algorithm, limit, bounds)?;
        let window = match (window, self.window) {
            (None, window) => window,
            (Some(_), _) if algorithm == Algorithm::Concurrency => {
                return Err(invalid("window", "a concurrency limit has no window"));
            }
            (Some(_), Window::Calendar(_)) => {
                return Err(invalid(
                    "window",
                    "a calendar limit keeps its calendar: an override changes its limit",
                ));
            }
            (Some(w), Window::Length(length)) => {
                let input = RuleInput {
                    limit,
                    window: Some(w.clone()),
                    algorithm: Some(algorithm),
                    ..RuleInput::default()
                };
                let window = window_of(&input, algorithm, bounds)?;
                // The window is part of where the counter lives: another
                // one would start a fresh count, a budget nobody granted.
                if window.nominal_us() != length {
                    return Err(invalid(
                        "window",
                        "an override keeps the policy's window (it names the counter: another \
                         window would start counting afresh); change limit and burst, or the \
                         policy's window in the policies file",
                    ));
                }
                window
            }
        };
        let burst = burst_of(burst, algorithm, limit, window.nominal_us())?;
        Ok(Rule {
            algorithm,
            limit,
            window,
            burst,
        })
    }
}

/// A limit's own bounds: its range, and sliding_log's cap.
fn check_limit(algorithm: Algorithm, limit: u64, bounds: &Bounds) -> Result<(), ValidationError> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}, got {limit}"),
        ));
    }
    if algorithm == Algorithm::SlidingLog && limit > bounds.max_sliding_log_limit {
        return Err(invalid(
            "limit",
            format!(
                "sliding_log's limit is capped at {} (limits.max_sliding_log_limit), got {limit}; \
                 use sliding_window for large limits",
                bounds.max_sliding_log_limit
            ),
        ));
    }
    Ok(())
}

/// A rule's `burst` (default `limit`), for buckets only, with the bucket
/// bounds that involve it and the window.
fn burst_of(
    burst: Option<u64>,
    algorithm: Algorithm,
    limit: u64,
    window_us: u64,
) -> Result<u64, ValidationError> {
    let burst = match (burst, algorithm.has_burst()) {
        (None, _) => limit,
        (Some(_), false) => {
            return Err(invalid("burst", "only applies to token_bucket and gcra"));
        }
        (Some(b), true) if !(1..=MAX_LIMIT).contains(&b) => {
            return Err(invalid(
                "burst",
                format!("must be between 1 and {MAX_LIMIT}, got {b}"),
            ));
        }
        (Some(b), true) => b,
    };

    if algorithm.has_burst() {
        // Buckets refill one unit every window/limit, in whole microseconds.
        if limit > window_us {
            return Err(invalid(
                "limit",
                format!(
                    "{algorithm} refills at most one unit per microsecond: limit must be at most {window_us} for this window"
                ),
            ));
        }
        // Keeping burst × interval within the longest window bounds every
        // timestamp the scripts compute below 2^53, where Lua is exact.
        let refill_us = u128::from(burst) * u128::from(window_us / limit);
        if refill_us > u128::from(MAX_WINDOW_US) {
            return Err(invalid(
                "burst",
                "refilling the whole bucket (burst × window / limit) must take at most 366d",
            ));
        }
    }
    Ok(burst)
}
