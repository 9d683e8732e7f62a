//! The Envoy RLS gRPC listener: bound at startup beside the HTTP one,
//! served by [`crate::rls::server`].

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::StartError;
use crate::config::Settings;
use crate::domain::rls::RlsConfig;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::tasks::Tasks;

/// With `grpc.listen`: the RLS config (empty without `rls.config`: every
/// domain is unknown, so every answer is OK) and the bound listener.
pub(super) async fn bind_grpc(
    settings: &Settings,
    metrics: &Arc<Metrics>,
) -> Result<Option<Grpc>, StartError> {
    let Some(addr) = settings.grpc.listen else {
        return Ok(None);
    };
    let config = Arc::new(ArcSwap::from_pointee(RlsConfig::default()));
    let reloader = match &settings.rls.config {
        Some(path) => {
            let reloader = crate::rls::reload::reloader(
                path.clone(),
                settings.limits.bounds,
                config.clone(),
                metrics.clone(),
            );
            reloader.load_initial()?;
            Some(Arc::new(reloader))
        }
        None => None,
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok(Some(Grpc {
        listener,
        addr,
        config,
        reloader,
    }))
}

/// The bound RLS listener, the config in force, and what reloads it.
pub(super) struct Grpc {
    listener: TcpListener,
    pub(super) addr: SocketAddr,
    config: Arc<ArcSwap<RlsConfig>>,
    reloader: Option<Arc<crate::rls::reload::Reloader>>,
}

/// Serves the Envoy RLS on the bound gRPC listener, and watches
/// `rls.config` when it is reloadable. `tokens` are the HTTP listener's
/// (`auth.tokens_file`): with them every call needs a `check` token.
pub(super) fn spawn_grpc(
    grpc: Grpc,
    limiter: &Arc<Limiter>,
    settings: &Settings,
    auth: crate::rls::auth::RlsAuth,
    tasks: &Tasks,
) -> Draining {
    let Grpc {
        listener,
        addr,
        config,
        reloader,
    } = grpc;
    let domains = config.load().domains.len();
    let bearer_auth = auth.tokens.is_some();
    let tls = super::tls_mode(settings.grpc.tls.as_deref());
    info!(grpc_addr = %addr, tls, domains, bearer_auth, "Envoy RLS gRPC listening on {addr}");
    // The HTTP listener's rule: without tokens, a port reachable from other
    // hosts lets anyone spend (or exhaust) any client's quota.
    if !bearer_auth && !addr.ip().is_loopback() {
        warn!(
            grpc_addr = %addr,
            "the Envoy RLS gRPC service on {addr} is unauthenticated (no auth.tokens_file): \
             anyone who reaches it may spend any key's quota; set auth.tokens_file (Envoy \
             then sends a check token as initial_metadata), or bind grpc.listen to loopback \
             or a network that only your Envoys reach"
        );
    }
    if let Some(reloader) = reloader {
        super::spawn::watch_file(tasks, settings, reloader);
    }
    let service = crate::rls::server::RlsService {
        limiter: limiter.clone(),
        config,
        bounds: settings.limits.bounds,
    };
    let metrics = auth.metrics.listeners.grpc.clone();
    let incoming = crate::rls::listener::Incoming::new(listener, &settings.grpc, metrics);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    Draining {
        stop,
        task: tasks.spawn(crate::rls::serve::serve(incoming, service, auth, stopped)),
    }
}

/// The running gRPC server, and how to drain it at shutdown: as the HTTP
/// listener does, so a call in flight is answered and Envoy is told to go
/// away (GOAWAY) rather than finding its connection cut, which it would
/// answer by its failure mode (by default: let the request through).
pub(super) struct Draining {
    stop: tokio::sync::watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Draining {
    /// What starts the drain (true: stop accepting, end every connection
    /// gracefully); a handle the shutdown future can own.
    pub(super) fn stop_handle(&self) -> tokio::sync::watch::Sender<bool> {
        self.stop.clone()
    }

    /// Waits up to `limit` for the connections to finish, then drops them.
    pub(super) async fn finish(mut self, limit: std::time::Duration) {
        if tokio::time::timeout(limit, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}
