//! The bearer-authentication metrics (see [`crate::tokens`]).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use crate::domain::auth::Refusal;

/// Why a request was refused by bearer authentication: the bounded
/// `reason` label of `ratekeeper_auth_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization: Bearer` header (or gRPC metadata).
    Missing,
    /// A malformed `Authorization` header (400 invalid_request), or
    /// malformed gRPC `authorization` metadata.
    Malformed,
    /// A token that is not one of ours.
    Invalid,
    /// A good token whose scope does not cover the route (403).
    Scope,
}

impl From<&Refusal> for AuthFailure {
    fn from(refusal: &Refusal) -> AuthFailure {
        match refusal {
            Refusal::Missing => AuthFailure::Missing,
            Refusal::Malformed(_) => AuthFailure::Malformed,
            Refusal::Invalid => AuthFailure::Invalid,
            Refusal::Scope(_) => AuthFailure::Scope,
        }
    }
}

impl AuthFailure {
    pub(super) const ALL: [AuthFailure; 4] = [
        AuthFailure::Missing,
        AuthFailure::Malformed,
        AuthFailure::Invalid,
        AuthFailure::Scope,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Malformed => "malformed",
            AuthFailure::Invalid => "invalid",
            AuthFailure::Scope => "scope",
        }
    }
}

pub(super) type Collectors = Vec<Box<dyn prometheus::core::Collector>>;

/// The bearer-authentication metrics: the collectors to register, then the
/// resolved handles.
pub(super) fn auth_metrics() -> (Collectors, [IntCounter; 4], [IntGauge; 2]) {
    let failures = IntCounterVec::new(
        Opts::new(
            "ratekeeper_auth_failures_total",
            "Requests refused by bearer authentication, HTTP and gRPC, by reason: missing (no bearer token: 401, UNAUTHENTICATED), malformed (a malformed Authorization header or authorization metadata: 400, UNAUTHENTICATED), invalid (not a configured token: 401, UNAUTHENTICATED), scope (a check token on an admin route, 403).",
        ),
        &["reason"],
    )
    .expect("valid metric");
    let by_reason = AuthFailure::ALL.map(|r| failures.with_label_values(&[r.as_str()]));
    let tokens = IntGaugeVec::new(
        Opts::new(
            "ratekeeper_auth_tokens",
            "Bearer tokens in force, by scope (check, admin), from the last good load of auth.tokens_file.",
        ),
        &["scope"],
    )
    .expect("valid metric");
    let by_scope = ["check", "admin"].map(|s| tokens.with_label_values(&[s]));
    let collectors: Collectors = vec![Box::new(failures), Box::new(tokens)];
    (collectors, by_reason, by_scope)
}
