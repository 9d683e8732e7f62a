//! One error type for the HTTP boundary, mapped to a status and a JSON body
//! `{"error": {"code", "message"}}` in one place, and a JSON extractor whose
//! rejections use the same format.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::MAX_BODY_BYTES;
use super::server::BodyDeadline;
use crate::domain::ValidationError;
use crate::domain::auth::{Refusal, Scope};
use crate::limiter::LimiterError;
use crate::store::OpKind;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("malformed JSON: {0}")]
    InvalidJson(String),
    #[error("expected Content-Type: application/json")]
    UnsupportedMediaType,
    #[error("{0}")]
    InvalidRequest(String),
    /// A `policy` that the loaded policies file does not define (or no
    /// file is loaded); the message lists the loaded names.
    #[error("{0}")]
    UnknownPolicy(String),
    /// A settle naming a reservation the store does not hold: never
    /// made (a denied or degraded check's), expired, or not an id as
    /// handed out (edited). Nothing changed.
    #[error("{0}")]
    UnknownReservation(String),
    /// A settle of a reservation already settled with another `actual`.
    /// Nothing changed.
    #[error("{0}")]
    ReservationSettled(String),
    /// A draw numbered below the last one its reservation allowed.
    /// Nothing changed.
    #[error("{0}")]
    DrawOutOfOrder(String),
    /// Fields of two request forms in one body; the message names them.
    #[error("{0}")]
    MixedForms(String),
    /// A body over the route's cap, which the message names: 64 KiB
    /// ([`MAX_BODY_BYTES`]), or a batch's (see `http::batch_body_limit`).
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("the request body did not arrive within {0:?}")]
    RequestTimeout(std::time::Duration),
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    #[error("no such path; see /docs for the API")]
    NotFound,
    /// A feature turned off in the configuration; the message says which key.
    #[error("{0}")]
    Disabled(&'static str),
    /// No `Authorization: Bearer` header while tokens are configured.
    #[error("this endpoint needs an `Authorization: Bearer <token>` header")]
    MissingToken,
    /// RFC 6750 §3.1 `invalid_request`: `Authorization: Bearer` with no
    /// token or with one that is not a `b64token`, or several
    /// `Authorization` headers. The message never repeats the header.
    #[error(
        "malformed Authorization header: expected one `Authorization: Bearer <token>`, \
         the token made of A-Z a-z 0-9 - . _ ~ + / (and trailing =)"
    )]
    MalformedAuthorization,
    /// A bearer token that is not one of the configured ones. The message
    /// never repeats it.
    #[error("the bearer token is not valid")]
    InvalidToken,
    /// A good token whose scope does not cover the route.
    #[error("this endpoint needs a token of scope {}", .0.as_str())]
    InsufficientScope(Scope),
    /// The detail goes to the log, never to the client.
    #[error("internal error")]
    Internal(#[source] LimiterError),
    /// A reset or refund the store could not apply (an outage, a timeout,
    /// an open circuit breaker): never answered by the failure policy,
    /// which would pretend it happened. The detail goes to the log.
    #[error("the store is unavailable; the {0} may not have been applied, retry it")]
    StoreUnavailable(&'static str, #[source] LimiterError),
    /// No override, block or exemption there.
    #[error("{0}")]
    NoEntry(String),
    /// A cap on runtime entries (`tenants.max_entries`, `max_per_policy`).
    #[error("{0}")]
    CapReached(String),
    /// The runtime entries' store (Redis, or the embedded store's file)
    /// could not record a change; nothing changed.
    #[error("{0}")]
    NotRecorded(String),
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, snake_case: invalid_json, unsupported_media_type,
    /// invalid_request, unknown_policy, mixed_forms, payload_too_large, request_timeout,
    /// method_not_allowed, not_found, disabled (404, a feature turned off
    /// in the configuration), internal; store_unavailable (503, a
    /// reset or refund the store could not apply); overloaded (503, too
    /// many connections); missing_token and invalid_token (401),
    /// insufficient_scope (403), and invalid_request with status 400 for a
    /// malformed `Authorization` header, with bearer authentication;
    /// unknown_reservation (404) and reservation_settled (409) from
    /// `POST /v1/settle` and `POST /v1/draw`, draw_out_of_order (409) from
    /// `POST /v1/draw`; cap_reached (409) from a runtime override, block
    /// or exemption beyond `tenants.max_entries` or `max_per_policy`.
    #[schema(example = "invalid_request")]
    pub code: &'static str,
    /// What is wrong and what is allowed.
    #[schema(example = "limit: must be between 1 and 1000000000000, got 0")]
    pub message: String,
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::InvalidRequest(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
            ApiError::UnknownPolicy(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_policy"),
            ApiError::MixedForms(_) => (StatusCode::UNPROCESSABLE_ENTITY, "mixed_forms"),
            ApiError::UnknownReservation(_) => (StatusCode::NOT_FOUND, "unknown_reservation"),
            ApiError::ReservationSettled(_) => (StatusCode::CONFLICT, "reservation_settled"),
            ApiError::DrawOutOfOrder(_) => (StatusCode::CONFLICT, "draw_out_of_order"),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::RequestTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Disabled(_) => (StatusCode::NOT_FOUND, "disabled"),
            ApiError::MissingToken => (StatusCode::UNAUTHORIZED, "missing_token"),
            ApiError::MalformedAuthorization => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::InvalidToken => (StatusCode::UNAUTHORIZED, "invalid_token"),
            ApiError::InsufficientScope(_) => (StatusCode::FORBIDDEN, "insufficient_scope"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::StoreUnavailable(..) | ApiError::NotRecorded(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            }
            ApiError::NoEntry(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::CapReached(_) => (StatusCode::CONFLICT, "cap_reached"),
        }
    }
}

impl ApiError {
    /// The status and body this error is answered with, alone or as one
    /// item of a batch. An internal error's detail is logged here.
    pub fn status_and_body(&self) -> (StatusCode, ErrorBody) {
        let (status, code) = self.status_and_code();
        if let ApiError::Internal(source) = self {
            tracing::error!(error = %source, "check failed");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message: self.to_string(),
            },
        };
        (status, body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.status_and_body();
        let mut response = (status, Json(body)).into_response();
        if let Some(challenge) = self.challenge() {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

impl ApiError {
    /// RFC 6750 §3: the `WWW-Authenticate` challenge of an authentication
    /// error; no error code when no token was given at all.
    fn challenge(&self) -> Option<header::HeaderValue> {
        let value = match self {
            ApiError::MissingToken => r#"Bearer realm="ratekeeper""#,
            ApiError::MalformedAuthorization => {
                r#"Bearer realm="ratekeeper", error="invalid_request""#
            }
            ApiError::InvalidToken => r#"Bearer realm="ratekeeper", error="invalid_token""#,
            ApiError::InsufficientScope(Scope::Admin) => {
                r#"Bearer realm="ratekeeper", error="insufficient_scope", scope="admin""#
            }
            ApiError::InsufficientScope(Scope::Check) => {
                r#"Bearer realm="ratekeeper", error="insufficient_scope", scope="check""#
            }
            _ => return None,
        };
        Some(header::HeaderValue::from_static(value))
    }
}

/// A JSON error body for a status our own errors don't produce; the code is
/// the status's reason phrase in snake_case.
pub(super) fn status_only(status: StatusCode) -> Response {
    let reason = status.canonical_reason().unwrap_or("error");
    let code = reason.to_ascii_lowercase().replace([' ', '-'], "_");
    let body = serde_json::json!({"error": {"code": code, "message": reason}});
    (status, Json(body)).into_response()
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        ApiError::InvalidRequest(e.to_string())
    }
}

/// The HTTP message for a malformed header stays one text whatever was
/// wrong (RFC 6750's `invalid_request`); gRPC names the problem.
impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::Missing => ApiError::MissingToken,
            Refusal::Malformed(_) => ApiError::MalformedAuthorization,
            Refusal::Invalid => ApiError::InvalidToken,
            Refusal::Scope(required) => ApiError::InsufficientScope(required),
        }
    }
}

impl From<LimiterError> for ApiError {
    fn from(e: LimiterError) -> Self {
        ApiError::Internal(e)
    }
}

impl ApiError {
    /// A reset or refund (`op`) that failed: 503 while the store is down
    /// or slow (the caller retries), 500 for an error that is not an
    /// outage, as for a check.
    pub fn adjusting(op: OpKind, e: LimiterError) -> Self {
        if e.0.is_transient() {
            ApiError::StoreUnavailable(op.name(), e)
        } else {
            ApiError::Internal(e)
        }
    }
}

/// Like `axum::Json`, but strict about the content type, with our error
/// bodies, and untyped until [`JsonBody::parse_with`], so a handler can
/// look at the body before choosing what to parse it as: 415 without
/// `application/json`, 413 past the body limit, 400 for malformed JSON;
/// [`parse_json`] answers 422 naming the field for a wrong type or missing
/// field. The body is read once on the way to an answer: its syntax is
/// checked on its own only when the handler's parse fails (that pass cost
/// about 8 % of an embedded check when every body had it).
pub struct JsonBody(Bytes);

impl JsonBody {
    /// `parse` of the bytes. A parse that succeeds read one well-formed
    /// value and nothing after it; on any error, malformed JSON is a 400
    /// first, even when its first value would also have a missing field,
    /// and only then `parse`'s own error.
    pub fn parse_with<'a, T>(
        &'a self,
        parse: impl FnOnce(&'a [u8]) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        parse(&self.0).map_err(|error| {
            // `from_slice` also rejects trailing bytes after the value.
            match serde_json::from_slice::<serde::de::IgnoredAny>(&self.0) {
                Err(e) => ApiError::InvalidJson(e.to_string()),
                Ok(_) => error,
            }
        })
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(request.headers().get(header::CONTENT_TYPE)) {
            return Err(ApiError::UnsupportedMediaType);
        }
        // The server stamps each request with the instant its body must
        // have arrived by; a client trickling it, or promising more bytes
        // than it sends, gets a 408 instead of holding the handler forever.
        let deadline = request.extensions().get::<BodyDeadline>().copied();
        let read = Bytes::from_request(request, state);
        let read = match deadline {
            Some(BodyDeadline { at, timeout }) => tokio::time::timeout_at(at, read)
                .await
                .map_err(|_| ApiError::RequestTimeout(timeout))?,
            None => read.await,
        };
        let bytes = read.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                // The route's own cap, when it has one, is named by its
                // handler (a batch's); this is everyone else's.
                ApiError::PayloadTooLarge(MAX_BODY_BYTES)
            } else {
                ApiError::InvalidJson(rejection.body_text())
            }
        })?;
        Ok(JsonBody(bytes))
    }
}

