//! The answer to a check, from a store ([`Outcome`], one per limit) and as
//! sent ([`Decision`]).

use std::sync::Arc;

use super::{Algorithm, Check, Lease, LeaseId, us_to_ms_ceil};

/// What one limit's algorithm decided, in microseconds. Identical from Lua
/// and Rust.
///
/// In a check of several limits each outcome is what that limit decided.
/// The check spends only when every limit allows; when one denied, nothing
/// was spent, and a limit that would have allowed reports its state as it
/// is (its `remaining` and `reset_after` without this check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    /// Units still available after this check.
    pub remaining: u64,
    /// 0 when allowed; otherwise the smallest wait after which the same
    /// check would be allowed if nothing else arrives.
    pub retry_after_us: u64,
    /// Time until the key is back to full capacity if nothing else arrives.
    pub reset_after_us: u64,
}

/// What one limit decided, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDecision {
    pub name: Arc<str>,
    pub algorithm: Algorithm,
    pub limit: u64,
    pub burst: u64,
    pub window_ms: u64,
    pub allowed: bool,
    pub remaining: u64,
    pub retry_after_ms: u64,
    pub reset_after_ms: u64,
    /// A levels check's limit: its level (`domain::level`).
    pub level: Option<Arc<super::Level>>,
}

/// The answer sent to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The check as a whole: every limit allowed (or a shadow policy).
    pub allowed: bool,
    /// `limit` and `remaining` of the most restrictive limit (see
    /// [`most_restrictive`](Self::most_restrictive)).
    pub limit: u64,
    pub remaining: u64,
    /// 0 when allowed; otherwise the largest `retry_after` of the denying
    /// limits: the smallest wait after which every limit allows.
    pub retry_after_ms: u64,
    /// The largest `reset_after` of the limits.
    pub reset_after_ms: u64,
    /// True when the failure policy answered because the store could not.
    pub degraded: bool,
    /// The most restrictive limit's window, for the `RateLimit-Policy` header.
    pub window_ms: u64,
    /// A shadow policy's check that a limit denied, answered allowed.
    pub shadow: bool,
    /// The policy applied; `None` for inline checks.
    pub policy: Option<Arc<str>>,
    /// Each limit's own decision, in the check's order.
    pub limits: Vec<LimitDecision>,
    /// Index into `limits` of the most restrictive limit: the fewest
    /// remaining; among equals a denying one, then the first.
    pub most_restrictive: usize,
    /// The lease the check took on its concurrency limit: only when the
    /// store took one (every limit allowed a cost above 0), never in a
    /// failure policy's answer.
    pub lease: Option<Lease>,
    /// A runtime block that denied the check, or an exemption that let it
    /// through (`/v1/blocks`, `/v1/exemptions`).
    pub tenant: Option<TenantMark>,
}

/// What a block or an exemption did to a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantMark {
    /// Denied without asking the store: nothing spent.
    Blocked {
        reason: Option<Arc<str>>,
        /// `None`: until the block is deleted.
        expires_in_ms: Option<u64>,
    },
    /// Decided and spent as usual, answered allowed.
    Exempt,
}

/// The `retry_after_ms` of a block that never expires: long enough that a
/// client honouring it does not hammer, short enough to notice an unblock.
pub const BLOCKED_RETRY_MS: u64 = 3_600_000;

impl Decision {
    /// The denial of a blocked check: every limit denied with nothing
    /// spent, whatever the policy's shadow mode says, the wait until the
    /// block ends.
    pub fn blocked(check: &Check, reason: Option<Arc<str>>, expires_in_ms: Option<u64>) -> Self {
        let wait_ms = expires_in_ms.unwrap_or(BLOCKED_RETRY_MS).max(1);
        let outcome = Outcome {
            allowed: false,
            remaining: 0,
            retry_after_us: wait_ms.saturating_mul(1_000),
            reset_after_us: 0,
        };
        let outcomes = vec![outcome; check.limits.len()];
        let mut decision = Decision::from_outcomes(check, &outcomes);
        decision.allowed = false;
        decision.shadow = false;
        decision.retry_after_ms = wait_ms;
        decision.tenant = Some(TenantMark::Blocked {
            reason,
            expires_in_ms,
        });
        decision
    }

    /// An exempt key's decision: allowed, with what the limits said kept
    /// in `limits`.
    pub fn exempt(&mut self) {
        self.allowed = true;
        self.retry_after_ms = 0;
        self.tenant = Some(TenantMark::Exempt);
    }

