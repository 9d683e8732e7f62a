//! Wiring: settings in, a bound listener and a running service out.
//!
//! [`Application::build`] binds first, so callers (tests) can ask for port 0
//! and read the real port back before serving.

mod budget;
mod grpc;
mod spawn;
mod stores;
mod tls;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::config::{ServerSettings, Settings};
use crate::domain::{PolicySet, SystemClock};
use crate::http::server;
use crate::http::{self, AppState, Shared};
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::policies::LoadError;
use crate::store::StoreError;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;
use crate::tasks::Tasks;

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot set up the Redis client: {0}")]
    Redis(#[from] StoreError),
    /// The configuration is wrong (the CLI exits with EX_USAGE).
    #[error(transparent)]
    Policies(#[from] LoadError),
    /// `rls.config` is wrong (the CLI exits with EX_USAGE).
    #[error(transparent)]
    Rls(#[from] crate::rls::RlsLoadError),
    /// `auth.tokens_file` is wrong (the CLI exits with EX_USAGE).
    #[error(transparent)]
    Tokens(#[from] crate::tokens::TokensError),
    /// `tenants.file` cannot be read (the CLI exits with EX_USAGE).
    #[error(transparent)]
    Tenants(#[from] crate::tenants::TenantsError),
}

/// How long startup waits for Redis before serving degraded.
const STARTUP_CONNECT_WAIT: Duration = Duration::from_secs(1);

pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    addr: SocketAddr,
    server: ServerSettings,
    connections: crate::metrics::ListenerMetrics,
    /// Every task the service spawned: shutdown ends the loops and waits
    /// for the rest.
    tasks: Tasks,
    redis: Option<RedisStore>,
    policies: Arc<ArcSwap<PolicySet>>,
    grpc_addr: Option<SocketAddr>,
    /// The gRPC server, drained beside the HTTP one.
    grpc: Option<grpc::Draining>,
    /// Told to stop waiting checks when the server starts draining.
    limiter: Arc<Limiter>,
}

impl Application {
    /// Builds the store named by the settings, then the service.
    pub async fn build(settings: Settings) -> Result<Application, StartError> {
        match &settings.redis {
            Some(redis) => {
                let store = RedisStore::connect(redis.clone())?;
                let probe_interval = redis.probe_interval;
                Self::build_with(settings, Backend::Redis(store), probe_interval).await
            }
            None => {
                let store = MemoryStore::new(Arc::new(SystemClock), settings.memory.max_keys);
                Self::build_with(settings, Backend::Memory(store), Duration::from_secs(1)).await
            }
        }
    }

    /// Builds the service over a store made by the caller (tests use this
    /// to pass stores on a controlled clock).
    pub async fn build_with(
        mut settings: Settings,
        backend: Backend,
        probe_interval: Duration,
    ) -> Result<Application, StartError> {
        // Before anything opens a connection or a file.
        budget::apply(&mut settings);
        let (listener, addr) = bind_http(settings.server.listen).await?;
        let metrics = Arc::new(Metrics::new());
        metrics.count_http2_warnings(crate::telemetry::http2_warnings);
        metrics.count_trace_spans(crate::telemetry::otel::span_counts);
        // Before anything is spawned: an invalid file stops startup.
        let files = spawn::load_files(&settings, addr, &metrics)?;
        let grpc = grpc::bind_grpc(&settings, &metrics).await?;

        let tasks = Tasks::new();
        spawn::watch_files(&tasks, &settings, &files, &metrics);
        let (limiter, redis, tenants) = spawn::start_limiter(
            &tasks,
            backend,
            &settings,
            probe_interval,
            &metrics,
            &files.policies,
        )
        .await?;
        let grpc_addr = grpc.as_ref().map(|g| g.addr);
        let grpc = grpc.map(|grpc| {
            let auth = crate::rls::auth::RlsAuth {
                tokens: files.auth.tokens.clone(),
                metrics: metrics.clone(),
            };
            grpc::spawn_grpc(grpc, &limiter, &settings, auth, &tasks)
        });
        log_listening(addr, &limiter, &settings);
        warn_if_waits_outlast_shutdown(&settings);
        let connections = metrics.listeners.http.clone();
        let router = build_router(&settings, limiter.clone(), tenants, metrics, &files);
        Ok(Application {
            listener,
            router,
            addr,
            server: settings.server,
            connections,
            tasks,
            redis,
            policies: files.policies,
            grpc_addr,
            grpc,
            limiter,
        })
    }

    /// Where the Envoy RLS gRPC server listens (`grpc.listen`), if it does.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The policies in force. Storing a new set swaps it for every later
    /// request (the watcher does this on a reload; tests may too).
    pub fn policies(&self) -> Arc<ArcSwap<PolicySet>> {
        self.policies.clone()
    }

    /// Serves until `shutdown` completes, then lets in-flight requests finish
    /// for at most `server.shutdown_timeout` (idle connections close at once).
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        // Waiting checks answer their last denial as draining starts,
        // rather than outlast server.shutdown_timeout and be dropped.
        let limiter = self.limiter.clone();
        let grpc = self.grpc;
        let draining = grpc.as_ref().map(|g| g.stop_handle());
        let signalled = Arc::new(std::sync::OnceLock::new());
        let signalled_at = signalled.clone();
        let shutdown = async move {
            shutdown.await;
            let _ = signalled_at.set(tokio::time::Instant::now());
            limiter.stop_waiting();
            if let Some(grpc) = draining {
                grpc.send_replace(true);
            }
        };
        let result = server::serve(
            self.listener,
            self.router,
            &self.server,
            self.connections,
            shutdown,
        )
        .await;
        // Draining since the signal, beside HTTP, within the same
        // server.shutdown_timeout: what is left of it.
        let left = || {
            let since = signalled.get().map_or(Duration::ZERO, |at| at.elapsed());
            self.server.shutdown_timeout.saturating_sub(since)
        };
        if let Some(grpc) = grpc {
            grpc.finish(left()).await;
        }
        // No request is answered any more. The loops end (the watches, the
        // prober, the sweepers, the invalidation listener); what writes to
        // the store (a waiting check's try, a refund, a release) finishes
        // within what is left of server.shutdown_timeout, or is cut off
        // when the runtime stops (each is bounded by the store's timeouts:
        // this only happens when the store does not answer).
        self.tasks.shutdown(left()).await;
        // Then the leased chunks go back, and only then is Redis closed.
        self.limiter
            .give_back_all_leases(self.server.shutdown_timeout)
            .await;
        if let Some(redis) = self.redis {
            redis.quit().await;
        }
        info!("stopped");
        result
    }
}

/// A wait longer than the drain is cut short at shutdown (the waiter gets
/// its last denial): worth knowing when choosing `limits.max_wait`.
fn warn_if_waits_outlast_shutdown(settings: &Settings) {
    let max_wait = Duration::from_millis(settings.limits.bounds.max_wait_ms);
    if max_wait > settings.server.shutdown_timeout {
        warn!(
            ?max_wait,
            shutdown_timeout = ?settings.server.shutdown_timeout,
            "limits.max_wait is longer than server.shutdown_timeout: \
             checks still waiting at shutdown are answered with their last denial"
        );
    }
}

/// The HTTP listener on `addr`, and the address it got (port 0 picks one).
async fn bind_http(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((listener, addr))
}

/// The one line that says the service is up, and on what.
fn log_listening(addr: SocketAddr, limiter: &Limiter, settings: &Settings) {
    let tls = tls_mode(settings.server.tls.as_deref());
    info!(
        %addr,
        tls,
        store = limiter.store_name(),
        ready = limiter.is_ready(),
        failure_mode = settings.failure.mode.as_str(),
        "ratekeeper listening on {addr} with the {} store",
        limiter.store_name()
    );
}

/// What a listener's startup line says of its TLS: "off", "tls" or "mtls".
fn tls_mode(tls: Option<&crate::tls::server::ServerTls>) -> &'static str {
    match tls {
        None => "off",
        Some(tls) if tls.asks_client_certificates() => "mtls",
        Some(_) => "tls",
    }
}

/// The HTTP API over `limiter`, behind the bearer-token check.
fn build_router(
    settings: &Settings,
    limiter: Arc<Limiter>,
    tenants: Arc<crate::tenants::Tenants>,
    metrics: Arc<Metrics>,
    files: &spawn::Files,
) -> axum::Router {
    let bearer = http::bearer::Bearer {
        tokens: files.auth.tokens.clone(),
        protect_metrics: settings.auth.protect_metrics,
        metrics: metrics.clone(),
    };
    http::router(AppState::new(Shared {
        bearer,
        limiter,
        tenants,
        metrics,
        bounds: settings.limits.bounds,
        max_batch: settings.limits.max_batch,
        policies: files.policies.clone(),
        policies_json: Default::default(),
        trusted_proxies: settings.server.trusted_proxies.clone().into(),
    }))
}

/// The store an [`Application`] runs on.
pub enum Backend {
    Memory(MemoryStore),
    Redis(RedisStore),
}

/// Completes on the first SIGINT or SIGTERM. The handlers are installed
/// when this is called, not when the future is first polled: a signal that
/// arrives while the service is still starting (after it logged its
/// address, say) must stop it gracefully rather than kill it.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        let wait = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(interrupt) => {},
            () = wait(terminate) => {},
        }
    }
}
