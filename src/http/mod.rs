//! The HTTP transport: routes, request/response types, and the mapping of
//! every error to a JSON body. Nothing below this module knows about HTTP.

mod auth;
pub mod bearer;
mod check;
mod error;
pub mod openapi;
mod ops;
mod policies;
pub mod server;
mod top;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::middleware::{from_fn_with_state, map_response};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use utoipa_swagger_ui::SwaggerUi;

pub use error::{ApiError, ErrorBody};

use arc_swap::ArcSwap;

use crate::domain::forward::IpNet;
use crate::domain::{Bounds, PolicySet};
use crate::limiter::Limiter;
use crate::metrics::Metrics;

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Room per check in a batch's body: a check at its largest in practice
/// (a 512-byte key, eight inline limits) is about 1 KiB.
pub const BATCH_BYTES_PER_CHECK: usize = 4 * 1024;

/// The body cap of `POST /v1/checks` for batches of up to `max_batch`
/// checks: [`BATCH_BYTES_PER_CHECK`] each, and never less than one check's
/// cap (400 KiB at the default 100). Bounded like the rest: a buffered body
/// is memory held per connection.
pub fn batch_body_limit(max_batch: usize) -> usize {
    max_batch
        .saturating_mul(BATCH_BYTES_PER_CHECK)
        .max(MAX_BODY_BYTES)
}

#[derive(Clone)]
pub struct AppState {
    pub limiter: Arc<Limiter>,
    pub metrics: Arc<Metrics>,
    pub bounds: Bounds,
    /// Most checks in one batch (`limits.max_batch`).
    pub max_batch: usize,
    /// The policies in force; a reload swaps the whole set. A request loads
    /// it once, so it finishes under the set it started with.
    pub policies: Arc<ArcSwap<PolicySet>>,
    /// `GET /v1/policies`'s body, rendered once per set in force.
    pub(crate) policies_json: Arc<policies::PoliciesJson>,
    /// `server.trusted_proxies`: whose forwarding headers `/v1/auth` believes.
    pub trusted_proxies: Arc<[IpNet]>,
    /// Bearer-token authentication in front of every route.
    pub bearer: bearer::Bearer,
}

pub fn router(state: AppState) -> Router {
    // The Swagger UI answers an unknown file under /docs (and /docs/../x)
    // with an empty 404; only its routes need the rewrite, the others
    // answer with ApiError already.
    let docs: Router<AppState> = SwaggerUi::new("/docs")
        .external_url_unchecked("/openapi.json", openapi::json())
        .into();
    let docs = docs.layer(map_response(json_error_bodies));
    // Its own cap, inside the router-wide one, so it wins for this route.
    let batch_limit = DefaultBodyLimit::max(batch_body_limit(state.max_batch));
    Router::new()
        .route("/v1/check", post(check::check))
        .route("/v1/checks", post(check::checks).layer(batch_limit))
        .route("/v1/reset", post(check::reset))
        .route("/v1/refund", post(check::refund))
        .route("/v1/settle", post(check::settle))
        .route("/v1/release", post(check::release))
        .route("/v1/renew", post(check::renew))
        .route("/v1/auth/{policy}", any(auth::auth))
        .route("/v1/auth/{policy}/", any(auth::auth))
        .route("/v1/auth/{policy}/{*rest}", any(auth::auth))
        .route("/v1/policies", get(policies::policies))
        .route("/v1/top", get(top::top))
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
