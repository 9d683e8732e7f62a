//! Every `/v1` endpoint once: its path, the handler that answers it, the
//! bearer scope it needs and its part of the OpenAPI document. The router
//! (`http::router`), the bearer middleware (`http::bearer`) and the
//! document (`http::openapi`) are all read off this one table, so an
//! endpoint is one line beside its handler: it cannot be served without a
//! scope, nor documented at a path it is not served at.

use axum::routing::MethodRouter;
use utoipa::openapi::OpenApi;

use super::AppState;
use crate::domain::auth::Scope;

/// One endpoint under `/v1`.
pub(super) struct Endpoint {
    /// The route's path, as axum writes it.
    pub path: &'static str,
    /// The paths the bearer middleware gives this endpoint's scope: this
    /// one exactly, or (forward-auth, whose rest is the caller's) every
    /// path under a prefix.
    pub under: Option<&'static str>,
    pub scope: Scope,
    /// Its method router; the state is there for a route's own layers (a
    /// batch's body cap).
    pub handler: fn(&AppState) -> MethodRouter<AppState>,
    /// Its operations and their schemas; `None` for forward-auth, which a
    /// proxy calls with any method on any path.
    pub doc: Option<fn() -> OpenApi>,
}

impl Endpoint {
    /// An endpoint answering exactly `path`.
    pub(super) const fn at(
        path: &'static str,
        scope: Scope,
        handler: fn(&AppState) -> MethodRouter<AppState>,
        doc: fn() -> OpenApi,
    ) -> Endpoint {
        Endpoint {
            path,
            under: None,
            scope,
            handler,
            doc: Some(doc),
        }
    }

    /// Whether a request for `path` is this endpoint's, for its scope.
    pub(super) fn covers(&self, path: &str) -> bool {
        match self.under {
            Some(prefix) => path.starts_with(prefix),
            None => path == self.path,
        }
    }
}

/// Every `/v1` endpoint: the checks and their adjustments, then the rest.
pub(super) fn endpoints() -> impl Iterator<Item = &'static Endpoint> {
    super::check::ENDPOINTS
        .iter()
        .chain(super::auth::ENDPOINTS)
        .chain([&super::policies::ENDPOINT, &super::top::ENDPOINT])
}

#[cfg(test)]
mod tests {
    use super::endpoints;

    /// axum panics on a path routed twice; the bearer table would give the
    /// second line's scope to nobody.
    #[test]
    fn no_path_is_listed_twice() {
        let mut paths: Vec<&str> = endpoints().map(|e| e.path).collect();
        let listed = paths.len();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), listed, "{paths:?}");
    }

    #[test]
    fn every_endpoint_is_under_v1() {
        for endpoint in endpoints() {
            assert!(endpoint.path.starts_with("/v1/"), "{}", endpoint.path);
            assert!(endpoint.covers(endpoint.path), "{}", endpoint.path);
        }
    }
}
