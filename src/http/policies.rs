//! `GET /v1/policies`: the policies in force, with the file's SHA-256 and
//! load time, so an operator (or a deploy pipeline) can see which version
//! of the file every instance runs. The body is `policies_json`'s.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa::OpenApi;

use super::AppState;
use super::endpoint::Endpoint;
pub use super::policies_json::{
    HierarchyLevelView, HierarchyView, PoliciesResponse, PolicyLimitView, PolicyView,
};
use crate::domain::auth::Scope;

pub(super) const ENDPOINT: Endpoint = Endpoint::at(
    "/v1/policies",
    Scope::Admin,
    |_| get(policies),
    PoliciesDoc::openapi,
);

#[derive(OpenApi)]
#[openapi(
    paths(policies),
    components(schemas(
        PoliciesResponse,
        PolicyView,
        PolicyLimitView,
        HierarchyView,
        HierarchyLevelView
    ))
)]
struct PoliciesDoc;

/// The loaded policies.
#[utoipa::path(get, path = "/v1/policies", tag = "limits",
    responses((status = 200, description = "The policies in force", body = PoliciesResponse)))]
pub async fn policies(State(state): State<AppState>) -> Response {
    let version = state.tenants.view().version;
    let body = state
        .policies_json
        .body(&state.policies.load_full(), version);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
