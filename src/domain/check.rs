//! A validated check: the rule to apply, the client key, and the cost.

use std::fmt;

use super::duration::MAX_WINDOW_US;

/// The largest `limit` (and `burst`) a rule may have.
pub const MAX_LIMIT: u64 = 1_000_000_000_000;

/// The five algorithms. Each has a Lua twin in `lua/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    Gcra,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];

    /// The API name, also used as the metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// The short tag used in storage keys, so keys stay small. `sl2`: the
    /// sliding log changed its stored format (one entry per instant, not per
    /// unit), so it reads new keys and leaves old `sl` ones to expire.
    pub fn key_tag(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fw",
            Algorithm::SlidingWindow => "sw",
            Algorithm::SlidingLog => "sl2",
            Algorithm::TokenBucket => "tb",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Position in [`Algorithm::ALL`], for metric handle arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether `burst` applies (bucket-shaped algorithms).
    pub fn has_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is being limited: `limit` units per `window`, by one algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub algorithm: Algorithm,
    pub limit: u64,
    pub window_us: u64,
    /// Bucket capacity for token_bucket/gcra; equal to `limit` otherwise.
    pub burst: u64,
}

impl Rule {
    /// The time one unit takes to refill (token_bucket, gcra), rounded down to
    /// whole microseconds. Validation guarantees it is at least 1.
    pub fn emission_interval_us(&self) -> u64 {
        self.window_us / self.limit
    }
}

/// A request to spend `cost` units of `rule` on `key`, already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub key: String,
    pub rule: Rule,
    pub cost: u64,
}

/// How a window was written by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowInput {
    Seconds(u64),
    Text(String),
}

/// An unvalidated check as it arrives from a transport.
#[derive(Debug, Clone)]
pub struct CheckInput {
    pub key: String,
    pub limit: u64,
    pub window: WindowInput,
    pub algorithm: Option<Algorithm>,
    pub cost: Option<u64>,
    pub burst: Option<u64>,
}

/// Limits that come from configuration rather than the protocol.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_key_bytes: usize,
    pub max_sliding_log_limit: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_key_bytes: 512,
            max_sliding_log_limit: 100_000,
        }
    }
}

/// A well-formed request with a value out of range. Names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    pub field: &'static str,
    pub message: String,
}

fn invalid(field: &'static str, message: impl Into<String>) -> ValidationError {
    ValidationError {
        field,
        message: message.into(),
    }
}

impl Check {
    pub fn new(input: CheckInput, bounds: &Bounds) -> Result<Check, ValidationError> {
        let algorithm = input.algorithm.unwrap_or(Algorithm::SlidingWindow);

        let key_len = input.key.len();
        if key_len == 0 || key_len > bounds.max_key_bytes {
            return Err(invalid(
                "key",
                format!(
                    "must be 1 to {} bytes of UTF-8, got {key_len}",
                    bounds.max_key_bytes
                ),
            ));
        }

        let limit = input.limit;
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

        let window_us = match &input.window {
            WindowInput::Seconds(s) => s.checked_mul(1_000_000).unwrap_or(u64::MAX),
            WindowInput::Text(t) => {
                super::parse_duration_us(t).map_err(|m| invalid("window", m))?
            }
        };
        if !(1_000..=MAX_WINDOW_US).contains(&window_us) || window_us % 1_000 != 0 {
            return Err(invalid(
                "window",
                "must be a whole number of milliseconds from 1ms to 366d (e.g. \"250ms\", \"10s\", \"1m\", \"1h\", \"1d\", or seconds as an integer)",
            ));
        }

        let burst = match (input.burst, algorithm.has_burst()) {
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

        let cost = input.cost.unwrap_or(1);
        let max_cost = if algorithm.has_burst() { burst } else { limit };
        if cost > max_cost {
            let what = if algorithm.has_burst() {
                "burst"
            } else {
                "limit"
            };
            return Err(invalid(
                "cost",
                format!("must be between 0 and the {what} ({max_cost}), got {cost}"),
            ));
        }

        Ok(Check {
            key: input.key,
            rule: Rule {
                algorithm,
                limit,
                window_us,
                burst,
            },
            cost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(algorithm: Algorithm) -> CheckInput {
        CheckInput {
            key: "k".into(),
            limit: 10,
            window: WindowInput::Text("1s".into()),
            algorithm: Some(algorithm),
            cost: None,
            burst: None,
        }
    }

    fn field_of(input: CheckInput) -> &'static str {
        Check::new(input, &Bounds::default()).unwrap_err().field
    }

    #[test]
    fn defaults_to_sliding_window_cost_one_burst_limit() {
        let mut i = input(Algorithm::Gcra);
        i.algorithm = None;
        let c = Check::new(i, &Bounds::default()).unwrap();
        assert_eq!(c.rule.algorithm, Algorithm::SlidingWindow);
        assert_eq!((c.cost, c.rule.burst, c.rule.window_us), (1, 10, 1_000_000));
    }

    #[test]
    fn integer_window_is_seconds() {
        let mut i = input(Algorithm::FixedWindow);
        i.window = WindowInput::Seconds(60);
        assert_eq!(
            Check::new(i, &Bounds::default()).unwrap().rule.window_us,
            60_000_000
        );
    }

    #[test]
    fn names_the_bad_field() {
        let mut i = input(Algorithm::FixedWindow);
        i.key = String::new();
        assert_eq!(field_of(i), "key");
        let mut i = input(Algorithm::FixedWindow);
        i.limit = 0;
        assert_eq!(field_of(i), "limit");
        let mut i = input(Algorithm::FixedWindow);
        i.limit = MAX_LIMIT + 1;
        assert_eq!(field_of(i), "limit");
        let mut i = input(Algorithm::SlidingLog);
        i.limit = 100_001;
        assert_eq!(field_of(i), "limit");
        let mut i = input(Algorithm::FixedWindow);
        i.window = WindowInput::Seconds(0);
        assert_eq!(field_of(i), "window");
        let mut i = input(Algorithm::FixedWindow);
        i.window = WindowInput::Text("367d".into());
        assert_eq!(field_of(i), "window");
        let mut i = input(Algorithm::FixedWindow);
        i.cost = Some(11);
        assert_eq!(field_of(i), "cost");
        let mut i = input(Algorithm::FixedWindow);
        i.burst = Some(5);
        assert_eq!(field_of(i), "burst");
        let mut i = input(Algorithm::TokenBucket);
        i.burst = Some(5);
        i.cost = Some(6);
        assert_eq!(field_of(i), "cost");
        let mut i = input(Algorithm::Gcra);
        i.limit = 2_000_000;
        assert_eq!(field_of(i), "limit");
    }

    #[test]
    fn key_may_hold_any_utf8() {
        let mut i = input(Algorithm::FixedWindow);
        i.key = "a {b}\n ü".into();
        assert!(Check::new(i, &Bounds::default()).is_ok());
    }
}
