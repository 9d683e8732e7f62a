//! Bearer tokens on the gRPC listener: with `auth.tokens_file`, every call
//! needs `authorization: Bearer <token>` metadata of a token that covers
//! `check` (Envoy sends it as the `grpc_service`'s `initial_metadata`).
//!
//! An interceptor, so a refused call ends before its message is decoded
//! and long before the store: an unauthenticated caller spends nothing and
//! costs little. The tokens are the HTTP listener's own (one swapped set,
//! so a reload applies to both at once), and the metadata is taken apart
//! by the same code as the HTTP header ([`crate::domain::auth::presented`]).

use std::sync::Arc;

use arc_swap::ArcSwap;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::server::RlsError;
use crate::domain::auth::{Scope, TokenSet};
use crate::metrics::{AuthFailure, Metrics};

/// gRPC metadata keys are lowercase on the wire.
const AUTHORIZATION: &str = "authorization";

/// The tokens in force (`None`: no `auth.tokens_file`, every call open as
/// before) and where refusals are counted.
#[derive(Clone)]
pub struct RlsAuth {
    pub tokens: Option<Arc<ArcSwap<TokenSet>>>,
    pub metrics: Arc<Metrics>,
}

impl Interceptor for RlsAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let Some(tokens) = &self.tokens else {
            return Ok(request);
        };
        let values = request.metadata().get_all(AUTHORIZATION).iter();
        let values = values.map(|v| v.as_encoded_bytes());
        // `ShouldRateLimit` spends quota, as `POST /v1/check` does.
        if let Err(refusal) = tokens.load().authorize(values, Scope::Check) {
            self.metrics
                .auth
                .record_failure(AuthFailure::from(&refusal));
            return Err(RlsError::Unauthenticated(refusal).into());
        }
        // As over HTTP: nothing past this point sees the token.
        request.metadata_mut().remove(AUTHORIZATION);
        Ok(request)
    }
}
