//! The hierarchy form of a check: a policy of the file that names its
//! levels, and the ids its key templates take (`domain::policy::hierarchy`).
//!
//! ```json
//! {"policy": "llm", "ids": {"org": "1", "team": "4", "user": "7"}, "cost": 1200}
//! ```
//!
//! It becomes the levels check a caller listing those policies and keys in
//! `levels` would send (each level's policy with its key's overrides, as
//! in the policy form), so it is decided, answered and spent exactly as
//! that one. Forward-auth builds the same check from `ids_from`.

use std::collections::BTreeMap;

use super::forms::HierarchyCheckRequest;
use super::request::WindowSpec;
use super::{ApiError, AppState, policy_for_key};
use crate::domain::{Check, Hierarchy, LevelInput, PolicySet, ValidationError};
use crate::http::error::parse_json;

/// A hierarchy body, parsed.
pub(super) struct ParsedHierarchy {
    pub check: Check,
    pub wait_ms: Option<u64>,
    pub reservation_ttl: Option<WindowSpec>,
}

pub(super) fn parse_hierarchy(state: &AppState, json: &[u8]) -> Result<ParsedHierarchy, ApiError> {
    let request: HierarchyCheckRequest = parse_json(json)?;
    let set = state.policies.load();
    let Some(hierarchy) = set.hierarchy(&request.policy) else {
        return Err(not_a_hierarchy(&set, &request.policy));
    };
    let check = hierarchy_check(state, &set, hierarchy, &request.ids, request.cost)?;
    Ok(ParsedHierarchy {
        check,
        wait_ms: request.wait_ms,
        reservation_ttl: request.reservation_ttl,
    })
}

/// The levels check of `hierarchy` for `ids`, under `set` (the one it was
/// loaded with, which holds every level's policy). Errors name the field
/// (`ids.org`, `levels[1].key`).
pub(in crate::http) fn hierarchy_check(
    state: &AppState,
    set: &PolicySet,
    hierarchy: &Hierarchy,
    ids: &BTreeMap<String, String>,
    cost: Option<u64>,
) -> Result<Check, ValidationError> {
    let keys = hierarchy.keys(ids, state.bounds.max_key_bytes)?;
    let mut inputs = Vec::with_capacity(keys.len());
    for (i, (level, key)) in hierarchy.levels.iter().zip(keys).enumerate() {
        let policy = set
            .get(&level.policy)
            .expect("a hierarchy's levels name policies of its own set");
        let (check, _) = policy_for_key(state, policy, key, None).map_err(|e| ValidationError {
            field: format!("levels[{i}].{}", e.field),
            message: e.message,
        })?;
        inputs.push(LevelInput {
            check,
            name: Some(level.name.clone()),
        });
    }
    Check::levels(inputs, cost)
}

/// `policy` names no hierarchy: a plain policy (send `key`), or none.
fn not_a_hierarchy(set: &PolicySet, name: &str) -> ApiError {
    if set.get(name).is_some() {
        return ApiError::InvalidRequest(format!(
            "ids: policy {name:?} has no levels; send `key` in place of `ids`"
        ));
    }
    let shown: String = name.chars().take(64).collect();
    let cut = if shown.len() < name.len() { "..." } else { "" };
    let names: Vec<String> = set
        .hierarchies()
        .take(32)
        .map(|h| format!("{:?}", &*h.name))
        .collect();
    let loaded = match names.is_empty() {
        true => "no policy with levels is loaded".to_string(),
        false => format!("policies with levels: {}", names.join(", ")),
    };
    ApiError::UnknownPolicy(format!("policy: unknown policy {shown:?}{cut}; {loaded}"))
}

/// `policy` is a hierarchy, sent in the policy form (`key` in place of
/// `ids`): the error that says so.
pub(super) fn hierarchy_without_ids(hierarchy: &Hierarchy) -> ApiError {
    let ids: Vec<&str> = hierarchy.ids.iter().map(|i| &**i).collect();
    ApiError::InvalidRequest(format!(
        "key: policy {:?} is a policy of levels; send `ids` ({{{}}}) in place of `key`",
        &*hierarchy.name,
        ids.join(", ")
    ))
}
