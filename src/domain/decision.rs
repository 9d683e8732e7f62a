//! The answer to a check, from a store ([`Outcome`]) and as sent ([`Decision`]).

use super::{Check, us_to_ms_ceil};

/// What an algorithm decided, in microseconds. Identical from Lua and Rust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    /// Units still available after this check.
    pub remaining: u64,
    /// 0 when allowed; otherwise the smallest wait after which the same check
    /// would be allowed if nothing else arrives.
    pub retry_after_us: u64,
    /// Time until the key is back to full capacity if nothing else arrives.
    pub reset_after_us: u64,
}

/// The answer sent to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_ms: u64,
    pub reset_after_ms: u64,
    /// True when the failure policy answered because the store could not.
    pub degraded: bool,
    /// The rule's window, for the `RateLimit-Policy` header.
    pub window_ms: u64,
}

impl Decision {
    pub fn from_outcome(check: &Check, outcome: Outcome) -> Self {
        Decision {
            allowed: outcome.allowed,
            limit: check.rule.limit,
            remaining: outcome.remaining,
            retry_after_ms: us_to_ms_ceil(outcome.retry_after_us),
            reset_after_ms: us_to_ms_ceil(outcome.reset_after_us),
            degraded: false,
            window_ms: us_to_ms_ceil(check.rule.window_us),
        }
    }

    /// The response headers, built here so every transport sends the same:
    /// IETF `RateLimit-Policy`/`RateLimit` (draft-ietf-httpapi-ratelimit-headers-11),
    /// the legacy `X-RateLimit-*` trio, and `Retry-After` when denied.
    /// All second values round up, so a client that obeys them is never early.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> {
        let secs = |ms: u64| ms.div_ceil(1_000);
        [
            (
                "ratelimit-policy",
                format!(
                    "\"default\";q={};w={}",
                    self.limit,
                    secs(self.window_ms).max(1)
                ),
            ),
            (
                "ratelimit",
                format!(
                    "\"default\";r={};t={}",
                    self.remaining,
                    secs(self.reset_after_ms)
                ),
            ),
            ("x-ratelimit-limit", self.limit.to_string()),
            ("x-ratelimit-remaining", self.remaining.to_string()),
            ("x-ratelimit-reset", secs(self.reset_after_ms).to_string()),
        ]
        .into_iter()
        .chain(
            (!self.allowed).then(|| ("retry-after", secs(self.retry_after_ms).max(1).to_string())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_up_and_retry_after_only_when_denied() {
        let d = Decision {
            allowed: false,
            limit: 100,
            remaining: 0,
            retry_after_ms: 1_001,
            reset_after_ms: 59_001,
            degraded: false,
            window_ms: 250,
        };
        let h: Vec<_> = d.headers().collect();
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("retry-after"), Some("2"));
        assert_eq!(get("ratelimit-policy"), Some("\"default\";q=100;w=1"));
        assert_eq!(get("ratelimit"), Some("\"default\";r=0;t=60"));
        assert_eq!(get("x-ratelimit-reset"), Some("60"));
        let allowed = Decision { allowed: true, ..d };
        assert!(!allowed.headers().any(|(k, _)| k == "retry-after"));
    }
}