/// Every body and part of one we take is a JSON object, but serde's
/// derived struct also takes an array of its fields in order (`[null,
/// null]` for `{}`): refused as serde words a wrong type, naming `T`.
fn object<T>(json: &[u8]) -> Result<(), ApiError> {
    if json.trim_ascii_start().first() == Some(&b'{') {
        return Ok(());
    }
    let name = std::any::type_name::<T>();
    let name = name.split('<').next().unwrap_or(name);
    let name = name.rsplit("::").next().unwrap_or(name);
    Err(ApiError::InvalidRequest(format!(
        "invalid type: sequence, expected struct {name}"
    )))
}

/// `json` (a whole body, or a part of one) as a `T`; a wrong type or a
/// missing field is a 422 naming the field's path. Errors come from the
/// bytes, not from an intermediate `Value`, so they keep their line and
/// column (counted from the start of `json`); trailing bytes are a 400.
pub fn parse_json<'de, T: serde::Deserialize<'de>>(json: &'de [u8]) -> Result<T, ApiError> {
    // Tracking the path costs on every field of every check, and only an
    // error needs it: parse without it first (the same result, trailing
    // bytes refused alike), and again with it only to word a refusal.
    if let Ok(value) = serde_json::from_slice(json) {
        return object::<T>(json).map(|()| value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        match inner.classify() {
            // Well-formed JSON with a wrong type or a missing field.
            serde_json::error::Category::Data if path == "." => {
                ApiError::InvalidRequest(inner.to_string())
            }
            serde_json::error::Category::Data => {
                ApiError::InvalidRequest(format!("{path}: {inner}"))
            }
            _ => ApiError::InvalidJson(inner.to_string()),
        }
    })?;
    // Trailing bytes after the object are malformed JSON too.
    deserializer
        .end()
        .map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    object::<T>(json)?;
    Ok(value)
}

/// `application/json` or `application/<anything>+json`, any parameters.
fn is_json(value: Option<&header::HeaderValue>) -> bool {
    let Some(mime) = value.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        let ok = |s: &'static str| is_json(Some(&header::HeaderValue::from_static(s)));
        assert!(ok("application/json"));
        assert!(ok("Application/JSON; charset=utf-8"));
        assert!(ok("application/problem+json"));
        assert!(!ok("text/plain"));
        assert!(!ok("application/x-www-form-urlencoded"));
        assert!(!is_json(None));
    }
}
