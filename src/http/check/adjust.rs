//! `POST /v1/reset` and `POST /v1/refund`: the three forms of a check
//! (parsed and validated by the same code), answered with the body of a
//! check of cost 0 afterwards.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use utoipa::OpenApi;

use super::forms::{RefundForms, ResetForms};
use super::response::CheckResponse;
use super::{Parsed, parse, respond};
use crate::domain::auth::Scope;
use crate::domain::validate_wait_ms;
use crate::http::AppState;
use crate::http::endpoint::Endpoint;
use crate::http::error::{ApiError, ErrorBody};
use crate::limiter::Request as Run;
use crate::store::{Op, OpKind};

/// Operators' tools: a reset or refund touches any key by any amount.
pub(in crate::http) const RESET: Endpoint = Endpoint::at(
    "/v1/reset",
    Scope::Admin,
    |_| post(reset),
    ResetDoc::openapi,
);
pub(in crate::http) const REFUND: Endpoint = Endpoint::at(
    "/v1/refund",
    Scope::Admin,
    |_| post(refund),
    RefundDoc::openapi,
);

#[derive(OpenApi)]
#[openapi(paths(reset), components(schemas(ResetForms)))]
struct ResetDoc;

#[derive(OpenApi)]
#[openapi(paths(refund), components(schemas(RefundForms)))]
struct RefundDoc;

/// Delete a key's state for the limits of a check, then report them.
///
/// The body is any of the three forms of `POST /v1/check` without `cost`
/// (a `cost` is answered 422). Every limit's state for the key is deleted
/// atomically; the answer is that of a check of cost 0 afterwards, so every
/// limit shows full capacity. Never answered by the failure policy: if the
/// store cannot apply it, 503 `store_unavailable`, and the caller retries
/// (a reset is idempotent).
#[utoipa::path(
    post,
    path = "/v1/reset",
    tag = "limits",
    request_body(content = ResetForms, content_type = "application/json"),
    responses(
        (status = 200, description = "Reset; the state afterwards, as a check of cost 0 reports it", body = CheckResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "As for /v1/check (invalid_request, unknown_policy, mixed_forms); also a `cost` field (invalid_request)", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
        (status = 503, description = "The store is unreachable, too slow, or its circuit breaker is open (code store_unavailable): the reset may not have happened; retry", body = ErrorBody),
    )
)]
pub async fn reset(State(state): State<AppState>, request: Request) -> Response {
    adjust(&state, OpKind::Reset, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Give back units a key spent, then report its limits.
///
/// The body is any of the three forms of `POST /v1/check`; `cost` (default
/// 1, validated as a check's) is how many units to give back on every limit,
/// each on its own: fixed_window takes them off the current window's count;
/// sliding_window off the current window's count, then the previous one's;
/// sliding_log removes the `cost` newest units in the window; token_bucket
/// adds tokens; gcra moves its TAT back by `cost` intervals, not before
/// now. Never beyond full capacity, and a key without state is left alone
/// (200). The answer is that of a check of cost 0 afterwards. Never answered
/// by the failure policy: if the store cannot apply it, 503
/// `store_unavailable` (a retry may give back twice if the first attempt
/// did reach the store).
#[utoipa::path(
    post,
    path = "/v1/refund",
    tag = "limits",
    request_body(content = RefundForms, content_type = "application/json"),
    responses(
        (status = 200, description = "Refunded; the state afterwards, as a check of cost 0 reports it", body = CheckResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "As for /v1/check (invalid_request, unknown_policy, mixed_forms)", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
        (status = 503, description = "The store is unreachable, too slow, or its circuit breaker is open (code store_unavailable): the refund may not have happened", body = ErrorBody),
    )
)]
pub async fn refund(State(state): State<AppState>, request: Request) -> Response {
    adjust(&state, OpKind::Refund, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn adjust(state: &AppState, kind: OpKind, request: Request) -> Result<Response, ApiError> {
    let Parsed {
        form,
        mut check,
        has_cost,
        wait_ms,
        reservation,
        ..
    } = parse(state, request).await?;
    if reservation.is_some() {
        return Err(ApiError::InvalidRequest(format!(
            "reservation_ttl: only a check takes a reservation, not a {}",
            kind.name()
        )));
    }
    // `wait_ms` is part of the shared forms: validated as for a check, then
    // ignored, since a reset or a refund never waits.
    validate_wait_ms(wait_ms, &state.bounds)?;
    if kind == OpKind::Reset {
        if has_cost {
            return Err(ApiError::InvalidRequest(
                "cost: a reset takes no cost; it deletes the key's state".into(),
            ));
        }
        check.cost = 0;
    }
    let op = Op {
        kind,
        ..Op::check(&check)
    };
    let answer = state
        .limiter
        .run_one(Run::new(op))
        .await
        .map_err(|e| ApiError::adjusting(kind, e))?;
    Ok(respond(form, &answer.decision))
}
