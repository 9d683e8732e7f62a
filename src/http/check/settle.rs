//! `POST /v1/settle`: a reservation settled afterwards. The three forms of
//! a check with `reserved` (the cost the caller checked with) and `actual`
//! (what the work cost), parsed and validated by the same code as a check;
//! the domain's semantics are `domain::algorithms::settle`'s.
//!
//! It needs only the `check` scope (`http::bearer`), unlike a refund, which
//! is an operator's tool that gives back any amount: a settle is the second
//! half of a caller's own check. What it can give back is bounded by the
//! reservation it names (`reserved` is a check's cost, at most a capacity),
//! and what it can add is bounded by `actual` (at most
//! [`MAX_SETTLE_CAPACITIES`] capacities): a caller holding a `check` token
//! could spend as much with checks of its own, except past the limit, which
//! is the point. A caller that lies about `reserved` can win back at most
//! one capacity per call, as a retried check after a lost answer could.

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::{PartialSchema, ToSchema};

use super::fields::whole_number;
use super::fields_present::Present;
use super::forms::forms;
use super::response::CheckResponse;
use super::{parse_check, respond};
use crate::domain::algorithms::MAX_SETTLE_CAPACITIES;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody, JsonBody, parse_json};

/// The two amounts of a settle, beside the fields of a check's form.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SettleAmounts {
    /// The cost the request was checked with (its estimate), validated as
    /// a check's cost: at most the smallest `limit` of the check
    /// (token_bucket and gcra: `burst`).
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub reserved: u64,
    /// What the request turned out to cost. Below `reserved` the
    /// difference is given back; above it, spent without a check, which
    /// may go past the limit. At most 100 × the smallest `limit` of the
    /// check (token_bucket and gcra: `burst`).
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub actual: u64,
}

/// The request body of `POST /v1/settle`: the three forms of a check
/// without `cost` or `wait_ms`, each with `reserved` and `actual`.
pub struct SettleForms;

impl ToSchema for SettleForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "SettleRequest".into()
    }
}

impl PartialSchema for SettleForms {
    fn schema() -> RefOr<Schema> {
        let RefOr::T(Schema::Object(amounts)) = SettleAmounts::schema() else {
            unreachable!("a derived struct schema is an inline object")
        };
        let RefOr::T(Schema::OneOf(mut one_of)) = forms(&["cost", "wait_ms"], "Settle") else {
            unreachable!("the forms are a oneOf")
        };
        for item in &mut one_of.items {
            let RefOr::T(Schema::Object(form)) = item else {
                unreachable!("each form is an inline object")
            };
            for (name, schema) in &amounts.properties {
                form.properties.insert(name.clone(), schema.clone());
                form.required.push(name.clone());
            }
        }
        RefOr::T(Schema::OneOf(one_of))
    }
}

/// Settle a request's cost afterwards: give back what it did not use, or
/// spend what it used beyond its reservation.
///
/// The body is any of the three forms of `POST /v1/check` with `reserved`
/// (the cost it was checked with) and `actual` (what it cost), both
/// required whole numbers; `cost` and `wait_ms` are answered 422. Every
/// limit is settled on its own: `actual` below `reserved` is a refund of
/// the difference (as `POST /v1/refund`); equal changes nothing; above, the
/// difference is spent without a check and may take the key past its
/// limit, so later checks are denied until it has recovered:
/// fixed_window counts it in the window current at settle time,
/// sliding_window in the current window, sliding_log logs it at now,
/// token_bucket owes it as tokens below zero, gcra moves its TAT later.
/// The usage a settle leaves is at most 101 × the limit (token_bucket and
/// gcra: `burst`). The answer is that of a check of cost 0 afterwards.
/// Never answered by the failure policy: if the store cannot apply it, 503
/// `store_unavailable` (a retry may settle twice if the first attempt did
/// reach the store). Needs the `check` scope.
#[utoipa::path(
    post,
    path = "/v1/settle",
    tag = "limits",
    request_body(content = SettleForms, content_type = "application/json"),
    responses(
        (status = 200, description = "Settled; the state afterwards, as a check of cost 0 reports it (denied while the key is past its limit)", body = CheckResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "As for /v1/check (invalid_request, unknown_policy, mixed_forms); also `reserved` or `actual` missing, not a whole number, or above its bound, and a `cost` or `wait_ms` field (invalid_request, naming the field)", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
        (status = 503, description = "The store is unreachable, too slow, or its circuit breaker is open (code store_unavailable): the settle may not have happened", body = ErrorBody),
    )
)]
pub async fn settle(State(state): State<AppState>, request: Request) -> Response {
    settled(&state, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn settled(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let body = JsonBody::from_request(request, state).await?;
    let (parsed, SettleAmounts { reserved, actual }) = body.parse_with(|json| {
        if let Some(fields) = Present::of(json) {
            if fields.has("cost") {
                return Err(ApiError::InvalidRequest(
                    "cost: a settle takes `reserved` (the cost checked with) and `actual`, not `cost`"
                        .into(),
                ));
            }
            if fields.has("wait_ms") {
                return Err(ApiError::InvalidRequest(
                    "wait_ms: a settle never waits".into(),
                ));
            }
        }
        Ok((parse_check(state, json)?, parse_json(json)?))
    })?;
    let mut check = parsed.check;
    // Every limit takes the whole amounts, so the smallest capacity bounds them.
    let capacity = check.max_cost();
    if reserved > capacity {
        return Err(ApiError::InvalidRequest(format!(
            "reserved: at most {capacity} (a check's cost: the smallest limit, or burst), got {reserved}"
        )));
    }
    let most = capacity.saturating_mul(MAX_SETTLE_CAPACITIES);
    if actual > most {
        return Err(ApiError::InvalidRequest(format!(
            "actual: at most {most} ({MAX_SETTLE_CAPACITIES} × the smallest limit, or burst), got {actual}"
        )));
    }
    check.cost = reserved;
    let decision = state
        .limiter
        .settle(&check, actual)
        .await
        .map_err(|e| ApiError::adjusting("settle", e))?;
    Ok(respond(parsed.form, &decision))
}
