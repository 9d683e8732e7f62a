//! The HTTP transport: routes, request/response types, and the mapping of
//! every error to a JSON body. Nothing below this module knows about HTTP.

mod auth;
mod auth_error;
mod auth_levels;
pub mod bearer;
mod body_limit;
mod caller;
mod check;
mod endpoint;
mod error;
mod not_marker;
pub mod openapi;
mod ops;
mod policies;
mod policies_json;
mod rate_headers;
mod routes;
pub mod server;
mod state;
mod tenants;
mod top;
mod trace;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::middleware::{from_fn_with_state, map_response};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa_swagger_ui::SwaggerUi;

pub use body_limit::{BATCH_BYTES_PER_CHECK, MAX_BODY_BYTES, batch_body_limit};
pub use error::{ApiError, ErrorBody};
pub use state::{AppState, Shared};

pub fn router(state: AppState) -> Router {
    // The Swagger UI answers an unknown file under /docs (and /docs/../x)
    // with an empty 404; only its routes need the rewrite, the others
    // answer with ApiError already.
    let docs: Router<AppState> = SwaggerUi::new("/docs")
        .external_url_unchecked("/openapi.json", openapi::json())
        .into();
    let docs = docs.layer(map_response(json_error_bodies));
    let mut router = Router::new();
    for endpoint in routes::endpoints() {
        router = router.route(endpoint.path, (endpoint.handler)(&state));
    }
    trace::know_routes(routes::endpoints().map(|endpoint| endpoint.path));
    router
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .merge(docs)
        // axum answers these with empty or plain-text bodies; ours are JSON.
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .fallback(|| async { ApiError::NotFound })
        // After every route and the fallbacks, so it runs before any of them.
        .layer(from_fn_with_state(state.bearer.clone(), bearer::require))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Error responses made below our handlers (the Swagger UI's 404 for an
/// unknown file under /docs) have empty bodies; give them ours, keeping
/// their status and headers.
async fn json_error_bodies(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let replacement = match status {
        axum::http::StatusCode::NOT_FOUND => ApiError::NotFound.into_response(),
        _ => error::status_only(status),
    };
    let (new_parts, body) = replacement.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(new_parts.headers);
    Response::from_parts(parts, body)
}
