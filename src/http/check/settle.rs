//! `POST /v1/settle`: a check's cost settled afterwards, through the
//! reservation the check was answered with (`domain::reservation`).
//!
//! It needs only the `check` scope (`http::bearer`), unlike a refund, which
//! is an operator's tool that gives back any amount: a settle is the second
//! half of a caller's own check, and the reservation is what ties the two.
//! The policy or limits, the key and the reserved cost all come from the
//! reservation, never from the caller, and the store settles each
//! reservation once: so a settle can give back at most what its check
//! spent, and add at most `actual` (at most [`MAX_SETTLE_CAPACITIES`]
//! capacities), once per check. Earlier versions took `reserved` from the
//! caller, which let a `check` token mint capacity by settling checks that
//! never happened, over and over (issue 27).
//!
//! The check is rebuilt from the id's description by the code that parsed
//! it (`parse_check`), under the policies in force now: a policy reloaded
//! between check and settle is settled on its current limits, and one no
//! longer loaded is refused (`unknown_policy`).

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use utoipa::{OpenApi, ToSchema};

use super::fields::whole_number;
use super::fields_present::Present;
use super::reserve::{reserved, unknown_reservation};
use super::respond;
use super::response::{CheckResponse, ReservationResponse};
use crate::domain::algorithms::MAX_SETTLE_CAPACITIES;
use crate::domain::auth::Scope;
use crate::http::AppState;
use crate::http::endpoint::Endpoint;
use crate::http::error::{ApiError, ErrorBody, JsonBody, parse_json};
use crate::store::{Op, Settled};

/// The `check` scope, not admin as a refund: see the module doc.
pub(in crate::http) const ENDPOINT: Endpoint = Endpoint::at(
    "/v1/settle",
    Scope::Check,
    |_| post(settle),
    SettleDoc::openapi,
);

#[derive(OpenApi)]
#[openapi(paths(settle), components(schemas(SettleRequest, ReservationResponse)))]
struct SettleDoc;

/// The request body of `POST /v1/settle`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    /// The `reservation.id` of an allowed check that asked for one
    /// (`reservation_ttl`), unchanged.
    #[schema(pattern = "^[A-Za-z0-9_-]+$")]
    pub reservation: String,
    /// What the request turned out to cost. Below the check's cost the
    /// difference is given back; above it, spent without a check, which
    /// may go past the limit. At most 100 × the smallest `limit` of the
    /// check (token_bucket and gcra: `burst`).
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub actual: u64,
}

/// Settle a checked request's cost afterwards: give back what it did not
/// use, or spend what it used beyond its check's cost.
///
/// Names the `reservation` an allowed check was answered with (a check
/// asks for one with `reservation_ttl`); the policy or limits, the key and
/// the reserved cost are the check's. Every limit is settled on its own:
/// `actual` below the check's cost is a refund of the difference (as
/// `POST /v1/refund`); equal changes nothing; above, the difference is
/// spent without a check and may take the key past its limit, so later
/// checks are denied until it has recovered: fixed_window counts it in the
/// window current at settle time, sliding_window in the current window,
/// sliding_log logs it at now, token_bucket owes it as tokens below zero,
/// gcra moves its TAT later. The usage a settle leaves is at most 101 × the
/// limit (token_bucket and gcra: `burst`). A reservation is settled once:
/// the same settle again answers 200 and changes nothing, another `actual`
/// is 409. The answer is that of a check of cost 0 afterwards, in the
/// check's form. Never answered by the failure policy: if the store cannot
/// apply it, 503 `store_unavailable`, and a retry is safe. Needs the
/// `check` scope.
#[utoipa::path(
    post,
    path = "/v1/settle",
    tag = "limits",
    request_body(content = SettleRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Settled, now or by the same settle before; the state afterwards, as a check of cost 0 reports it (denied while the key is past its limit), in the check's form", body = CheckResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such reservation (code unknown_reservation): never handed out, of a denied or degraded check, expired, or edited. Nothing changed", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 409, description = "The reservation was already settled with another `actual` (code reservation_settled). Nothing changed", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "`reservation` or `actual` missing, `actual` not a whole number or above its bound, or another field (the body of earlier versions, with policy, key and reserved: invalid_request, naming `reservation`); the reservation's policy no longer loaded (unknown_policy)", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
        (status = 503, description = "The store is unreachable, too slow, or its circuit breaker is open (code store_unavailable): the settle may not have happened; retrying it is safe", body = ErrorBody),
    )
)]
pub async fn settle(State(state): State<AppState>, request: Request) -> Response {
    settled(&state, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The answer to a body without `reservation`.
const RESERVATION_REQUIRED: &str = "reservation: required. A settle names the reservation of \
     its check: check with \"reservation_ttl\" (e.g. \"10m\"), then send {\"reservation\": \
     <the answer's reservation.id>, \"actual\": N}. The body with policy, key, reserved and \
     actual is no longer accepted";

async fn settled(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let body = JsonBody::from_request(request, state).await?;
    let SettleRequest {
        reservation: id,
        actual,
    } = body.parse_with(|json| {
        if Present::of(json).is_some_and(|f| !f.has("reservation")) {
            return Err(ApiError::InvalidRequest(RESERVATION_REQUIRED.into()));
        }
        parse_json(json)
    })?;
    let (reservation, parsed) = reserved(state, &id)?;
    let check = parsed.check;
    // Every limit takes the whole amounts, so the smallest capacity bounds them.
    let most = check.max_cost().saturating_mul(MAX_SETTLE_CAPACITIES);
    if actual > most {
        return Err(ApiError::InvalidRequest(format!(
            "actual: at most {most} ({MAX_SETTLE_CAPACITIES} × the smallest limit, or burst), got {actual}"
        )));
    }
    let op = Op::settle(&check, actual).reserving(Some(&reservation));
    let adjusted = state
        .limiter
        .run_one(crate::limiter::Request::new(op))
        .await
        .map_err(|e| ApiError::adjusting(op.kind, e))?;
    match adjusted.reservation {
        Some(Settled::Now | Settled::Again) => Ok(respond(parsed.form, &adjusted.decision)),
        Some(Settled::Conflict) => Err(ApiError::ReservationSettled(
            "reservation: already settled with another actual (nothing changed); a reservation \
             is settled once"
                .into(),
        )),
        Some(Settled::Unknown) | None => Err(unknown_reservation()),
    }
}
