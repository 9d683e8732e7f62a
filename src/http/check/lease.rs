//! `POST /v1/release` and `POST /v1/renew`: the end (or the extension) of
//! a lease a check took on its concurrency limit. The three forms of a
//! check, naming the same limits the check did, with the `lease` it was
//! answered; parsed and validated by the same code as a check. The
//! domain's semantics are `domain::algorithms::concurrency`'s.
//!
//! Both need only the `check` scope (`http::bearer`): they are the second
//! half of a caller's own check, and a lease id is 128 random bits, so
//! nobody can name (and free) a lease they were not given.

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::{OpenApi, PartialSchema, ToSchema};

use super::fields_present::Present;
use super::forms::forms;
use super::response::{CheckResponse, LeaseResponse};
use super::{body_for, parse_check};
use crate::domain::LeaseId;
use crate::domain::auth::Scope;
use crate::http::AppState;
use crate::http::endpoint::Endpoint;
use crate::http::error::{ApiError, ErrorBody, JsonBody, parse_json};
use crate::store::{Op, OpKind};

/// The `check` scope, as a check's: a lease id is its holder's alone (128
/// random bits), so a release or renewal moves only the caller's own slot.
pub(in crate::http) const RELEASE: Endpoint = Endpoint::at(
    "/v1/release",
    Scope::Check,
    |_| post(release),
    ReleaseDoc::openapi,
);
pub(in crate::http) const RENEW: Endpoint = Endpoint::at(
    "/v1/renew",
    Scope::Check,
    |_| post(renew),
    RenewDoc::openapi,
);

#[derive(OpenApi)]
#[openapi(paths(release), components(schemas(LeaseForms, LeaseResponse)))]
struct ReleaseDoc;

#[derive(OpenApi)]
#[openapi(paths(renew), components(schemas(LeaseForms, LeaseResponse)))]
struct RenewDoc;

/// The lease a release or renewal names, beside the fields of a check's form.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LeaseField {
    /// The `lease.id` a check was answered: 32 lowercase hex digits. A
    /// well-formed id that names no live lease changes nothing
    /// (`released`/`renewed` false); anything else is 422.
    // No example: a tool that sends examples expects them accepted, and
    // no example id names a live lease (it would be `released: false`).
    #[schema(pattern = "^[0-9a-f]{32}$")]
    pub lease: String,
}

/// The request body of `POST /v1/release` and `/v1/renew`: the three
/// forms of a check without `cost` or `wait_ms`, each with `lease`.
pub struct LeaseForms;

impl ToSchema for LeaseForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "LeaseRequest".into()
    }
}

impl PartialSchema for LeaseForms {
    fn schema() -> RefOr<Schema> {
        let RefOr::T(Schema::Object(field)) = LeaseField::schema() else {
            unreachable!("a derived struct schema is an inline object")
        };
        let RefOr::T(Schema::OneOf(mut one_of)) =
            forms(&["cost", "wait_ms", "reservation_ttl", "levels"], "Lease")
        else {
            unreachable!("the forms are a oneOf")
        };
        for item in &mut one_of.items {
            let RefOr::T(Schema::Object(form)) = item else {
                unreachable!("each form is an inline object")
            };
            for (name, schema) in &field.properties {
                form.properties.insert(name.clone(), schema.clone());
                form.required.push(name.clone());
            }
        }
        RefOr::T(Schema::OneOf(one_of))
    }
}

