//! `POST /v1/check`: the request in its three forms and the response as
//! they travel over HTTP, converted to and from the domain's types.
//!
//! Layout: `request` (the forms, telling them apart), `forms` (their
//! documented schemas),
//! `fields` (whole numbers, windows, algorithm names), `response` (the body
//! and headers), `adjust` (`POST /v1/reset` and `/v1/refund`, which take
//! the same forms), `reserve` (a check's `reservation_ttl`), `settle`
//! (`POST /v1/settle`: a reservation and `actual`), `lease` (`POST /v1/release` and `/v1/renew`: the
//! same forms with `lease`), `batch` (`POST /v1/checks`: many checks, each
//! parsed as a body here is), and here the handler and the errors
//! only it makes (`unknown_policy`).

pub(super) mod adjust;
pub(super) mod batch;
pub(super) mod draw;
mod fields;
mod fields_present;
mod forms;
mod hierarchy;
pub(super) mod lease;
mod levels;
mod request;
mod reserve;
mod response;
pub(super) mod settle;
mod unknown;

use std::time::{Duration, Instant};

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use utoipa::OpenApi;

pub(crate) use forms::window_or_calendar;
pub use forms::{CheckForms, HierarchyIds, LevelForms};
pub(super) use hierarchy::hierarchy_check;
pub use request::{
    AlgorithmName, CheckRequest, Form, InlineCheckRequest, LimitSpec, PolicyCheckRequest,
    WindowSpec,
};
pub use response::{CheckResponse, LevelResponse, LimitResponse, ReservationResponse};
pub(super) use unknown::unknown_policy;

use self::fields_present::Present;
use super::AppState;
use super::endpoint::Endpoint;
use super::error::{ApiError, ErrorBody, JsonBody, parse_json};
use crate::domain::auth::Scope;
use crate::domain::tenants::Overridden;
use crate::domain::{Check, Decision, Policy, ValidationError, validate_wait_ms};
use crate::limiter::Request as Run;
use crate::store::Op;

/// The endpoints of this module (`http::routes`): a check, a batch, and
/// what adjusts a check afterwards.
pub(super) const ENDPOINTS: &[Endpoint] = &[
    Endpoint::at(
        "/v1/check",
        Scope::Check,
        |_| post(check),
        CheckDoc::openapi,
    ),
    batch::ENDPOINT,
    adjust::RESET,
    adjust::REFUND,
    settle::ENDPOINT,
    draw::ENDPOINT,
    lease::RELEASE,
    lease::RENEW,
];

/// `POST /v1/check` in the OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    paths(check),
    components(schemas(
        CheckForms,
        LimitSpec,
        CheckResponse,
        LimitResponse,
        LevelForms,
        LevelResponse,
        HierarchyIds,
        AlgorithmName,
        WindowSpec
    ))
)]
struct CheckDoc;

/// Check rate limits and, if every one allows, spend from each.
#[utoipa::path(
    post,
    path = "/v1/check",
    tag = "limits",
    request_body(content = CheckForms, content_type = "application/json"),
    responses(
        (status = 200, description = "The decision, allowed or not. Denied responses carry Retry-After.", body = CheckResponse,
            headers(
                ("RateLimit-Policy" = String, description = "Every limit of the check, in order: \"<name>\";q=<limit>;w=<window seconds>, ... (the single-rule form's one limit is named default)"),
                ("RateLimit" = String, description = "The most restrictive limit: \"<name>\";r=<remaining>;t=<seconds until reset>"),
                ("X-RateLimit-Limit" = u64, description = "The most restrictive limit's limit"),
                ("X-RateLimit-Remaining" = u64, description = "The most restrictive limit's remaining units"),
                ("X-RateLimit-Reset" = u64, description = "Seconds until full capacity"),
                ("Retry-After" = u64, description = "When denied: seconds to wait, rounded up"),
            )),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "A field is missing, of the wrong type or out of range (code invalid_request); \
            the policy is not loaded, or no policies file is (code unknown_policy, the message lists the loaded policies); \
            the body mixes fields of two forms (code mixed_forms, the message names them); \
            wait_ms is above limits.max_wait (code invalid_request)", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
    )
)]
pub async fn check(State(state): State<AppState>, request: Request) -> Response {
    // Timed here rather than in a middleware layer: profiling showed the
    // layer's per-request boxing, and the body is parsed inside this
    // function, so parsing and error answers are still counted.
    let started = Instant::now();
    let (response, waited) = match decide(&state, request).await {
        Ok(answered) => answered,
        Err(error) => (error.into_response(), Duration::ZERO),
    };
    // Without the time spent waiting (wait_ms), which has its own
    // histogram: this one stays the service's own latency.
    let took = started.elapsed().saturating_sub(waited);
    state
        .metrics
        .decisions
        .check_duration
        .observe(took.as_secs_f64());
    response
}