    /// Combines one outcome per limit of `check` (same order) into the
    /// check's decision. A shadow check that was denied is answered allowed
    /// with `shadow: true`; its `limits` keep the real decisions.
    pub fn from_outcomes(check: &Check, outcomes: &[Outcome]) -> Self {
        debug_assert_eq!(check.limits.len(), outcomes.len());
        let limits: Vec<LimitDecision> = check
            .limits
            .iter()
            .zip(outcomes)
            .map(|(l, o)| LimitDecision {
                name: l.name.clone(),
                algorithm: l.rule.algorithm,
                limit: l.rule.limit,
                burst: l.rule.burst,
                window_ms: us_to_ms_ceil(l.rule.window_us()),
                allowed: o.allowed,
                remaining: o.remaining,
                retry_after_ms: us_to_ms_ceil(o.retry_after_us),
                reset_after_ms: us_to_ms_ceil(o.reset_after_us),
                level: l.level.clone(),
            })
            .collect();
        let allowed = outcomes.iter().all(|o| o.allowed);
        // Maxima taken in microseconds, then rounded up once: the same
        // result as rounding each, and exact for the single-rule form.
        let retry_us = outcomes
            .iter()
            .filter(|o| !o.allowed)
            .map(|o| o.retry_after_us)
            .max()
            .unwrap_or(0);
        let reset_us = outcomes.iter().map(|o| o.reset_after_us).max().unwrap_or(0);
        let most_restrictive = (0..limits.len())
            .min_by_key(|&i| (limits[i].remaining, limits[i].allowed, i))
            .unwrap_or(0);
        let tightest = &limits[most_restrictive];
        Decision {
            allowed: allowed || check.shadow,
            limit: tightest.limit,
            remaining: tightest.remaining,
            retry_after_ms: if allowed || check.shadow {
                0
            } else {
                us_to_ms_ceil(retry_us)
            },
            reset_after_ms: us_to_ms_ceil(reset_us),
            degraded: false,
            window_ms: tightest.window_ms,
            shadow: check.shadow && !allowed,
            policy: check.policy.clone(),
            most_restrictive,
            limits,
            lease: None,
            tenant: None,
        }
    }

    /// The decision of a check that asked the store to acquire `lease` on
    /// its concurrency limit: it holds the lease iff the store took it,
    /// which is when every limit allowed (a shadow policy's denial took
    /// nothing) and the cost was above 0 (a look takes none).
    pub fn with_lease(mut self, check: &Check, lease: Option<LeaseId>) -> Self {
        let took = self.limits.iter().all(|l| l.allowed) && check.cost > 0;
        if let (true, Some(id), Some(limit)) = (took, lease, check.concurrency()) {
            self.lease = Some(Lease {
                id,
                expires_in_ms: limit.rule.window_us() / 1_000,
            });
        }
        self
    }

    /// Whether the store recorded the reservation a check asked for: every
    /// limit allowed (so not a shadow policy's allowed denial), and the
    /// store answered (not the failure policy, which records nothing).
    pub fn reserved(&self) -> bool {
        !self.degraded && self.limits.iter().all(|l| l.allowed)
    }

    /// The same decision answered by the failure policy.
    pub fn degraded(self) -> Self {
        Decision {
            degraded: true,
            ..self
        }
    }

    /// Index into `limits` of the limit that decided: for a denied check
    /// the denying limit with the longest wait (the first among equals),
    /// for an allowed one the most restrictive. What metrics and the
    /// heavy-hitters sketch attribute a check to.
    pub fn deciding(&self) -> usize {
        (0..self.limits.len())
            .filter(|&i| !self.limits[i].allowed)
            .max_by_key(|&i| (self.limits[i].retry_after_ms, std::cmp::Reverse(i)))
            .unwrap_or(self.most_restrictive)
    }

    /// The limit that `RateLimit` and `X-RateLimit-*` describe.
    pub fn tightest(&self) -> &LimitDecision {
        &self.limits[self.most_restrictive]
    }

    /// The response headers, built here so every transport sends the same:
    /// IETF `RateLimit-Policy`/`RateLimit` (draft-ietf-httpapi-ratelimit-headers-11),
    /// the legacy `X-RateLimit-*` trio, and `Retry-After` when denied.
    /// `RateLimit-Policy` lists every limit; the others describe the most
    /// restrictive one. All second values round up, so a client that obeys
    /// them is never early. A quota (`q`, `X-RateLimit-Limit`) is the
    /// limit's `burst`, the most a client can spend at once: for the
    /// buckets that is above `limit` (their rate), and a quota of `limit`
    /// would stand below the `r` a full bucket reports. For every other
    /// algorithm `burst` is `limit`.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, HeaderText)> {
        use std::fmt::Write as _;
        let secs = |ms: u64| ms.div_ceil(1_000);
        // One buffer for every limit, not a string each joined after.
        let mut policy = String::with_capacity(32 * self.limits.len());
        for (i, l) in self.limits.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let w = secs(l.window_ms).max(1);
            // Writing to a String cannot fail.
            let _ = write!(policy, "{sep}\"{}\";q={};w={w}", l.name, l.burst);
        }
        let tightest = self.tightest();
        let reset = secs(tightest.reset_after_ms);
        let mut ratelimit = String::with_capacity(tightest.name.len() + 32);
        let _ = write!(
            ratelimit,
            "\"{}\";r={};t={reset}",
            tightest.name, tightest.remaining
        );
        [
            ("ratelimit-policy", HeaderText::Text(policy)),
            ("ratelimit", HeaderText::Text(ratelimit)),
            ("x-ratelimit-limit", HeaderText::Number(tightest.burst)),
            (
                "x-ratelimit-remaining",
                HeaderText::Number(tightest.remaining),
            ),
            ("x-ratelimit-reset", HeaderText::Number(reset)),
        ]
        .into_iter()
        .chain((!self.allowed).then(|| {
            let retry = secs(self.retry_after_ms).max(1);
            ("retry-after", HeaderText::Number(retry))
        }))
    }
}

/// A header's value as [`Decision::headers`] gives it: a whole number
/// stays one, so a transport that has a cheaper way to write numbers (an
/// HTTP header value from a `u64`) need not format and re-validate a
/// string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderText {
    Number(u64),
    Text(String),
}

impl std::fmt::Display for HeaderText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderText::Number(n) => write!(f, "{n}"),
            HeaderText::Text(text) => f.write_str(text),
        }
    }
}

#[cfg(test)]
mod tests;
