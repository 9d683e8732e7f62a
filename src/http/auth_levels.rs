//! Forward-auth on a policy with levels (`/v1/auth/{hierarchy}`): each id
//! from its `ids_from` source, then the very check the hierarchy form of
//! `/v1/check` makes of those ids.

use axum::http::StatusCode;

use super::AppState;
use super::auth_error::{AuthError, explain, status};
use super::check::hierarchy_check;
use crate::domain::forward::RequestView;
use crate::domain::{Check, Hierarchy, PolicySet};

pub(super) fn prepare(
    state: &AppState,
    set: &PolicySet,
    hierarchy: &Hierarchy,
    view: &RequestView,
    cost: impl FnOnce() -> Result<Option<u64>, AuthError>,
) -> Result<(Check, StatusCode), AuthError> {
    let missing = status(hierarchy.missing_key_status);
    if hierarchy.ids_from.is_none() && !hierarchy.ids.is_empty() {
        return Err(AuthError::NoIdsFrom(hierarchy.name.to_string()));
    }
    let ids = hierarchy
        .ids_of(view)
        .map_err(|e| AuthError::UnreadableKey(e, missing))?;
    let ids = ids.map_err(|id| AuthError::MissingKey {
        status: missing,
        tried: match hierarchy.ids_from_text.get(&*id) {
            Some(source) => format!("the id {:?} from {source:?}", &*id),
            None => format!("the id {:?}", &*id),
        },
    })?;
    let check = hierarchy_check(state, set, hierarchy, &ids, cost()?)
        .map_err(|e| AuthError::InvalidRequest(explain(e)))?;
    Ok((check, status(hierarchy.deny_status)))
}
