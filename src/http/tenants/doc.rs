//! The handlers of `http::tenants` as the OpenAPI document lists them:
//! one thin function per path and method, each calling the shared code in
//! `mod.rs` with its kind.

use axum::Json;
use axum::extract::{Query, Request, State};
use axum::response::Response;
use utoipa::OpenApi;

use super::{
    At, AuditQuery, AuditRecord, AuditResponse, EntryPage, EntryView, LimitChangeBody,
    LimitChangeView, MarkerBody, OverrideBody, PageQuery, PathOf, StoredEntry, Who, audit_trail,
    list, not_utf8, path_error, query_error, read, remove, write,
};
use crate::domain::tenants::Kind;
use crate::http::error::ErrorBody;
use crate::http::{ApiError, AppState};

type QueryOf<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

/// Where a read or a delete looks. A path that is not UTF-8 once
/// percent-decoded names no entry (a PUT of it is refused, and every key a
/// check names is UTF-8), so looking one up finds none: a 404 as for any
/// unset key, with why.
fn lookup_at(kind: Kind, path: PathOf<String>) -> Result<At, ApiError> {
    match path {
        Err(e) if not_utf8(&e) => Err(no_such_key(kind)),
        path => key_at(kind, path),
    }
}

fn override_lookup_at(path: PathOf<(String, String)>) -> Result<At, ApiError> {
    match path {
        Err(e) if not_utf8(&e) => Err(no_such_key(Kind::Override)),
        path => override_at(path),
    }
}

fn no_such_key(kind: Kind) -> ApiError {
    ApiError::NoEntry(format!(
        "no {} is set there: the path is not UTF-8 once percent-decoded, so none can be",
        kind.as_str()
    ))
}

fn override_at(path: PathOf<(String, String)>) -> Result<At, ApiError> {
    let axum::extract::Path((policy, key)) = path.map_err(path_error)?;
    Ok(At {
        kind: Kind::Override,
        policy: Some(policy),
        key,
    })
}

fn key_at(kind: Kind, path: PathOf<String>) -> Result<At, ApiError> {
    let axum::extract::Path(key) = path.map_err(path_error)?;
    Ok(At {
        kind,
        policy: None,
        key,
    })
}

#[derive(OpenApi)]
#[openapi(
    paths(get_override, put_override, delete_override),
    components(schemas(OverrideBody, LimitChangeBody, EntryView, LimitChangeView))
)]
pub(super) struct OverridesDoc;

#[derive(OpenApi)]
#[openapi(paths(list_overrides), components(schemas(EntryPage)))]
pub(super) struct OverridesListDoc;

#[derive(OpenApi)]
#[openapi(
    paths(get_block, put_block, delete_block),
    components(schemas(MarkerBody, EntryView))
)]
pub(super) struct BlocksDoc;

#[derive(OpenApi)]
#[openapi(paths(list_blocks), components(schemas(EntryPage)))]
pub(super) struct BlocksListDoc;

#[derive(OpenApi)]
#[openapi(
    paths(get_exemption, put_exemption, delete_exemption),
    components(schemas(MarkerBody, EntryView))
)]
pub(super) struct ExemptionsDoc;

#[derive(OpenApi)]
#[openapi(paths(list_exemptions), components(schemas(EntryPage)))]
pub(super) struct ExemptionsListDoc;

#[derive(OpenApi)]
#[openapi(
    paths(audit),
    components(schemas(AuditResponse, AuditRecord, StoredEntry, LimitChangeView))
)]
pub(super) struct AuditDoc;

/// A key's runtime override of a policy's limits.
#[utoipa::path(get, path = "/v1/overrides/{policy}/{key}", tag = "tenants", params(("policy" = String, Path, description = "A policy of the policies file", pattern = "^[a-z0-9_.-]{1,64}$"),
        ("key" = String, Path, description = "The client key, percent-encoded")),
    responses((status = 200, description = "The entry", body = EntryView),
        (status = 404, description = "None is set (code not_found)", body = ErrorBody)))]
pub(super) async fn get_override(
    State(state): State<AppState>,
    path: PathOf<(String, String)>,
) -> Result<Json<EntryView>, ApiError> {
    read(&state, override_lookup_at(path)?).await
}