/// The response, and how long the check waited for it.
async fn decide(state: &AppState, request: Request) -> Result<(Response, Duration), ApiError> {
    let Parsed {
        form,
        check,
        wait_ms,
        reservation,
        overridden,
        ..
    } = parse(state, request).await?;
    let wait_ms = validate_wait_ms(wait_ms, &state.bounds)?;
    let overridden = overridden.map(Overridden::as_str);
    if let Some(ask) = reservation {
        // Never waits (`reserve::ask` refuses wait_ms with it).
        let (reservation, id) = ask.reservation();
        let op = Op::check(&check).reserving(Some(&reservation));
        let decision = state.limiter.run_one(Run::new(op)).await?.decision;
        let mut response = body_for(form, &decision);
        response.overridden = overridden;
        response.reservation = ReservationResponse::granted(&decision, id, ask.ttl_ms);
        return Ok((response.into_response_for(&decision), Duration::ZERO));
    }
    let run = Run::new(Op::check(&check)).waiting(Duration::from_millis(wait_ms));
    let waited = state.limiter.run_one(run).await?;
    let decision = waited.decision;
    let mut response = body_for(form, &decision);
    response.overridden = overridden;
    // Only for requests that asked to wait: the others' bodies stay as
    // they were (the single-rule form's byte for byte).
    if wait_ms > 0 {
        response.waited_ms = Some(waited.waited.as_millis() as u64);
    }
    Ok((response.into_response_for(&decision), waited.waited))
}

/// A body of one of the three forms, validated into a check (the same
/// parsing for check, reset, refund and settle).
pub(super) struct Parsed {
    pub form: Form,
    pub check: Check,
    /// Whether the body has a `cost` field (a reset takes none).
    pub has_cost: bool,
    /// The fields that matter before parsing (`fields_present`), as found.
    pub fields: Option<Present>,
    /// `wait_ms` as given, not yet validated (only a check waits).
    pub wait_ms: Option<u64>,
    /// The reservation `reservation_ttl` asked for (only a check takes
    /// one).
    pub reservation: Option<reserve::Ask>,
    /// A policy check's override, when one applied.
    pub overridden: Option<Overridden>,
}

pub(super) async fn parse(state: &AppState, request: Request) -> Result<Parsed, ApiError> {
    let body = JsonBody::from_request(request, state).await?;
    body.parse_with(|json| parse_check(state, json))
}

/// One check's JSON (a whole body, or one item of a batch) in any of the
/// three forms, validated into the domain's check: the one conversion
/// every HTTP front end shares.
pub(super) fn parse_check(state: &AppState, json: &[u8]) -> Result<Parsed, ApiError> {
    parse_check_at(state, json, true)
}

