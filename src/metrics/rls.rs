//! The Envoy RLS listener's metrics (see [`crate::rls`]).

use prometheus::{IntCounter, IntCounterVec, Opts};

use super::Metrics;
use super::auth::Collectors;

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

/// The RLS metrics' resolved handles.
pub(super) struct RlsMetrics {
    /// `ratekeeper_rls_request_errors_total`, indexed by [`RlsRequestError`].
    errors: [IntCounter; 5],
    /// `ratekeeper_rls_requests_total{code}`: ok, over_limit, error.
    requests: [IntCounter; 3],
}

/// The collectors to register, then the resolved handles.
pub(super) fn rls_metrics() -> (Collectors, RlsMetrics) {
    let requests = IntCounterVec::new(
        Opts::new(
            "ratekeeper_rls_requests_total",
            "ShouldRateLimit calls answered, by the code answered: ok, over_limit (the \
             overall code), or error (an error status: see \
             ratekeeper_rls_request_errors_total for why; behind Envoy with \
             failure_mode_deny: false its request went through unlimited).",
        ),
        &["code"],
    )
    .expect("valid metric");
    let by_code = ["ok", "over_limit", "error"].map(|c| requests.with_label_values(&[c]));
    let errors = IntCounterVec::new(
        Opts::new(
            "ratekeeper_rls_request_errors_total",
            "ShouldRateLimit calls not decided as sent, by reason: too_large (over the 64 KiB \
             message bound: answered OVER_LIMIT), malformed (not a RateLimitRequest, or no \
             message: an error status), invalid (an empty domain, too many descriptors or \
             entries, an empty key, is_negative_hits: INVALID_ARGUMENT), overloaded (not read \
             within 1 s: every read slot taken, or a body sent too slowly: answered \
             OVER_LIMIT), cancelled (the client gave up first, e.g. Envoy's own timeout). \
             Behind Envoy with failure_mode_deny: false, an error lets its request through \
             unlimited.",
        ),
        &["reason"],
    )
    .expect("valid metric");
    let by_reason = RlsRequestError::ALL.map(|r| errors.with_label_values(&[r.as_str()]));
    let handles = RlsMetrics {
        errors: by_reason,
        requests: by_code,
    };
    (vec![Box::new(errors), Box::new(requests)], handles)
}

impl Metrics {
    /// Counts a `ShouldRateLimit` call not decided as sent.
    pub fn record_rls_request_error(&self, reason: RlsRequestError) {
        self.rls.errors[reason as usize].inc();
    }

    /// Counts a `ShouldRateLimit` call by what it was answered: the
    /// response's overall code (`Ok`), or an error status (`Err`).
    pub fn record_rls_request<E>(&self, overall_code: Result<i32, E>) {
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
        let at = match overall_code {
            Ok(code) if code == Code::OverLimit as i32 => 1,
            Ok(_) => 0,
            Err(_) => 2,
        };
        self.rls.requests[at].inc();
    }
}
