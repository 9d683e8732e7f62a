//! What every handler shares (`AppState`). Apart from
//! the router (`mod.rs`), which imports the handlers, so that handlers
//! import the state without importing the router.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::policies_json::PoliciesJson;
use crate::domain::auth::TokenSet;
use crate::domain::forward::IpNet;
use crate::domain::{Bounds, PolicySet};
use crate::limiter::Limiter;
use crate::metrics::Metrics;

/// What the bearer middleware (`http::bearer`) needs: the tokens in force
/// (`None`: no `auth.tokens_file`, everything open as before).
#[derive(Clone)]
pub struct Bearer {
    pub tokens: Option<Arc<ArcSwap<TokenSet>>>,
    pub protect_metrics: bool,
    pub metrics: Arc<Metrics>,
}

/// Cloned for every request (each extractor and middleware takes its
/// own), so one reference count rather than one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    pub limiter: Arc<Limiter>,
    /// Runtime overrides, blocks and exemptions.
    pub tenants: Arc<crate::tenants::Tenants>,
    pub metrics: Arc<Metrics>,
    pub bounds: Bounds,
    /// Most checks in one batch (`limits.max_batch`).
    pub max_batch: usize,
    /// The policies in force; a reload swaps the whole set. A request loads
    /// it once, so it finishes under the set it started with.
    pub policies: Arc<ArcSwap<PolicySet>>,
    /// `GET /v1/policies`'s body, rendered once per set in force.
    pub(crate) policies_json: Arc<PoliciesJson>,
    /// `server.trusted_proxies`: whose forwarding headers `/v1/auth` believes.
    pub trusted_proxies: Arc<[IpNet]>,
    /// Bearer-token authentication in front of every route.
    pub bearer: Bearer,
}
