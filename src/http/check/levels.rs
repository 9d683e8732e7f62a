//! The levels form of a check (`domain::level`): several check forms, each
//! on its own key, decided as one, all or nothing.
//!
//! ```json
//! {"levels": [{"policy": "org_monthly", "key": "org:1"},
//!             {"policy": "team_daily", "key": "team:4"},
//!             {"key": "user:7", "limit": 60, "window": "1m"}],
//!  "cost": 1200}
//! ```
//!
//! Each level is parsed as a whole body of its form is (the same
//! conversion, overrides and errors, each named `levels[i].`), without the
//! fields only a whole check takes (`cost`, `wait_ms`,
//! `reservation_ttl`). The answer's top-level fields are the combined
//! decision; `levels` holds each level's.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::{PartialSchema, ToSchema};

use super::fields::optional_whole_number;
use super::request::WindowSpec;
use super::response::LimitResponse;
use super::{ApiError, AppState, parse_check_at};
use crate::domain::{Check, Decision, Level, LevelInput, LimitDecision, MAX_LEVELS};
use crate::http::error::parse_json;

/// The levels form: up to 8 check forms, each on its own key, allowed only
/// if every level allows `cost`, and only then spent on all of them.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"levels": [
    {"key": "team:4", "limit": 50000, "window": "1d", "algorithm": "fixed_window"},
    {"key": "user:7", "limit": 60, "window": "1m"}
], "cost": 1200}))]
pub struct LevelsCheckRequest {
    /// 1 to 8 levels, each a check form of its own (`{"policy", "key"}`,
    /// `{"key", "limits"}` or `{"key", "limit", "window", ...}`) without
    /// `cost`, `wait_ms` or `reservation_ttl`. No two levels may keep the
    /// same counter (the same key and policy, or the same key, algorithm
    /// and window inline); no level may hold a concurrency limit or be a
    /// shadow policy. A level's counters are the ones a check of that
    /// form alone spends.
    #[schema(value_type = Vec<LevelForms>, min_items = 1, max_items = 8)]
    pub levels: Vec<Box<RawValue>>,
    /// Units this request spends on every level, default 1; 0 reports
    /// without spending. At most the smallest capacity among all the
    /// levels' limits; more is 422.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0)]
    pub cost: Option<u64>,
    /// Blocking acquire, as in the other forms: when denied, wait up to
    /// this many milliseconds for every level to allow. Default 0.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0, maximum = 10_000)]
    pub wait_ms: Option<u64>,
    /// Ask for a reservation of `cost` on every level, to settle with
    /// `POST /v1/settle`, as in the other forms.
    #[serde(default)]
    pub reservation_ttl: Option<WindowSpec>,
}

/// One level as documented: a check form without the fields only a whole
/// check takes.
pub struct LevelForms;

impl ToSchema for LevelForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "LevelRequest".into()
    }
}

impl PartialSchema for LevelForms {
    fn schema() -> RefOr<Schema> {
        super::forms::forms(&["cost", "wait_ms", "reservation_ttl", "levels"], "Level")
    }
}

/// A levels body, parsed.
pub(super) struct ParsedLevels {
    pub check: Check,
    pub wait_ms: Option<u64>,
    pub reservation_ttl: Option<WindowSpec>,
}

/// The fields a level may not carry: the whole check's (a level holding
/// `levels` is refused as it is parsed, before its levels would be).
const WHOLE_CHECK_FIELDS: [&str; 3] = ["cost", "wait_ms", "reservation_ttl"];

