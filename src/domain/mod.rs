//! The rate-limit domain: what a check asks, what a decision answers, and the
//! algorithms as pure functions of `(state, now, rule, cost)`.
//!
//! Nothing here knows about HTTP, Redis or tokio. The embedded store runs
//! these functions directly; the Lua scripts in `lua/` implement the same
//! arithmetic and the parity tests hold the two to identical answers.
//!
//! Time is in **microseconds** everywhere inside the domain: Redis `TIME`
//! has that resolution, integer microseconds since the epoch stay below
//! 2^53 (so Lua's doubles represent them exactly), and token-bucket/GCRA
//! emission intervals need sub-millisecond precision. Milliseconds appear
//! only at the API edge, always rounded *up* so a client that waits
//! `retry_after_ms` is never early.

pub mod algorithms;
pub mod auth;
mod check;
mod clock;
mod decision;
mod duration;
pub mod failure;
mod failure_mode;
pub mod forward;
mod lease;
pub mod lease_mode;
pub mod level;
mod limit;
pub mod policy;
pub mod reservation;
pub mod rls;
mod rule;
mod rule_validation;
pub mod state_key;
pub mod tenants;
mod window;
mod window_input;

pub use check::{
    Check, CheckInput, DEFAULT_LIMIT_NAME, LimitInput, validate_count, validate_leases,
    validate_wait_ms,
};
pub use clock::{Clock, ManualClock, MonotonicClock, SystemClock};
pub use decision::{BLOCKED_RETRY_MS, Decision, HeaderText, LimitDecision, Outcome, TenantMark};
pub use duration::{MAX_WINDOW_US, format_duration_us, parse_duration_us};
pub use failure::FailurePolicy;
pub use failure_mode::{BreakerState, FailureMode};
pub use lease::{Lease, LeaseId};
pub use lease_mode::LeaseMode;
pub use level::{LevelInput, MAX_LEVELS};
pub use limit::{Level, Limit};
pub use policy::{Hierarchy, Policy, PolicyFileError, PolicySet, Problem};
pub use reservation::{Granted, Reservation};
pub use rule::{
    Algorithm, Bounds, MAX_LIMIT, Rule, RuleInput, ValidationError, WindowInput, validate_name,
};
pub use window::{Calendar, CalendarUnit, Window, Zone};
pub use window_input::reservation_ttl_ms;

/// Microseconds per millisecond.
pub const US_PER_MS: u64 = 1_000;

/// Converts microseconds to milliseconds, rounding up: a wait reported to a
/// client must never be shorter than the real one.
pub fn us_to_ms_ceil(us: u64) -> u64 {
    us.div_ceil(US_PER_MS)
}
