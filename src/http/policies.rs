//! `GET /v1/policies`: the policies in force, with the file's SHA-256 and
//! load time, so an operator (or a deploy pipeline) can see which version
//! of the file every instance runs. The body is `policies_json`'s.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
pub use super::policies_json::{PoliciesResponse, PolicyLimitView, PolicyView};

/// The loaded policies.
#[utoipa::path(get, path = "/v1/policies", tag = "limits",
    responses((status = 200, description = "The policies in force", body = PoliciesResponse)))]
pub async fn policies(State(state): State<AppState>) -> Response {
    let body = state.policies_json.body(&state.policies.load_full());
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