pub(super) fn parse_levels(state: &AppState, json: &[u8]) -> Result<ParsedLevels, ApiError> {
    let request: LevelsCheckRequest = parse_json(json)?;
    if request.levels.is_empty() || request.levels.len() > MAX_LEVELS {
        return Err(ApiError::InvalidRequest(format!(
            "levels: must hold 1 to {MAX_LEVELS} levels, got {}",
            request.levels.len()
        )));
    }
    let mut inputs = Vec::with_capacity(request.levels.len());
    for (i, raw) in request.levels.iter().enumerate() {
        let parsed =
            parse_check_at(state, raw.get().as_bytes(), false).map_err(|e| within(e, i))?;
        if let Some(field) = WHOLE_CHECK_FIELDS
            .iter()
            .find(|f| parsed.fields.is_some_and(|p| p.has(f)))
        {
            return Err(ApiError::InvalidRequest(format!(
                "levels[{i}].{field}: a level takes no `{field}` of its own; the check's applies \
                 to every level"
            )));
        }
        inputs.push(LevelInput {
            check: parsed.check,
            name: None,
        });
    }
    let check = Check::levels(inputs, request.cost)?;
    Ok(ParsedLevels {
        check,
        wait_ms: request.wait_ms,
        reservation_ttl: request.reservation_ttl,
    })
}

/// `error` of level `i`, its message naming the level.
fn within(error: ApiError, i: usize) -> ApiError {
    let at = |message: String| format!("levels[{i}].{message}");
    match error {
        ApiError::InvalidRequest(m) => ApiError::InvalidRequest(at(m)),
        ApiError::UnknownPolicy(m) => ApiError::UnknownPolicy(at(m)),
        ApiError::MixedForms(m) => ApiError::MixedForms(at(m)),
        ApiError::InvalidJson(m) => ApiError::InvalidRequest(at(m)),
        other => other,
    }
}

/// One level's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct LevelResponse {
    /// Every limit of this level allowed `cost`.
    pub allowed: bool,
    /// The `limit` of this level's most restrictive limit.
    pub limit: u64,
    /// Units this level has left after the check (or, when the check was
    /// denied, as it is: nothing was spent).
    pub remaining: u64,
    /// 0 when this level allowed; otherwise the smallest wait after which
    /// it would.
    pub retry_after_ms: u64,
    /// Time until this level is back to full capacity.
    pub reset_after_ms: u64,
    /// The level's policy, null for inline limits.
    #[schema(value_type = Option<String>)]
    pub policy: Option<Arc<str>>,
    /// What each limit of this level decided, in its policy's (or the
    /// level's) order: for a policy's level, or one of several inline
    /// limits (a level of one inline rule is its own answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub limits: Option<Vec<LimitResponse>>,
}

/// Each level's answer, in order, from the combined `decision`.
pub(super) fn level_answers(decision: &Decision) -> Vec<LevelResponse> {
    let mut answers = Vec::new();
    let mut start = 0;
    while start < decision.limits.len() {
        let level = decision.limits[start].level.clone();
        let index = level.as_ref().map(|l| l.index);
        let end = (start..decision.limits.len())
            .find(|&i| decision.limits[i].level.as_ref().map(|l| l.index) != index)
            .unwrap_or(decision.limits.len());
        answers.push(level_answer(level, &decision.limits[start..end]));
        start = end;
    }
    answers
}

fn level_answer(level: Option<Arc<Level>>, limits: &[LimitDecision]) -> LevelResponse {
    // As the whole check's: the fewest remaining, a denying one among
    // equals, then the first.
    let tightest = (0..limits.len())
        .min_by_key(|&i| (limits[i].remaining, limits[i].allowed, i))
        .unwrap_or(0);
    LevelResponse {
        allowed: limits.iter().all(|l| l.allowed),
        limit: limits[tightest].limit,
        remaining: limits[tightest].remaining,
        retry_after_ms: limits
            .iter()
            .filter(|l| !l.allowed)
            .map(|l| l.retry_after_ms)
            .max()
            .unwrap_or(0),
        reset_after_ms: limits.iter().map(|l| l.reset_after_ms).max().unwrap_or(0),
        // Listed for a policy, or several limits: one inline rule's limit
        // says nothing the level's own fields do not.
        limits: (level.as_ref().is_some_and(|l| l.policy.is_some()) || limits.len() > 1)
            .then(|| limits.iter().map(LimitResponse::from).collect()),
        policy: level.and_then(|l| l.policy.clone()),
    }
}
