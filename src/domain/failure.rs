//! What to answer when the store cannot: the failure policy.
//!
//! A small value type, so that a policy (a later issue) can carry its own.

use std::time::Duration;

use super::{Check, Decision};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// Allow: the outage costs exactness, never availability.
    Open = 0,
    /// Deny: the outage costs availability, never the limit.
    Closed = 1,
    /// Answer from the instance's own embedded store with the same
    /// algorithms: each instance limits on its own, so an outage admits at
    /// most `limit` per instance. The limiter holds that store; when it
    /// cannot answer either, the answer is [`Open`](Self::Open)'s.
    Local = 2,
}

impl FailureMode {
    pub const ALL: [FailureMode; 3] = [FailureMode::Open, FailureMode::Closed, FailureMode::Local];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
            FailureMode::Local => "local",
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
    /// and a client should not throttle itself on a guess. `Local` answers
    /// from a store the limiter holds; this is its answer when that store
    /// cannot give one either.
    pub fn decide(&self, check: &Check) -> Decision {
        let window_ms = check.rule.window_us.div_ceil(1_000);
        match self.mode {
            FailureMode::Open | FailureMode::Local => Decision {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Algorithm, Rule};

    fn check() -> Check {
        Check {
            key: "k".into(),
            rule: Rule {
                algorithm: Algorithm::Gcra,
                limit: 10,
                window_us: 1_500,
                burst: 12,
            },
            cost: 3,
        }
    }

    fn policy(mode: FailureMode) -> FailurePolicy {
        FailurePolicy {
            mode,
            closed_retry_after: Duration::from_millis(1500),
        }
    }

    #[test]
    fn open_allows_with_the_full_capacity_and_closed_denies() {
        let open = policy(FailureMode::Open).decide(&check());
        assert_eq!(
            (open.allowed, open.remaining, open.degraded, open.window_ms),
            (true, 9, true, 2)
        );
        let closed = policy(FailureMode::Closed).decide(&check());
        assert_eq!(
            (closed.allowed, closed.retry_after_ms, closed.degraded),
            (false, 1500, true)
        );
        assert_eq!(policy(FailureMode::Local).decide(&check()), open);
    }
}
