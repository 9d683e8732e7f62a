//! Operational endpoints: liveness, readiness, metrics.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use crate::limiter::NotReady;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, `ready` or `not_ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// `memory` or `redis`.
    #[schema(example = "redis")]
    pub store: &'static str,
    /// Present when not ready: why the store was last seen failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<NotReady>,
}

/// Liveness: 200 while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process is serving", body = Health)))]
pub async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok",
        store: state.limiter.store_name(),
        reason: None,
    })
}

/// Readiness: 200 while the store answers checks, 503 with a `reason` while
/// the failure policy answers them.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "The store answers", body = Health),
        (status = 503, description = "The store is unreachable; checks get the failure policy", body = Health),
    ))]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let store = state.limiter.store_name();
    match state.limiter.readiness() {
        Ok(()) => (
            StatusCode::OK,
            Json(Health {
                status: "ready",
                store,
                reason: None,
            }),
        ),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "not_ready",
                store,
                reason: Some(reason),
            }),
        ),
    }
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain; version=0.0.4")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let stats = state.limiter.store_stats();
    if let Some(keys) = stats.key_count {
        state.metrics.store.keys.set(keys as i64);
    }
    if let Some(leases) = stats.lease_count {
        state.metrics.store.leases.set(leases as i64);
    }
    if let Some(held) = stats.reservation_count {
        state.metrics.store.reservations.set(held as i64);
    }
    if let Some(total) = stats.evictions {
        state.metrics.store.evictions.sync(total);
    }
    if let Some(total) = stats.connections_replaced {
        state.metrics.redis.connections_replaced.sync(total);
    }
    if let Some(total) = stats.check_calls {
        state.metrics.redis.check_calls.sync(total);
    }
    state.metrics.store.up.set(state.limiter.is_ready() as i64);
    if let Some(top) = state.limiter.top() {
        state.metrics.top.memory.set(top.bytes() as i64);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
