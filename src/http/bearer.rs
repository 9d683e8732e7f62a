//! Bearer-token authentication (`auth.tokens_file`), in front of every
//! route: which scope a path needs, and the middleware that checks the
//! `Authorization: Bearer` header against the tokens in force.
//!
//! The scope is chosen from the request's path, before routing, so that a
//! path no route matches under `/v1` is refused like any other (admin by
//! default), and each route's scope is a field of its line in
//! `http::routes`, which a route cannot be added without. A request that passes goes on without its `Authorization`
//! header, so no handler can put the token in a key, a log line or a body.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
// Its own file: the tenants' handlers read it, and this file imports
// the route table, which imports them.
pub use super::caller::Caller;
// Kept with the state, which holds it, so that the state does not import
// the middleware (and through its route table, every handler).
pub use super::state::Bearer;
use crate::domain::auth::{Presented, Scope, presented};
use crate::metrics::AuthFailure;

/// What every other path under `/v1` needs.
const V1_DEFAULT: Scope = Scope::Admin;

/// The scope `path` needs, or `None` when it is open to anyone:
/// `/healthz`, `/readyz`, `/docs`, `/openapi.json`, and `/metrics` unless
/// `protect_metrics` (then any token: a scraper can hold a `check` one).
pub fn required_scope(path: &str, protect_metrics: bool) -> Option<Scope> {
    if path == "/metrics" {
        return protect_metrics.then_some(Scope::Check);
    }
    if path != "/v1" && !path.starts_with("/v1/") {
        return None;
    }
    let matched = super::routes::endpoints().find(|endpoint| endpoint.covers(path));
    Some(matched.map_or(V1_DEFAULT, |endpoint| endpoint.scope))
}

/// Lets the request through when its token covers the path's scope, or
/// answers 400 (a malformed `Authorization` header), 401 (no token, or
/// not one of ours) or 403 (too narrow a scope).
pub async fn require(State(bearer): State<Bearer>, mut request: Request, next: Next) -> Response {
    let Some(tokens) = &bearer.tokens else {
        return next.run(request).await;
    };
    let Some(required) = required_scope(request.uri().path(), bearer.protect_metrics) else {
        return next.run(request).await;
    };
    let values = request.headers().get_all(header::AUTHORIZATION).iter();
    let authorized = tokens
        .load()
        .authorize(values.map(|v| v.as_bytes()), required);
    if let Err(refusal) = authorized {
        bearer
            .metrics
            .auth
            .record_failure(AuthFailure::from(&refusal));
        return ApiError::from(refusal).into_response();
    }
    if required == Scope::Admin {
        // Who makes a change, for the audit trail: the token's name.
        let values = request.headers().get_all(header::AUTHORIZATION).iter();
        let name = match presented(values.map(|v| v.as_bytes())) {
            Presented::Token(token) => tokens.load().name_of(token),
            _ => None,
        };
        request.extensions_mut().insert(Caller::Token(name));
    }
    request.headers_mut().remove(header::AUTHORIZATION);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_by_path() {
        let open = |p| required_scope(p, false);
        assert_eq!(open("/v1/check"), Some(Scope::Check));
        assert_eq!(open("/v1/checks"), Some(Scope::Check));
        assert_eq!(open("/v1/auth/api"), Some(Scope::Check));
        assert_eq!(open("/v1/auth/api/orders/1"), Some(Scope::Check));
        assert_eq!(open("/v1/reset"), Some(Scope::Admin));
        assert_eq!(open("/v1/refund"), Some(Scope::Admin));
        assert_eq!(open("/v1/settle"), Some(Scope::Check));
        assert_eq!(open("/v1/release"), Some(Scope::Check));
        assert_eq!(open("/v1/renew"), Some(Scope::Check));
        assert_eq!(open("/v1/policies"), Some(Scope::Admin));
        // Unknown /v1 paths, near misses included, need a token too.
        for path in [
            "/v1",
            "/v1/",
            "/v1/nope",
            "/v1/check/",
            "/v1//check",
            "/v1/auth",
        ] {
            assert_eq!(open(path), Some(Scope::Admin), "{path}");
        }
        for path in [
            "/healthz",
            "/readyz",
            "/metrics",
            "/docs/",
            "/openapi.json",
            "/",
            "/v10",
        ] {
            assert_eq!(open(path), None, "{path}");
        }
        assert_eq!(required_scope("/metrics", true), Some(Scope::Check));
    }
}
