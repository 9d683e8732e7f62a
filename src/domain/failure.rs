//! What to answer when the store cannot: the failure policy.
//!
//! A small value type, so that a policy (a later issue) can carry its own.

use std::time::Duration;

use super::{Check, Decision};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    Open = 0,
    Closed = 1,
}

impl FailureMode {
    pub const ALL: [FailureMode; 2] = [FailureMode::Open, FailureMode::Closed];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct FailurePolicy {
    pub mode: FailureMode,
    /// `retry_after` of a fail-closed denial.
    pub closed_retry_after: Duration,
}

impl FailurePolicy {
    /// The answer when the store cannot give one. Fail-open reports the rule's
    /// full capacity (`burst`, which is `limit` for the window algorithms)
    /// less this cost, as for a key never seen: the true count is unknown,
    /// and a client should not throttle itself on a guess.
    pub fn decide(&self, check: &Check) -> Decision {
        let window_ms = check.rule.window_us.div_ceil(1_000);
        match self.mode {
            FailureMode::Open => Decision {
                allowed: true,
                limit: check.rule.limit,
                remaining: check.rule.burst.saturating_sub(check.cost),
                retry_after_ms: 0,
                reset_after_ms: 0,
                degraded: true,
                window_ms,
            },
            FailureMode::Closed => {
                let retry = self.closed_retry_after.as_millis() as u64;
                Decision {
                    allowed: false,
                    limit: check.rule.limit,
                    remaining: 0,
                    retry_after_ms: retry,
                    reset_after_ms: retry,
                    degraded: true,
                    window_ms,
                }
            }
        }
    }
}