/// Sets a key's override of a policy's limits (replacing any).
#[utoipa::path(put, path = "/v1/overrides/{policy}/{key}", tag = "tenants", params(("policy" = String, Path, description = "A policy of the policies file", pattern = "^[a-z0-9_.-]{1,64}$"),
        ("key" = String, Path, description = "The client key, percent-encoded")),
    request_body(content = OverrideBody, content_type = "application/json"),
    responses((status = 201, description = "Set (none was)", body = EntryView),
        (status = 200, description = "Set, replacing the one there was", body = EntryView),
        (status = 409, description = "A cap is reached (code cap_reached)", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 422, description = "A field is wrong: an unknown limit or policy, a bad number, ttl or reason", body = ErrorBody),
        (status = 503, description = "The store could not record it; nothing changed", body = ErrorBody)))]
pub(super) async fn put_override(
    State(state): State<AppState>,
    who: Who,
    path: PathOf<(String, String)>,
    request: Request,
) -> Result<Response, ApiError> {
    write(
        &state,
        override_at(path)?,
        who.as_ref().map(|w| &w.0),
        request,
    )
    .await
}

/// Deletes a key's override: the file's or the policy's limits apply again.
#[utoipa::path(delete, path = "/v1/overrides/{policy}/{key}", tag = "tenants", params(("policy" = String, Path, description = "A policy of the policies file", pattern = "^[a-z0-9_.-]{1,64}$"),
        ("key" = String, Path, description = "The client key, percent-encoded")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "None was set (code not_found)", body = ErrorBody),
        (status = 503, description = "The store could not record it; nothing changed", body = ErrorBody)))]
pub(super) async fn delete_override(
    State(state): State<AppState>,
    who: Who,
    path: PathOf<(String, String)>,
) -> Result<Response, ApiError> {
    remove(
        &state,
        override_lookup_at(path)?,
        who.as_ref().map(|w| &w.0),
    )
    .await
}

/// The runtime overrides of a policy, a page at a time.
#[utoipa::path(get, path = "/v1/overrides/{policy}", tag = "tenants",
    params(("policy" = String, Path, description = "A policy of the policies file", pattern = "^[a-z0-9_.-]{1,64}$"), PageQuery),
    responses((status = 200, description = "A page, in key order", body = EntryPage),
        (status = 422, description = "A bad parameter, or an unknown policy", body = ErrorBody)))]
pub(super) async fn list_overrides(
    State(state): State<AppState>,
    path: PathOf<String>,
    query: QueryOf<PageQuery>,
) -> Result<Json<EntryPage>, ApiError> {
    let axum::extract::Path(policy) = path.map_err(path_error)?;
    let Query(query) = query.map_err(query_error)?;
    list(&state, Kind::Override, Some(&policy), query).await
}

/// A key's block.
#[utoipa::path(get, path = "/v1/blocks/{key}", tag = "tenants", params(("key" = String, Path, description = "The client key, percent-encoded")),
    responses((status = 200, description = "The entry", body = EntryView),
        (status = 404, description = "None is set (code not_found)", body = ErrorBody)))]
pub(super) async fn get_block(
    State(state): State<AppState>,
    path: PathOf<String>,
) -> Result<Json<EntryView>, ApiError> {
    read(&state, lookup_at(Kind::Block, path)?).await
}

/// Blocks a key: every check of it is denied at once, nothing counted.
#[utoipa::path(put, path = "/v1/blocks/{key}", tag = "tenants", params(("key" = String, Path, description = "The client key, percent-encoded")),
    request_body(content = MarkerBody, content_type = "application/json"),
    responses((status = 201, description = "Set (none was)", body = EntryView),
        (status = 200, description = "Set, replacing the one there was", body = EntryView),
        (status = 409, description = "A cap is reached (code cap_reached)", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 422, description = "A field is wrong: an unknown limit or policy, a bad number, ttl or reason", body = ErrorBody),
        (status = 503, description = "The store could not record it; nothing changed", body = ErrorBody)))]
pub(super) async fn put_block(
    State(state): State<AppState>,
    who: Who,
    path: PathOf<String>,
    request: Request,
) -> Result<Response, ApiError> {
    write(
        &state,
        key_at(Kind::Block, path)?,
        who.as_ref().map(|w| &w.0),
        request,
    )
    .await
}

/// Deletes a key's block.
#[utoipa::path(delete, path = "/v1/blocks/{key}", tag = "tenants", params(("key" = String, Path, description = "The client key, percent-encoded")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "None was set (code not_found)", body = ErrorBody),
        (status = 503, description = "The store could not record it; nothing changed", body = ErrorBody)))]