/// [`parse_check`] of a whole check (`top`), or of one level of a levels
/// check, which cannot itself hold levels.
pub(super) fn parse_check_at(state: &AppState, json: &[u8], top: bool) -> Result<Parsed, ApiError> {
    // Not an object: the single-rule parser rejects it as it always did.
    let fields = Present::of(json);
    let has_cost = fields.is_some_and(|f| f.has("cost"));
    let form = Form::of(fields).map_err(ApiError::MixedForms)?;
    let mut overridden = None;
    let (check, wait_ms, ttl) = match form {
        Form::SingleRule => {
            let mut request: CheckRequest = parse_json(json)?;
            let (wait_ms, ttl) = (request.wait_ms, request.reservation_ttl.take());
            (Check::new(request.into(), &state.bounds)?, wait_ms, ttl)
        }
        Form::Inline => {
            let request: InlineCheckRequest = parse_json(json)?;
            let limits = request.limits.into_iter().map(Into::into).collect();
            let check = Check::inline(request.key, limits, request.cost, &state.bounds)?;
            (check, request.wait_ms, request.reservation_ttl)
        }
        Form::Policy => {
            let mut request: PolicyCheckRequest = parse_json(json)?;
            let (wait_ms, ttl) = (request.wait_ms, request.reservation_ttl.take());
            let (check, applied) = policy_check(state, request)?;
            overridden = applied;
            (check, wait_ms, ttl)
        }
        Form::Levels if !top => {
            return Err(ApiError::InvalidRequest(
                "levels: a level cannot hold levels of its own".into(),
            ));
        }
        Form::Levels => {
            let parsed = levels::parse_levels(state, json)?;
            (parsed.check, parsed.wait_ms, parsed.reservation_ttl)
        }
        Form::Hierarchy if !top => {
            return Err(ApiError::InvalidRequest(
                "ids: a level cannot be a policy of levels of its own".into(),
            ));
        }
        Form::Hierarchy => {
            let parsed = hierarchy::parse_hierarchy(state, json)?;
            (parsed.check, parsed.wait_ms, parsed.reservation_ttl)
        }
    };
    let reservation = match fields.is_some_and(|f| f.has("reservation_ttl")) {
        true => reserve::ask(json, &check, ttl, wait_ms, &state.bounds)?,
        false => None,
    };
    Ok(Parsed {
        form,
        check,
        has_cost,
        fields,
        wait_ms,
        reservation,
        overridden,
    })
}

/// The response body and headers of `decision` in the shape of `form`.
pub(super) fn respond(form: Form, decision: &Decision) -> Response {
    body_for(form, decision).into_response_for(decision)
}

/// The body of `decision` in the shape of `form`, without headers.
pub(super) fn body_for(form: Form, decision: &Decision) -> CheckResponse {
    match form {
        Form::SingleRule => CheckResponse::single_rule(decision),
        Form::Policy | Form::Inline => CheckResponse::with_limits(decision),
        Form::Levels | Form::Hierarchy => CheckResponse::with_levels(decision),
    }
}

/// The policy form's check, under the policy set in force now. The set is
/// loaded once; the check holds its own references to the limits, so a
/// reload during the store call changes nothing for this request.
fn policy_check(
    state: &AppState,
    request: PolicyCheckRequest,
) -> Result<(Check, Option<Overridden>), ApiError> {
    let set = state.policies.load();
    let Some(policy) = set.get(&request.policy) else {
        if let Some(hierarchy) = set.hierarchy(&request.policy) {
            return Err(hierarchy::hierarchy_without_ids(hierarchy));
        }
        return Err(ApiError::UnknownPolicy(unknown_policy(
            &set,
            &request.policy,
        )));
    };
    Ok(policy_for_key(state, policy, request.key, request.cost)?)
}

/// A check of `policy` for `key`: its runtime override first, then the
/// file's, then the policy's limits; and which applied. Every HTTP front
/// end builds a policy check here.
pub(super) fn policy_for_key(
    state: &AppState,
    policy: &Policy,
    key: String,
    cost: Option<u64>,
) -> Result<(Check, Option<Overridden>), ValidationError> {
    let view = state.tenants.view();
    let api = view
        .rules(&key)
        .and_then(|rules| rules.override_for(&policy.name, crate::tenants::now_ms()));
    policy.check_overridden(key, cost, &state.bounds, api)
}
