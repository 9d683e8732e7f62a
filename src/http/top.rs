//! `GET /v1/top`: the client keys this instance saw checked or denied the
//! most, per policy, over the last minute or ten minutes, from the
//! heavy-hitters sketches (`crate::limiter::top`). Keys are never metric
//! labels; this is where an operator sees them, with the admin scope.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};

use super::check::unknown_policy;
use super::endpoint::Endpoint;
use super::{ApiError, AppState};
use crate::domain::auth::Scope;
use crate::limiter::top::{By, INLINE, Period};

/// The most keys one answer lists.
pub const MAX_LIMIT: usize = 1_000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TopQuery {
    /// A policy of the policies file, `inline` for checks that carry their
    /// limits, or `rls.<domain>` for an Envoy RLS domain.
    // `inline` is valid on every instance, so generators' example calls
    // (schemathesis') succeed wherever they run.
    #[param(example = "inline")]
    pub policy: String,
    /// `denied` (default): units of denied checks; `checked`: every unit.
    #[param(inline)]
    pub by: Option<ByParam>,
    /// `1m` (default) or `10m`.
    #[param(inline)]
    pub period: Option<PeriodParam>,
    /// Keys listed, heaviest first: 1 to 1000, default 10.
    #[param(example = 10, minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// What `/v1/top` counts.
#[derive(Debug, Clone, Copy, ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum ByParam {
    Denied,
    Checked,
}

/// The window of `/v1/top`.
#[derive(Debug, Clone, Copy, ToSchema)]
pub enum PeriodParam {
    #[schema(rename = "1m")]
    Minute,
    #[schema(rename = "10m")]
    TenMinutes,
}

// By hand, so that a bad value is answered with what the good ones are
// (the derived message names serde's "variant").
impl<'de> Deserialize<'de> for ByParam {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "denied" => Ok(ByParam::Denied),
            "checked" => Ok(ByParam::Checked),
            _ => Err(serde::de::Error::custom(r#"must be "denied" or "checked""#)),
        }
    }
}

impl<'de> Deserialize<'de> for PeriodParam {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "1m" => Ok(PeriodParam::Minute),
            "10m" => Ok(PeriodParam::TenMinutes),
            _ => Err(serde::de::Error::custom(r#"must be "1m" or "10m""#)),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopResponse {
    pub policy: String,
    /// `denied` or `checked`.
    pub by: &'static str,
    /// `1m` or `10m`.
    pub period: &'static str,
    /// How far back the counts reach: whole 10 s slices plus the current
    /// one so far (60-70 s for `1m`, 10-11 min for `10m`).
    pub window_ms: u64,
    /// Every unit counted in the window, listed or not: exact.
    pub total: u64,
    /// The most units any key not listed can have had.
    pub unlisted_max: u64,
    /// Heaviest first. Each key's true units lie in `[count - error, count]`.
    pub keys: Vec<TopKey>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopKey {
    /// The client key (a key over 200 bytes: its start, `…#` and a hash).
    pub key: String,
    /// An upper bound of the key's units in the window.
    pub count: u64,
    /// How far above the true units `count` may be.
    pub error: u64,
}

/// Admin: it lists client keys, which a check token's holder has no
/// business seeing.
pub(super) const ENDPOINT: Endpoint =
    Endpoint::at("/v1/top", Scope::Admin, |_| get(top), TopDoc::openapi);

#[derive(OpenApi)]
#[openapi(paths(top), components(schemas(TopResponse, TopKey)))]
struct TopDoc;

/// Who is being limited right now, on this instance.
#[utoipa::path(get, path = "/v1/top", tag = "limits", params(TopQuery),
    responses(
        (status = 200, description = "The heaviest keys of the policy on this instance", body = TopResponse),
        (status = 404, description = "The sketches are off (top.capacity = 0)", body = super::error::ErrorBody),
        (status = 422, description = "An unknown policy, or a bad parameter", body = super::error::ErrorBody)))]
pub async fn top(
    State(state): State<AppState>,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Result<Json<TopResponse>, ApiError> {
    let Query(query) = query.map_err(|e| {
        let text = e.body_text();
        let field = text.strip_prefix("Failed to deserialize query string: ");
        ApiError::InvalidRequest(field.unwrap_or(&text).to_string())
    })?;
    let (by, by_name) = match query.by.unwrap_or(ByParam::Denied) {
        ByParam::Denied => (By::Denied, "denied"),
        ByParam::Checked => (By::Checked, "checked"),
    };
    let (period, period_name) = match query.period.unwrap_or(PeriodParam::Minute) {
        PeriodParam::Minute => (Period::Minute, "1m"),
        PeriodParam::TenMinutes => (Period::TenMinutes, "10m"),
    };
    let limit = query.limit.unwrap_or(10);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid("limit: must be between 1 and 1000"));
    }
    let Some(sketches) = state.limiter.top() else {
        return Err(ApiError::Disabled(
            "the heavy-hitters sketches are off (top.capacity = 0)",
        ));
    };
    let found = sketches.top(&query.policy, by, period, limit);
    // A sketch outlives its policy's removal by a reload: only a policy in
    // force is answered (an RLS domain is known once checked).
    let known = query.policy == INLINE
        || state.policies.load().get(&query.policy).is_some()
        || (query.policy.starts_with("rls.") && found.is_some());
    if !known {
        let mut message = unknown_policy(&state.policies.load(), &query.policy);
        message.push_str(
            "; inline checks are \"inline\", an RLS domain is \"rls.<domain>\" once checked",
        );
        return Err(ApiError::UnknownPolicy(message));
    }
    let found = found.unwrap_or_default();
    Ok(Json(TopResponse {
        policy: query.policy,
        by: by_name,
        period: period_name,
        window_ms: found.window_ms,
        total: found.total,
        unlisted_max: found.unlisted_max,
        keys: found
            .keys
            .into_iter()
            .map(|h| TopKey {
                key: h.key,
                count: h.count,
                error: h.error,
            })
            .collect(),
    }))
}

fn invalid(message: &str) -> ApiError {
    ApiError::InvalidRequest(message.to_string())
}
