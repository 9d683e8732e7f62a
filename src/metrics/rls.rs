//! The Envoy RLS listener's metrics (see [`crate::rls`]).

use prometheus::{IntCounter, IntGauge, Registry};

use super::family::{counter_vec, gauge};

/// Why a `ShouldRateLimit` call was not decided as sent: the bounded
/// `reason` label of `ratekeeper_rls_request_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlsRequestError {
    /// Over the message size bound: answered OVER_LIMIT.
    TooLarge,
    /// Not a `RateLimitRequest`, or no message at all: tonic's status.
    Malformed,
    /// A request only Envoy's config shapes so (an empty domain, over the
    /// caps, an empty key, `is_negative_hits`): INVALID_ARGUMENT.
    Invalid,
    /// Not read in time: no read slot free, or the message came too
    /// slowly (see `rls::service`): answered OVER_LIMIT.
    Overloaded,
    /// The client cancelled the call (Envoy's own timeout): nothing to
    /// answer, and not the client's request being refused.
    Cancelled,
}

impl RlsRequestError {
    const ALL: [RlsRequestError; 5] = [
        RlsRequestError::TooLarge,
        RlsRequestError::Malformed,
        RlsRequestError::Invalid,
        RlsRequestError::Overloaded,
        RlsRequestError::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RlsRequestError::TooLarge => "too_large",
            RlsRequestError::Malformed => "malformed",
            RlsRequestError::Invalid => "invalid",
            RlsRequestError::Overloaded => "overloaded",
            RlsRequestError::Cancelled => "cancelled",
        }
    }
}

/// What a `ShouldRateLimit` call was answered: the bounded `code` label
/// of `ratekeeper_rls_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlsAnswer {
    /// The overall code OK.
    Ok = 0,
    /// The overall code OVER_LIMIT.
    OverLimit = 1,
    /// An error status.
    Error = 2,
}

impl RlsAnswer {
    const ALL: [RlsAnswer; 3] = [RlsAnswer::Ok, RlsAnswer::OverLimit, RlsAnswer::Error];

    fn as_str(self) -> &'static str {
        match self {
            RlsAnswer::Ok => "ok",
            RlsAnswer::OverLimit => "over_limit",
            RlsAnswer::Error => "error",
        }
    }
}

/// The RLS metrics' resolved handles.
pub struct RlsMetrics {
    /// `ratekeeper_rls_request_errors_total`, indexed by [`RlsRequestError`].
    errors: [IntCounter; RlsRequestError::ALL.len()],
    /// `ratekeeper_rls_requests_total{code}`, indexed by [`RlsAnswer`].
    requests: [IntCounter; RlsAnswer::ALL.len()],
    /// RLS domains in force.
    pub domains_loaded: IntGauge,
}

impl RlsMetrics {
    pub fn register(registry: &Registry) -> RlsMetrics {
        let requests = counter_vec(
            registry,
            "ratekeeper_rls_requests_total",
            "ShouldRateLimit calls answered, by the code answered: ok, over_limit (the \
             overall code), or error (an error status: see \
             ratekeeper_rls_request_errors_total for why; behind Envoy with \
             failure_mode_deny: false its request went through unlimited).",
            &["code"],
        );
        let errors = counter_vec(
            registry,
            "ratekeeper_rls_request_errors_total",
            "ShouldRateLimit calls not decided as sent, by reason: too_large (over the 64 KiB \
             message bound: answered OVER_LIMIT), malformed (not a RateLimitRequest, or no \
             message: an error status), invalid (an empty domain, too many descriptors or \
             entries, an empty key, is_negative_hits: INVALID_ARGUMENT), overloaded (not read \
             within 1 s: every read slot taken, or a body sent too slowly: answered \
             OVER_LIMIT), cancelled (the client gave up first, e.g. Envoy's own timeout). \
             Behind Envoy with failure_mode_deny: false, an error lets its request through \
             unlimited.",
            &["reason"],
        );
        RlsMetrics {
            errors: RlsRequestError::ALL.map(|r| errors.with_label_values(&[r.as_str()])),
            requests: RlsAnswer::ALL.map(|a| requests.with_label_values(&[a.as_str()])),
            domains_loaded: gauge(
                registry,
                "ratekeeper_rls_domains_loaded",
                "RLS domains in force, from the last good load of rls.config.",
            ),
        }
    }

    /// Counts a `ShouldRateLimit` call not decided as sent.
    pub fn record_error(&self, reason: RlsRequestError) {
        self.errors[reason as usize].inc();
    }

    /// Counts a `ShouldRateLimit` call by what it was answered.
    pub fn record_request(&self, answer: RlsAnswer) {
        self.requests[answer as usize].inc();
    }
}
