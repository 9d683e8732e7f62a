//! One endpoint of the route table (`http::routes`): what each handler's
//! module declares of itself. Apart from the table, which imports every
//! handler, so that handlers import this without importing each other.

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
