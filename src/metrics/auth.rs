//! The bearer-authentication metrics (see [`crate::tokens`]).

use prometheus::{IntCounter, IntGauge, Registry};

use super::family::{counter_vec, gauge_vec};
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
    const ALL: [AuthFailure; 4] = [
        AuthFailure::Missing,
        AuthFailure::Malformed,
        AuthFailure::Invalid,
        AuthFailure::Scope,
    ];

    fn as_str(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Malformed => "malformed",
            AuthFailure::Invalid => "invalid",
            AuthFailure::Scope => "scope",
        }
    }
}

/// The bearer-authentication metrics' resolved handles.
pub struct AuthMetrics {
    /// `ratekeeper_auth_failures_total{reason}`, indexed by [`AuthFailure`].
    failures: [IntCounter; AuthFailure::ALL.len()],
    /// `ratekeeper_auth_tokens{scope}`: tokens in force, check then admin.
    tokens: [IntGauge; 2],
}

impl AuthMetrics {
    pub fn register(registry: &Registry) -> AuthMetrics {
        let failures = counter_vec(
            registry,
            "ratekeeper_auth_failures_total",
            "Requests refused by bearer authentication, HTTP and gRPC, by reason: missing (no bearer token: 401, UNAUTHENTICATED), malformed (a malformed Authorization header or authorization metadata: 400, UNAUTHENTICATED), invalid (not a configured token: 401, UNAUTHENTICATED), scope (a check token on an admin route, 403).",
            &["reason"],
        );
        let tokens = gauge_vec(
            registry,
            "ratekeeper_auth_tokens",
            "Bearer tokens in force, by scope (check, admin), from the last good load of auth.tokens_file.",
            &["scope"],
        );
        AuthMetrics {
            failures: AuthFailure::ALL.map(|r| failures.with_label_values(&[r.as_str()])),
            tokens: ["check", "admin"].map(|s| tokens.with_label_values(&[s])),
        }
    }

    /// Counts a request refused by bearer authentication.
    pub fn record_failure(&self, reason: AuthFailure) {
        self.failures[reason as usize].inc();
    }

    /// The tokens in force, per scope (counts only, never a token).
    pub fn set_tokens(&self, check: usize, admin: usize) {
        self.tokens[0].set(check as i64);
        self.tokens[1].set(admin as i64);
    }
}
