//! Overrides, blocks and exemptions by API (admin scope): `PUT`, `GET` and
//! `DELETE` on `/v1/overrides/{policy}/{key}`, `/v1/blocks/{key}` and
//! `/v1/exemptions/{key}`, their listings, and `GET /v1/audit`. The
//! entries and their rules are `domain::tenants`'; where they are kept,
//! `crate::tenants`. Bodies and answers are in `body.rs`, the OpenAPI
//! operations in `doc.rs`.

mod body;
mod doc;

use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, extract::FromRequest};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa::OpenApi as _;

pub use body::{
    AuditRecord, AuditResponse, EntryPage, EntryView, LimitChangeBody, LimitChangeView, MarkerBody,
    OverrideBody, StoredEntry,
};

use super::caller::Caller;
use super::endpoint::Endpoint;
use super::error::{JsonBody, parse_json};
use super::{ApiError, AppState};
use crate::domain::auth::Scope;
use crate::domain::tenants::{Entry, Kind};
use crate::tenants::now_ms;

/// The most entries or audit records one answer lists.
pub const MAX_PAGE: usize = 1_000;

/// This module's endpoints (`http::routes`).
pub(super) const ENDPOINTS: &[Endpoint] = &[
    Endpoint::at(
        "/v1/overrides/{policy}/{key}",
        Scope::Admin,
        |_| {
            get(doc::get_override)
                .put(doc::put_override)
                .delete(doc::delete_override)
        },
        doc::OverridesDoc::openapi,
    ),
    Endpoint::at(
        "/v1/overrides/{policy}",
        Scope::Admin,
        |_| get(doc::list_overrides),
        doc::OverridesListDoc::openapi,
    ),
    Endpoint::at(
        "/v1/blocks/{key}",
        Scope::Admin,
        |_| {
            get(doc::get_block)
                .put(doc::put_block)
                .delete(doc::delete_block)
        },
        doc::BlocksDoc::openapi,
    ),
    Endpoint::at(
        "/v1/blocks",
        Scope::Admin,
        |_| get(doc::list_blocks),
        doc::BlocksListDoc::openapi,
    ),
    Endpoint::at(
        "/v1/exemptions/{key}",
        Scope::Admin,
        |_| {
            get(doc::get_exemption)
                .put(doc::put_exemption)
                .delete(doc::delete_exemption)
        },
        doc::ExemptionsDoc::openapi,
    ),
    Endpoint::at(
        "/v1/exemptions",
        Scope::Admin,
        |_| get(doc::list_exemptions),
        doc::ExemptionsListDoc::openapi,
    ),
    Endpoint::at(
        "/v1/audit",
        Scope::Admin,
        |_| get(doc::audit),
        doc::AuditDoc::openapi,
    ),
];

/// `?limit=&after=` of a listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Entries per page: 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000, example = 100)]
    pub limit: Option<usize>,
    /// The `next` of the previous page: the listing goes on after this key.
    pub after: Option<String>,
}

/// `?limit=` of the audit trail.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Records, newest first: 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000, example = 100)]
    pub limit: Option<usize>,
}

/// Where an entry is: its kind, and its policy and key from the path.
struct At {
    kind: Kind,
    policy: Option<String>,
    key: String,
}

fn path_error(e: PathRejection) -> ApiError {
    if not_utf8(&e) {
        return ApiError::InvalidRequest("path: must be UTF-8 once percent-decoded".into());
    }
    ApiError::InvalidRequest(format!("path: {}", e.body_text()))
}

/// Whether the path had a segment that is not UTF-8 once percent-decoded.
fn not_utf8(e: &PathRejection) -> bool {
    use axum::extract::path::ErrorKind;
    matches!(e, PathRejection::FailedToDeserializePathParams(e)
        if matches!(e.kind(), ErrorKind::InvalidUtf8InPathParam { .. }))
}

fn query_error(e: QueryRejection) -> ApiError {
    let text = e.body_text();
    let field = text.strip_prefix("Failed to deserialize query string: ");
    ApiError::InvalidRequest(field.unwrap_or(&text).to_string())
}

fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit: must be between 1 and {MAX_PAGE}, got {limit}"
        )));
    }
    Ok(limit)
}

/// `GET` of one entry.
async fn read(state: &AppState, at: At) -> Result<Json<EntryView>, ApiError> {
    let entry = state
        .tenants
        .get(at.kind, at.policy.as_deref(), &at.key)
        .await
        .ok_or_else(|| not_set(&at))?;
    Ok(Json(EntryView::of(&entry, now_ms())))
}

