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
}

impl RlsRequestError {
    const ALL: [RlsRequestError; 3] = [
        RlsRequestError::TooLarge,
        RlsRequestError::Malformed,
        RlsRequestError::Invalid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RlsRequestError::TooLarge => "too_large",
            RlsRequestError::Malformed => "malformed",
            RlsRequestError::Invalid => "invalid",
        }
    }
}

/// The collectors to register, then the resolved handles by reason.
pub(super) fn rls_metrics() -> (Collectors, [IntCounter; 3]) {
    let errors = IntCounterVec::new(
        Opts::new(
            "ratekeeper_rls_request_errors_total",
            "ShouldRateLimit calls not decided as sent, by reason: too_large (over the 1 MiB \
             message bound: answered OVER_LIMIT), malformed (not a RateLimitRequest, or no \
             message: an error status), invalid (an empty domain, too many descriptors or \
             entries, an empty key, is_negative_hits: INVALID_ARGUMENT). Behind Envoy with \
             failure_mode_deny: false, an error lets its request through unlimited.",
        ),
        &["reason"],
    )
    .expect("valid metric");
    let by_reason = RlsRequestError::ALL.map(|r| errors.with_label_values(&[r.as_str()]));
    (vec![Box::new(errors)], by_reason)
}

impl Metrics {
    /// Counts a `ShouldRateLimit` call not decided as sent.
    pub fn record_rls_request_error(&self, reason: RlsRequestError) {
        self.rls_request_errors[reason as usize].inc();
    }
}
