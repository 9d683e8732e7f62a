//! `POST /v1/draw`: more units drawn on a reservation while its request
//! streams (an LLM completion whose tokens pass the estimate the check
//! reserved), each draw decided like a check of its size on every limit
//! (every level of a levels check), all or nothing.
//!
//! Like a settle it needs only the `check` scope and takes its limits, key
//! and reserved cost from the reservation, never from the caller: a draw
//! can only spend (a denied one spends nothing), so it mints nothing. Draws
//! are numbered by the caller (`seq`): the record keeps the last allowed
//! one, so a retried draw (the same `seq`) spends nothing again, and one
//! that arrives after a later one is refused. A later settle counts
//! everything drawn: `actual` is set against the reservation's cost plus
//! the draws, and what was not used comes back. Unsettled, the
//! reservation lapses at its TTL with everything drawn spent.

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use utoipa::{OpenApi, ToSchema};

use super::fields::whole_number;
use super::reserve::{reserved, unknown_reservation};
use super::response::CheckResponse;
use super::{Parsed, body_for};
use crate::domain::auth::Scope;
use crate::domain::{Reservation, TenantMark};
use crate::http::AppState;
use crate::http::endpoint::Endpoint;
use crate::http::error::{ApiError, ErrorBody, JsonBody, parse_json};
use crate::store::{Drawn, Op};

/// The `check` scope, as a settle: see the module doc.
pub(in crate::http) const ENDPOINT: Endpoint =
    Endpoint::at("/v1/draw", Scope::Check, |_| post(draw), DrawDoc::openapi);

#[derive(OpenApi)]
#[openapi(paths(draw), components(schemas(DrawRequest)))]
struct DrawDoc;

/// The largest `seq`: a draw's number travels as a Lua number, exact up to
/// 2^53.
const MAX_SEQ: u64 = 1 << 53;

/// The request body of `POST /v1/draw`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrawRequest {
    /// The `reservation.id` of an allowed check that asked for one
    /// (`reservation_ttl`), unchanged.
    #[schema(pattern = "^[A-Za-z0-9_-]+$")]
    pub reservation: String,
    /// Units to draw now, checked on every limit like a check of this
    /// cost: at most the check's largest cost (the smallest `limit`, or
    /// `burst`).
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub cost: u64,
    /// This draw's number, 1 to 2^53, growing with each draw of the
    /// reservation: a retry sends the same number again, and spends
    /// nothing twice.
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 1, maximum = 9_007_199_254_740_992_u64)]
    pub seq: u64,
}

/// Draw more on a reservation while its request streams.
///
/// The gateway checked with an estimate and `reservation_ttl`; whenever its
/// usage passes what is reserved it draws more, `cost` units as draw
/// number `seq`. Each draw is allowed or denied on every limit of the
/// check (every level of a levels check) like a check of `cost`, all or
/// nothing, so the gateway can cut the stream the moment the budget runs
/// out. The answer is the check's (in its form) plus `drawn`: the
/// reservation's total so far, its check's cost and every allowed draw.
/// A retry (the same `seq` as the last allowed draw) answers allowed and
/// spends nothing; a denied draw spends nothing and may be retried with the
/// same `seq`. A later `POST /v1/settle` sets `actual` against that total.
/// Never answered by the failure policy: if the store cannot apply it,
/// 503 `store_unavailable`. Needs the `check` scope.
#[utoipa::path(
    post,
    path = "/v1/draw",
    tag = "limits",
    request_body(content = DrawRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Decided like a check of `cost` (allowed: spent on every limit and added to the reservation; denied: nothing spent), or a retry of the last allowed draw (allowed, nothing spent); with `drawn`, the reservation's total", body = CheckResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such reservation (code unknown_reservation): never handed out, expired, or edited. Nothing changed", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 409, description = "The reservation is settled (code reservation_settled), or a later `seq` was drawn already (code draw_out_of_order). Nothing changed", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "`reservation`, `cost` or `seq` missing or out of range, or another field (invalid_request); the reservation's policy no longer loaded (unknown_policy)", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
        (status = 503, description = "The store is unreachable, too slow, or its circuit breaker is open (code store_unavailable): the draw may not have happened; retrying it with the same `seq` is safe", body = ErrorBody),
    )
)]
pub async fn draw(State(state): State<AppState>, request: Request) -> Response {
    drawn(&state, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn drawn(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let body = JsonBody::from_request(request, state).await?;
    let DrawRequest {
        reservation: id,
        cost,
        seq,
    } = body.parse_with(parse_json)?;
    if !(1..=MAX_SEQ).contains(&seq) {
        return Err(ApiError::InvalidRequest(format!(
            "seq: must be 1 to {MAX_SEQ}, got {seq}"
        )));
    }
    let (reservation, parsed) = reserved_check(state, &id)?;
    let check = &parsed.check;
    let most = check.max_cost();
    if cost > most {
        return Err(ApiError::InvalidRequest(format!(
            "cost: at most {most} (a draw is checked like a check of its cost), got {cost}"
        )));
    }
    let op = Op::draw(check, &reservation, cost, seq);
    let answer = state
        .limiter
        .run_one(crate::limiter::Request::new(op))
        .await
        .map_err(|e| ApiError::adjusting(op.kind, e))?;
    let mut decision = answer.decision;
    if let Some(TenantMark::Blocked { .. }) = decision.tenant {
        // A runtime block: denied, nothing asked of the store.
        return Ok(body_for(parsed.form, &decision).into_response_for(&decision));
    }
    let (found, units) = answer.drawn.unwrap_or((Drawn::Unknown, 0));
    refused(found, seq)?;
    if found == Drawn::Again {
        // The last allowed draw again: allowed, as it was, nothing spent.
        decision.allowed = true;
        decision.retry_after_ms = 0;
    }
    let mut response = body_for(parsed.form, &decision);
    response.drawn = Some(check.cost.saturating_add(units));
    Ok(response.into_response_for(&decision))
}

/// The reservation `id` names and its check, which must hold no
/// concurrency limit.
fn reserved_check(state: &AppState, id: &str) -> Result<(Reservation, Parsed), ApiError> {
    let (reservation, parsed) = reserved(state, id)?;
    if parsed.check.concurrency().is_some() {
        // A draw is a rate check; a lease is taken by the check alone.
        return Err(ApiError::InvalidRequest(
            "reservation: a draw takes no concurrency limit (its check's lease is released with \
             POST /v1/release); reserve on the rate limits alone to draw"
                .into(),
        ));
    }
    Ok((reservation, parsed))
}

/// The error of a draw its reservation's record refused, if it did.
fn refused(found: Drawn, seq: u64) -> Result<(), ApiError> {
    match found {
        Drawn::Now | Drawn::Denied | Drawn::Again => Ok(()),
        Drawn::Unknown => Err(unknown_reservation()),
        Drawn::Settled => Err(ApiError::ReservationSettled(
            "reservation: already settled (nothing changed); draws end with the settle".into(),
        )),
        Drawn::Stale => Err(ApiError::DrawOutOfOrder(format!(
            "seq: {seq} is below the last draw this reservation allowed (nothing changed); \
             number each draw above the one before, and retry with the same seq"
        ))),
    }
}
