//! A rule (`limit` units per `window` by one algorithm), what a caller
//! writes for one, and the errors of its validation (`rule_validation.rs`).

use std::fmt;

use super::window::Window;

/// The largest `limit` (and `burst`) a rule may have.
pub const MAX_LIMIT: u64 = 1_000_000_000_000;

/// The six algorithms. Each has a Lua twin in `lua/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    Gcra,
    /// At most `limit` in flight: leases that live `window` unless
    /// released (`algorithms::concurrency`).
    Concurrency,
}

impl Algorithm {
    pub const ALL: [Algorithm; 6] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::Concurrency,
    ];

    /// The five rate algorithms: every one but concurrency, whose leases
    /// only a caller that comes back to release them can hold, so the RLS
    /// config and forward-auth policies name only these.
    pub const RATES: [Algorithm; 5] = [
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
            Algorithm::Concurrency => "concurrency",
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
            Algorithm::Concurrency => "cc",
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

    /// Whether a check's units can be given back exactly, as of the store
    /// time the check ran ([`give_back`](crate::domain::algorithms::give_back)):
    /// only the windows keep a count per period that says which units a
    /// check added.
    pub fn gives_back(self) -> bool {
        matches!(self, Algorithm::FixedWindow | Algorithm::SlidingWindow)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is being limited: `limit` units per `window`, by one algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    pub algorithm: Algorithm,
    pub limit: u64,
    /// A length, or calendar periods (fixed_window only).
    pub window: Window,
    /// Bucket capacity for token_bucket/gcra; equal to `limit` otherwise.
    pub burst: u64,
}

impl Rule {
    /// A rule over a window of a fixed length.
    pub fn with_length(algorithm: Algorithm, limit: u64, window_us: u64, burst: u64) -> Rule {
        Rule {
            algorithm,
            limit,
            window: Window::Length(window_us),
            burst,
        }
    }

    /// The window's length: a calendar window's usual one
    /// ([`Window::nominal_us`]). Only a fixed_window may be a calendar
    /// window, and it uses [`Window::period`] rather than this.
    pub fn window_us(&self) -> u64 {
        self.window.nominal_us()
    }

    /// The time one unit takes to refill (token_bucket, gcra), rounded down to
    /// whole microseconds. Validation guarantees it is at least 1.
    pub fn emission_interval_us(&self) -> u64 {
        self.window_us() / self.limit
    }

    /// The most one check may spend: `burst` for buckets, `limit` otherwise.
    /// A larger cost could never be allowed.
    pub fn capacity(&self) -> u64 {
        if self.algorithm.has_burst() {
            self.burst
        } else {
            self.limit
        }
    }
}

/// How a window was written by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowInput {
    Seconds(u64),
    Text(String),
}

/// An unvalidated rule as written in a request or a policies file.
#[derive(Debug, Clone, Default)]
pub struct RuleInput {
    pub limit: u64,
    /// A length; exactly one of `window` and `calendar` is required.
    pub window: Option<WindowInput>,
    /// A calendar unit's name (`day`, `week`, `month`, `year`).
    pub calendar: Option<String>,
    /// The calendar's IANA time zone. Default: UTC.
    pub timezone: Option<String>,
    /// A concurrency limit's lease TTL, instead of a window (required for
    /// concurrency, refused for the others).
    pub lease_ttl: Option<WindowInput>,
    /// Default: sliding_window.
    pub algorithm: Option<Algorithm>,
    pub burst: Option<u64>,
}

/// Limits that come from configuration rather than the protocol.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_key_bytes: usize,
    pub max_sliding_log_limit: u64,
    /// How many limits one check (a policy, or an inline `limits` array) may hold.
    pub max_limits_per_check: usize,
    /// Longest `wait_ms` a check may ask for (`limits.max_wait`).
    pub max_wait_ms: u64,
    /// Most checks waiting at once (`limits.max_waiters`); beyond it a
    /// check is answered at once.
    pub max_waiters: usize,
    /// Most of them in one line (one key, policy and limits:
    /// `limits.max_waiters_per_key`), so one key cannot take every place.
    pub max_waiters_per_key: usize,
    /// Longest `lease_ttl` of a concurrency limit (`limits.max_lease_ttl`).
    pub max_lease_ttl_us: u64,
    /// Longest `reservation_ttl` of a check (`limits.max_reservation_ttl`).
    pub max_reservation_ttl_us: u64,
    /// Largest `limit` of a concurrency limit (`limits.max_concurrency`):
    /// one key's leases are that many sorted-set members at most.
    pub max_concurrency: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_key_bytes: 512,
            max_sliding_log_limit: 100_000,
            max_limits_per_check: 8,
            max_wait_ms: 10_000,
            max_waiters: 10_000,
            max_waiters_per_key: 1_000,
            max_lease_ttl_us: 3_600_000_000,
            max_reservation_ttl_us: 3_600_000_000,
            max_concurrency: 10_000,
        }
    }
}

/// A well-formed request with a value out of range. Names the field, with
/// its path when it sits inside a list (`limits[1].window`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    pub field: String,
    pub message: String,
}

impl ValidationError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> ValidationError {
        ValidationError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error under `prefix` (`limits[1]` + `window` → `limits[1].window`).
    pub fn within(self, prefix: &str) -> ValidationError {
        ValidationError {
            field: format!("{prefix}.{}", self.field),
            message: self.message,
        }
    }
}

pub(super) fn invalid(field: &'static str, message: impl Into<String>) -> ValidationError {
    ValidationError::new(field, message)
}

/// Policy and limit names: `[a-z0-9_.-]{1,64}`. They appear in storage keys,
/// metric labels and `RateLimit` headers, so they may hold nothing that
/// needs quoting in any of those.
pub fn validate_name(field: &str, name: &str) -> Result<(), ValidationError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            field,
            format!("must match [a-z0-9_.-]{{1,64}}, got {name:?}"),
        ))
    }
}