fn not_set(at: &At) -> ApiError {
    let kind = at.kind.as_str();
    ApiError::NoEntry(match &at.policy {
        Some(policy) if at.kind == Kind::Override => {
            format!("no {kind} of policy {policy:?} is set for this key")
        }
        _ => format!("no {kind} is set for this key"),
    })
}

/// `PUT` of one entry: 201 when new, 200 when it replaced one.
async fn write(
    state: &AppState,
    at: At,
    caller: Option<&Caller>,
    request: Request,
) -> Result<Response, ApiError> {
    let json = JsonBody::from_request(request, state).await?;
    let now = now_ms();
    let entry = json.parse_with(|bytes| {
        let mut entry = match at.kind {
            Kind::Override => parse_json::<OverrideBody>(bytes)?.entry(now)?,
            Kind::Block | Kind::Exemption => {
                parse_json::<MarkerBody>(bytes)?.entry(at.kind, now)?
            }
        };
        if at.kind == Kind::Override {
            entry.policy = at.policy.clone();
        }
        entry.key = at.key.clone();
        entry.set_by = Caller::name(caller);
        Ok::<Entry, ApiError>(entry)
    })?;
    let changed = state.tenants.put(entry).await?;
    let status = match changed.before {
        Some(_) => StatusCode::OK,
        None => StatusCode::CREATED,
    };
    let after = changed.after.as_ref().map(|e| EntryView::of(e, now));
    Ok((status, Json(after)).into_response())
}

/// `DELETE` of one entry: 204, or 404 when none was set.
async fn remove(state: &AppState, at: At, caller: Option<&Caller>) -> Result<Response, ApiError> {
    let token = Caller::name(caller);
    let deleted = state
        .tenants
        .delete(at.kind, at.policy.as_deref(), &at.key, &token)
        .await;
    match deleted {
        Ok(_) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(crate::tenants::TenantsError::NotFound(_)) => Err(not_set(&at)),
        Err(e) => Err(e.into()),
    }
}

/// A listing's page.
async fn list(
    state: &AppState,
    kind: Kind,
    policy: Option<&str>,
    query: PageQuery,
) -> Result<Json<EntryPage>, ApiError> {
    let limit = page_limit(query.limit)?;
    if let Some(policy) = policy
        && state.policies.load().get(policy).is_none()
    {
        let set = state.policies.load();
        return Err(ApiError::UnknownPolicy(super::check::unknown_policy(
            &set, policy,
        )));
    }
    let page = state
        .tenants
        .list(kind, policy, query.after.as_deref(), limit)
        .await;
    let now = now_ms();
    Ok(Json(EntryPage {
        entries: page.entries.iter().map(|e| EntryView::of(e, now)).collect(),
        next: page.next,
    }))
}

/// The audit trail, newest first.
async fn audit_trail(state: &AppState, query: AuditQuery) -> Result<Json<AuditResponse>, ApiError> {
    let limit = page_limit(query.limit)?;
    let records = state.tenants.audit(limit).await?;
    let entries = records
        .into_iter()
        .filter_map(|r| serde_json::from_value(r).ok())
        .collect();
    Ok(Json(AuditResponse { entries }))
}

/// What every handler extracts besides its path.
type Who = Option<Extension<Caller>>;
type PathOf<T> = Result<Path<T>, PathRejection>;

/// A refused or failed runtime change as an answer.
impl From<crate::tenants::TenantsError> for ApiError {
    fn from(e: crate::tenants::TenantsError) -> ApiError {
        use crate::tenants::TenantsError as E;
        match e {
            E::Invalid(e) => ApiError::from(e),
            E::Full(message) => ApiError::CapReached(message),
            E::NotFound(kind) => ApiError::NoEntry(format!("no {kind} is set there")),
            e => {
                // The detail (a Redis reply, a path) goes to the log only;
                // the answer says which kind of failure it was.
                tracing::error!(error = %e, "a runtime change was not recorded");
                use crate::store::StoreError as S;
                let why = match &e {
                    E::Store(S::Timeout(_)) => "the store did not answer in time",
                    E::Store(S::Unavailable(_) | S::Overloaded(_)) => {
                        "the store is unreachable or busy"
                    }
                    E::Store(_) => "the store refused it",
                    _ => "the tenants file could not be written",
                };
                ApiError::NotRecorded(format!("{why}: nothing changed, retry it"))
            }
        }
    }
}
