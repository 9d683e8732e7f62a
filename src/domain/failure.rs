//! What to answer when the store cannot: the failure policy, and the
//! states of the circuit breaker that decides when the store cannot.
//!
//! Small value types: a policy may carry its own mode (`Check::failure_mode`).

use std::time::Duration;

pub use super::failure_mode::{BreakerState, FailureMode};
use super::{Algorithm, Check, Decision, Outcome};

#[derive(Debug, Clone, Copy)]
pub struct FailurePolicy {
    pub mode: FailureMode,
    /// `retry_after` of a fail-closed denial.
    pub closed_retry_after: Duration,
}

impl FailurePolicy {
    /// The mode for `check`: its policy's own, or the service's.
    pub fn mode_for(&self, check: &Check) -> FailureMode {
        check.failure_mode.unwrap_or(self.mode)
    }

    /// The answer when the store cannot give one, in `mode`. Fail-open
    /// reports each limit's full capacity (`burst`, which is `limit` for
    /// the window algorithms) less this cost, as for a key never seen: the
    /// true count is unknown, and a client should not throttle itself on a
    /// guess. `Local` answers from a store the limiter holds; this is its
    /// answer when that store cannot give one either.
    pub fn decide(&self, mode: FailureMode, check: &Check) -> Decision {
        let outcomes: Vec<Outcome> = check
            .limits
            .iter()
            .map(|l| match mode {
                FailureMode::Open | FailureMode::Local => Outcome {
                    allowed: true,
                    // A concurrency limit counts a request as one slot.
                    remaining: match l.rule.algorithm {
                        Algorithm::Concurrency => l.rule.limit.saturating_sub(check.cost.min(1)),
                        _ => l.rule.burst.saturating_sub(check.cost),
                    },
                    retry_after_us: 0,
                    reset_after_us: 0,
                },
                FailureMode::Closed => {
                    let retry = self.closed_retry_after.as_micros() as u64;
                    Outcome {
                        allowed: false,
                        remaining: 0,
                        retry_after_us: retry,
                        reset_after_us: retry,
                    }
                }
            })
            .collect();
        Decision::from_outcomes(check, &outcomes).degraded()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Algorithm, Rule};

    fn check() -> Check {
        Check::single(
            "k",
            Rule {
                algorithm: Algorithm::Gcra,
                limit: 10,
                window: crate::domain::Window::Length(1_500),
                burst: 12,
            },
            3,
        )
    }

    fn policy(mode: FailureMode) -> FailurePolicy {
        FailurePolicy {
            mode,
            closed_retry_after: Duration::from_millis(1500),
        }
    }

    #[test]
    fn open_allows_with_the_full_capacity_and_closed_denies() {
        let decide = |mode| policy(mode).decide(mode, &check());
        let open = decide(FailureMode::Open);
        assert_eq!(
            (open.allowed, open.remaining, open.degraded, open.window_ms),
            (true, 9, true, 2)
        );
        let closed = decide(FailureMode::Closed);
        assert_eq!(
            (closed.allowed, closed.retry_after_ms, closed.degraded),
            (false, 1500, true)
        );
        assert_eq!(decide(FailureMode::Local), open);
        let mut own = check();
        own.failure_mode = Some(FailureMode::Closed);
        assert_eq!(
            policy(FailureMode::Open).mode_for(&own),
            FailureMode::Closed
        );
    }
}
