//! What `/v1/auth/{policy}` answers besides a decision: the errors, each
//! with its status and JSON body, and the helpers that word them.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::{ErrorBody, ErrorDetail};
use crate::domain::ValidationError;
use crate::domain::forward::Unreadable;
use crate::limiter::LimiterError;

/// What `/v1/auth` answers besides a decision. JSON `{"error": {...}}`.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// 404: a proxy shows the client this status, and "no such policy"
    /// is a missing resource, not a bad request.
    #[error("{0}")]
    UnknownPolicy(String),
    /// The policy's `missing_key_status` (401): no `key_from` source was
    /// present (for a policy with levels: an `ids_from` source was not).
    #[error("no key: a source the policy keys by is not present in the request (tried {tried})")]
    MissingKey { status: StatusCode, tried: String },
    /// The policy's `missing_key_status` too: a key header that is there
    /// but is not one UTF-8 value (see [`crate::domain::forward`]).
    #[error("no key: {0}; it must be sent once, as UTF-8 text")]
    UnreadableKey(Unreadable, StatusCode),
    /// 400: a key longer than `limits.max_key_bytes`, or a bad
    /// `X-RateLimit-Cost`.
    #[error("{0}")]
    InvalidRequest(String),
    /// 501: the policy has a concurrency limit, whose lease nothing here
    /// could release when the proxied request ends (a policy written for
    /// forward-auth, with `key_from`, is refused at load instead).
    #[error(
        "policy {0:?} has a concurrency limit ({1:?}): forward-auth cannot release its lease when \
         the proxied request ends, so it cannot apply it; call POST /v1/check and POST /v1/release \
         from the service instead"
    )]
    LeasedPolicy(String, String),
    /// 501: a policy with levels whose file gives no `ids_from`.
    #[error(
        "policy {0:?} has levels but no ids_from: forward-auth cannot tell the ids its key \
         templates need; add ids_from to the policy, or call POST /v1/check with ids"
    )]
    NoIdsFrom(String),
    /// 500; the detail goes to the log.
    #[error("internal error")]
    Internal(#[source] LimiterError),
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            AuthError::UnknownPolicy(_) => (StatusCode::NOT_FOUND, "unknown_policy"),
            AuthError::MissingKey { status, .. } | AuthError::UnreadableKey(_, status) => {
                (*status, "missing_key")
            }
            AuthError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            AuthError::LeasedPolicy(..) | AuthError::NoIdsFrom(_) => {
                (StatusCode::NOT_IMPLEMENTED, "unsupported_policy")
            }
            AuthError::Internal(e) => {
                tracing::error!(error = %e, "forward-auth check failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message: self.to_string(),
            },
        };
        (status, Json(body)).into_response()
    }
}

/// A check's validation error, naming where the value came from.
pub(super) fn explain(e: ValidationError) -> String {
    match e.field.as_str() {
        "key" => format!("the key from key_from: {}", e.message),
        "cost" => format!("X-RateLimit-Cost: {}", e.message),
        _ => e.to_string(),
    }
}

pub(super) fn status(code: u16) -> StatusCode {
    // Validated as 4xx at load; a fallback only for policies built in code.
    StatusCode::from_u16(code).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
}