pub(super) async fn delete_block(
    State(state): State<AppState>,
    who: Who,
    path: PathOf<String>,
) -> Result<Response, ApiError> {
    remove(
        &state,
        lookup_at(Kind::Block, path)?,
        who.as_ref().map(|w| &w.0),
    )
    .await
}

/// The blocks, a page at a time.
#[utoipa::path(get, path = "/v1/blocks", tag = "tenants", params(PageQuery),
    responses((status = 200, description = "A page, in key order", body = EntryPage),
        (status = 422, description = "A bad parameter, or an unknown policy", body = ErrorBody)))]
pub(super) async fn list_blocks(
    State(state): State<AppState>,
    query: QueryOf<PageQuery>,
) -> Result<Json<EntryPage>, ApiError> {
    let Query(query) = query.map_err(query_error)?;
    list(&state, Kind::Block, None, query).await
}

/// A key's exemption.
#[utoipa::path(get, path = "/v1/exemptions/{key}", tag = "tenants", params(("key" = String, Path, description = "The client key, percent-encoded")),
    responses((status = 200, description = "The entry", body = EntryView),
        (status = 404, description = "None is set (code not_found)", body = ErrorBody)))]
pub(super) async fn get_exemption(
    State(state): State<AppState>,
    path: PathOf<String>,
) -> Result<Json<EntryView>, ApiError> {
    read(&state, lookup_at(Kind::Exemption, path)?).await
}

/// Exempts a key: every check of it is allowed, and still counted.
#[utoipa::path(put, path = "/v1/exemptions/{key}", tag = "tenants", params(("key" = String, Path, description = "The client key, percent-encoded")),
    request_body(content = MarkerBody, content_type = "application/json"),
    responses((status = 201, description = "Set (none was)", body = EntryView),
        (status = 200, description = "Set, replacing the one there was", body = EntryView),
        (status = 409, description = "A cap is reached (code cap_reached)", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 422, description = "A field is wrong: an unknown limit or policy, a bad number, ttl or reason", body = ErrorBody),
        (status = 503, description = "The store could not record it; nothing changed", body = ErrorBody)))]
pub(super) async fn put_exemption(
    State(state): State<AppState>,
    who: Who,
    path: PathOf<String>,
    request: Request,
) -> Result<Response, ApiError> {
    write(
        &state,
        key_at(Kind::Exemption, path)?,
        who.as_ref().map(|w| &w.0),
        request,
    )
    .await
}

/// Deletes a key's exemption.
#[utoipa::path(delete, path = "/v1/exemptions/{key}", tag = "tenants", params(("key" = String, Path, description = "The client key, percent-encoded")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "None was set (code not_found)", body = ErrorBody),
        (status = 503, description = "The store could not record it; nothing changed", body = ErrorBody)))]
pub(super) async fn delete_exemption(
    State(state): State<AppState>,
    who: Who,
    path: PathOf<String>,
) -> Result<Response, ApiError> {
    remove(
        &state,
        lookup_at(Kind::Exemption, path)?,
        who.as_ref().map(|w| &w.0),
    )
    .await
}

/// The exemptions, a page at a time.
#[utoipa::path(get, path = "/v1/exemptions", tag = "tenants", params(PageQuery),
    responses((status = 200, description = "A page, in key order", body = EntryPage),
        (status = 422, description = "A bad parameter, or an unknown policy", body = ErrorBody)))]
pub(super) async fn list_exemptions(
    State(state): State<AppState>,
    query: QueryOf<PageQuery>,
) -> Result<Json<EntryPage>, ApiError> {
    let Query(query) = query.map_err(query_error)?;
    list(&state, Kind::Exemption, None, query).await
}

/// The last changes to overrides, blocks and exemptions, newest first.
#[utoipa::path(get, path = "/v1/audit", tag = "tenants", params(AuditQuery),
    responses((status = 200, description = "The audit trail", body = AuditResponse),
        (status = 422, description = "A bad parameter", body = ErrorBody),
        (status = 503, description = "The store could not be read", body = ErrorBody)))]
pub(super) async fn audit(
    State(state): State<AppState>,
    query: QueryOf<AuditQuery>,
) -> Result<Json<AuditResponse>, ApiError> {
    let Query(query) = query.map_err(query_error)?;
    audit_trail(&state, query).await
}
