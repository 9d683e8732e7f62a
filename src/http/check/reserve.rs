//! A check's `reservation_ttl`: validated, and turned into the description
//! its reservation id carries (`domain::reservation`).
//!
//! The description is the check's own JSON, so that a settle rebuilds the
//! check with the very code that parsed it (`parse_check`), in the same
//! form: the body without `reservation_ttl` and `wait_ms`, with `cost` set
//! to what the check reserved. Only a check that asks for a reservation
//! pays for this; every other check skips it on one bit of `Present`.

use serde_json::{Map, Value, json};

use super::fields::WindowSpec;
use crate::domain::{Algorithm, Bounds, Check, Reservation, reservation_ttl_ms};
use crate::http::AppState;
use crate::http::error::ApiError;

/// What a check asked for: a reservation living `ttl_ms`, of the check
/// `description` describes.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub ttl_ms: u64,
    pub description: Vec<u8>,
}

impl Ask {
    /// A fresh reservation for the store, and its id for the answer.
    pub fn reservation(&self) -> (Reservation, String) {
        Reservation::new(&self.description, self.ttl_ms)
    }
}

/// The reservation `ttl` asks for on `check`, parsed from `json`, if any.
pub(super) fn ask(
    json: &[u8],
    check: &Check,
    ttl: Option<WindowSpec>,
    wait_ms: Option<u64>,
    bounds: &Bounds,
) -> Result<Option<Ask>, ApiError> {
    let Some(ttl) = ttl else {
        return Ok(None);
    };
    let ttl_ms = reservation_ttl_ms(&ttl.0, bounds)?;
    if check
        .limits
        .iter()
        .all(|l| l.rule.algorithm == Algorithm::Concurrency)
    {
        return Err(ApiError::InvalidRequest(
            "reservation_ttl: a check whose only limits are concurrency limits has nothing to \
             settle (a settle moves no lease; release the lease instead)"
                .into(),
        ));
    }
    if wait_ms.is_some_and(|ms| ms > 0) {
        return Err(ApiError::InvalidRequest(
            "reservation_ttl: a check that waits (wait_ms) cannot take a reservation; \
             leave wait_ms out or 0"
                .into(),
        ));
    }
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(json) else {
        unreachable!("a check's body that parsed is a JSON object")
    };
    body.remove("reservation_ttl");
    body.remove("wait_ms");
    if body.contains_key("ids") {
        // A policy with levels builds its keys from the ids under the file
        // in force: the reservation keeps the keys its check spent on, so
        // a reload that edits the templates cannot move a settle or a draw
        // onto counters that check never charged.
        body = built_levels(check);
    }
    body.insert("cost".into(), check.cost.into());
    // serde_json's map is ordered by key: one description per check.
    let description = serde_json::to_vec(&Value::Object(body)).expect("JSON values serialize");
    Ok(Some(Ask {
        ttl_ms,
        description,
    }))
}

/// The levels form of a check built from a policy with levels: each
/// level's policy and the key its template built.
fn built_levels(check: &Check) -> Map<String, Value> {
    let levels: Vec<Value> = check
        .level_ranges()
        .into_iter()
        .map(|(level, _)| json!({"policy": level.policy.as_deref(), "key": &*level.key}))
        .collect();
    let mut body = Map::new();
    body.insert("levels".into(), Value::Array(levels));
    body
}

/// What a settle or a draw answers for a reservation it cannot find.
pub(super) fn unknown_reservation() -> ApiError {
    ApiError::UnknownReservation(
        "reservation: unknown or expired (nothing changed): a reservation is answered only to \
         an allowed check, lives its reservation_ttl, and must be sent unchanged"
            .into(),
    )
}

/// The reservation `id` names, and its check rebuilt from the id's
/// description by the code that parsed it (`parse_check`), under the
/// policies in force now: what a settle and a draw both start from.
pub(super) fn reserved(
    state: &AppState,
    id: &str,
) -> Result<(Reservation, super::Parsed), ApiError> {
    let (reservation, description) = Reservation::parse(id).ok_or_else(unknown_reservation)?;
    let parsed = super::parse_check(state, &description).map_err(|e| match e {
        // A policy removed since the check: say so rather than "unknown".
        ApiError::UnknownPolicy(message) => {
            ApiError::UnknownPolicy(format!("the reservation's {message}"))
        }
        // Not a description this server wrote, or one a reload no longer
        // admits (a cost above a lowered limit): nothing to adjust.
        _ => unknown_reservation(),
    })?;
    Ok((reservation, parsed))
}
