//! Operational endpoints: liveness, readiness, metrics.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, `ready` or `not_ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// `memory` or `redis`.
    #[schema(example = "redis")]
    pub store: &'static str,
}

/// Liveness: 200 while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process is serving", body = Health)))]
pub async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok",
        store: state.limiter.store_name(),
    })
}

/// Readiness: 200 while the store answers checks, 503 while the failure
/// policy answers them.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "The store answers", body = Health),
        (status = 503, description = "The store is unreachable; checks get the failure policy", body = Health),
    ))]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let store = state.limiter.store_name();
    if state.limiter.is_ready() {
        (
            StatusCode::OK,
            Json(Health {
                status: "ready",
                store,
            }),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "not_ready",
                store,
            }),
        )
    }
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain; version=0.0.4")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    if let Some(keys) = state.limiter.store_key_count() {
        state.metrics.store_keys.set(keys as i64);
    }
    if let Some(total) = state.limiter.store_evictions() {
        // A counter only goes up: add what the store counted since last read.
        let counter = &state.metrics.store_evictions;
        counter.inc_by(total.saturating_sub(counter.get()));
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