/// Free a lease at once, so the next check on the key can take its slot.
///
/// The body is the check that took the lease, in any of the three forms of
/// `POST /v1/check` (the same policy, or the same limits, and key), with
/// `lease`: the `lease.id` it was answered; `cost` and `wait_ms` are
/// answered 422, and so is a check without a concurrency limit. Only the
/// concurrency limit's slot is freed: the check's rate limits keep what it
/// spent. Idempotent: `released` is false, and nothing changes, for a
/// lease that expired, was released already, or never was. A release ends
/// cached denials of the key and wakes its waiters, on every instance.
/// Never answered by the failure policy: if the store cannot apply it, 503
/// `store_unavailable`, and the caller retries (or lets the lease expire).
/// Needs the `check` scope.
#[utoipa::path(
    post,
    path = "/v1/release",
    tag = "limits",
    request_body(content = LeaseForms, content_type = "application/json"),
    responses(
        (status = 200, description = "`released`: whether the lease was live; the state afterwards, as a check of cost 0 reports it", body = CheckResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "As for /v1/check (invalid_request, unknown_policy, mixed_forms); also `lease` missing or not 32 lowercase hex digits, a check without a concurrency limit, and a `cost` or `wait_ms` field (invalid_request, naming the field)", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
        (status = 503, description = "The store is unreachable, too slow, or its circuit breaker is open (code store_unavailable): the lease may still be held; retry", body = ErrorBody),
    )
)]
pub async fn release(State(state): State<AppState>, request: Request) -> Response {
    leased(&state, OpKind::Release, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Extend a lease for long work: it lives `lease_ttl` from now.
///
/// The body is that of `POST /v1/release`. A live lease is extended to
/// now + the concurrency limit's `lease_ttl` (`renewed` true, and `lease`
/// with its new `expires_in_ms`); one that expired or was released is not
/// brought back, since its slot may be someone else's now (`renewed`
/// false: take a new one with a check). Never answered by the failure
/// policy: 503 `store_unavailable` if the store cannot apply it. Needs the
/// `check` scope.
#[utoipa::path(
    post,
    path = "/v1/renew",
    tag = "limits",
    request_body(content = LeaseForms, content_type = "application/json"),
    responses(
        (status = 200, description = "`renewed`: whether the lease was live and now lives lease_ttl from now; the state afterwards, as a check of cost 0 reports it", body = CheckResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "As for /v1/release", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
        (status = 503, description = "The store is unreachable, too slow, or its circuit breaker is open (code store_unavailable): the lease was perhaps not renewed; retry", body = ErrorBody),
    )
)]
pub async fn renew(State(state): State<AppState>, request: Request) -> Response {
    leased(&state, OpKind::Renew, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// A release or renewal (`kind`, its name the verb of its messages).
async fn leased(state: &AppState, kind: OpKind, request: Request) -> Result<Response, ApiError> {
    let body = JsonBody::from_request(request, state).await?;
    let verb = kind.name();
    let (parsed, LeaseField { lease }) = body.parse_with(|json| {
        if let Some(fields) = Present::of(json) {
            for field in ["cost", "wait_ms", "reservation_ttl"] {
                if fields.has(field) {
                    return Err(ApiError::InvalidRequest(format!(
                        "{field}: to {verb} a lease, send the check's form and its `lease`, without `{field}`"
                    )));
                }
            }
        }
        Ok((parse_check(state, json)?, parse_json(json)?))
    })?;
    let Some(lease) = LeaseId::parse(&lease) else {
        return Err(ApiError::InvalidRequest(
            "lease: must be the lease.id a check was answered: 32 lowercase hex digits".into(),
        ));
    };
    let mut check = parsed.check;
    if check.concurrency().is_none() {
        return Err(ApiError::InvalidRequest(format!(
            "lease: this check has no concurrency limit, so no lease to {verb}"
        )));
    }
    check.cost = 0;
    let op = Op {
        kind,
        lease: Some(&lease),
        ..Op::check(&check)
    };
    let adjusted = state
        .limiter
        .run_one(crate::limiter::Request::new(op))
        .await
        .map_err(|e| ApiError::adjusting(kind, e))?;
    let live = adjusted.lease.unwrap_or(false);
    let mut response = body_for(parsed.form, &adjusted.decision);
    match kind {
        OpKind::Renew => response.renewed = Some(live),
        _ => response.released = Some(live),
    }
    Ok(response.into_response_for(&adjusted.decision))
}
