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

use super::forms::LevelsCheckRequest;
use super::request::WindowSpec;
use super::{ApiError, AppState, parse_check_at};
use crate::domain::{Check, LevelInput, MAX_LEVELS};
use crate::http::error::parse_json;

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
