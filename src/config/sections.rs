//! The sections about listeners and files: `[server]`, `[grpc]`,
//! `[policies]`, `[rls]`, `[auth]` and `[log]`, each a struct that mirrors
//! the file and one reader that names each of its keys once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use super::reader::Reader;
use crate::domain::forward::IpNet;
use crate::tenants::TenantsSettings;
use crate::tls::server::{Listener, ServerTls};

/// `[server]`: the HTTP listener.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    pub shutdown_timeout: Duration,
    /// A request head (line and headers) must arrive within this, counted
    /// from the connection's start or from the first byte of a later request.
    pub header_read_timeout: Duration,
    /// A request body must arrive whole within this after its head.
    pub body_read_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub keepalive_timeout: Duration,
    /// A connection whose client reads nothing of a response for this long
    /// is closed.
    pub write_timeout: Duration,
    /// Connections beyond this are refused at once.
    pub max_connections: usize,
    /// Peers whose `X-Forwarded-For`/`X-Real-IP` are believed by
    /// `/v1/auth` (empty: nobody's).
    pub trusted_proxies: Vec<IpNet>,
    /// The runtime's worker threads; `None` (0 in the file): tokio's
    /// default, one per core it may use (`TOKIO_WORKER_THREADS` if set).
    pub worker_threads: Option<usize>,
    /// `[server.tls]`; `None`: plaintext.
    pub tls: Option<Arc<ServerTls>>,
}

/// `[grpc]`: the Envoy RLS v3 listener.
#[derive(Debug, Clone)]
pub struct GrpcSettings {
    /// Where it listens; `None`: off.
    pub listen: Option<SocketAddr>,
    /// Connections beyond this are closed at once (an HTTP/2 GOAWAY).
    pub max_connections: usize,
    /// A new connection must start its first call within this.
    pub handshake_timeout: Duration,
    /// A connection with no call in progress is closed after this.
    pub idle_timeout: Duration,
    /// `[grpc.tls]`; `None`: plaintext.
    pub tls: Option<Arc<ServerTls>>,
}

/// `[policies]`: the named policies.
#[derive(Debug, Clone)]
pub struct PoliciesSettings {
    /// `None`: checks carry their own limits.
    pub file: Option<PathBuf>,
    /// How often the file is re-hashed in case a change event was missed
    /// (a backstop: changes are normally seen at once). The tokens file,
    /// the RLS config and the TLS files share it.
    pub poll_interval: Duration,
}

/// `[rls]`: envoyproxy/ratelimit's descriptors.
#[derive(Debug, Clone, Default)]
pub struct RlsSettings {
    /// A YAML file or a directory of them; `None`: no domains.
    pub config: Option<PathBuf>,
}

/// `[auth]`: bearer tokens.
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// Lines of `<scope> <token>`; `None`: no authentication.
    pub tokens_file: Option<PathBuf>,
    /// `/metrics` needs a token too (any scope).
    pub protect_metrics: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Auto,
    Pretty,
    Json,
}

/// `[log]`.
#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: String,
}

pub(super) fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .map_err(|_| "must be an address with a port, e.g. 127.0.0.1:8080".into())
}

pub(super) fn read_server(r: &mut Reader) -> Option<ServerSettings> {
    let listen = r.parse("server.listen", parse_listen);
    let shutdown_timeout = r.duration("server.shutdown_timeout");
    let header_read_timeout = r.duration("server.header_read_timeout");
    let body_read_timeout = r.duration("server.body_read_timeout");
    let keepalive_timeout = r.duration("server.keepalive_timeout");
    let write_timeout = r.duration("server.write_timeout");
    let max_connections = r.count("server.max_connections", 1, 10_000_000);
    let trusted_proxies = r.list("server.trusted_proxies", |s| s.parse::<IpNet>());
    let worker_threads = r.count("server.worker_threads", 0, 1024);
    let tls = super::listener_tls::read(r, Listener::Http);
    Some(ServerSettings {
        listen: listen?,
        shutdown_timeout: shutdown_timeout?,
        header_read_timeout: header_read_timeout?,
        body_read_timeout: body_read_timeout?,
        keepalive_timeout: keepalive_timeout?,
        write_timeout: write_timeout?,
        max_connections: max_connections?,
        trusted_proxies: trusted_proxies?,
        worker_threads: worker_threads.map(|n| (n > 0).then_some(n))?,
        tls: tls?,
    })
}

pub(super) fn read_grpc(r: &mut Reader) -> Option<GrpcSettings> {
    let listen = r.parse("grpc.listen", |s| {
        (!s.is_empty())
            .then(|| {
                s.parse::<SocketAddr>()
                    .map_err(|e| format!("is not host:port ({e})"))
            })
            .transpose()
    });
    let max_connections = r.count("grpc.max_connections", 1, 10_000_000);
    let handshake_timeout = r.duration("grpc.handshake_timeout");
    let idle_timeout = r.duration("grpc.idle_timeout");
    let tls = super::listener_tls::read(r, Listener::Grpc);
    Some(GrpcSettings {
        listen: listen?,
        max_connections: max_connections?,
        handshake_timeout: handshake_timeout?,
        idle_timeout: idle_timeout?,
        tls: tls?,
    })
}

pub(super) fn read_policies(r: &mut Reader) -> Option<PoliciesSettings> {
    let file = r.path("policies.file");
    let poll_interval = r.duration("policies.poll_interval");
    Some(PoliciesSettings {
        file: file?,
        poll_interval: poll_interval?,
    })
}

pub(super) fn read_tenants(r: &mut Reader) -> Option<TenantsSettings> {
    let file = r.path("tenants.file");
    let max_entries = r.count("tenants.max_entries", 1, 1_000_000);
    let max_per_policy = r.count("tenants.max_per_policy", 1, 1_000_000);
    let poll_interval = r.duration("tenants.poll_interval");
    if let Some(interval) = poll_interval
        && !(Duration::from_millis(10)..=Duration::from_secs(1)).contains(&interval)
    {
        r.problem(
            "tenants.poll_interval",
            "must be 10ms to 1s: a change must reach every instance within a second",
        );
        return None;
    }
    Some(TenantsSettings {
        file: file?,
        max_entries: max_entries?,
        max_per_policy: max_per_policy?,
        poll_interval: poll_interval?,
    })
}

pub(super) fn read_rls(r: &mut Reader) -> Option<RlsSettings> {
    let config = r.path("rls.config");
    Some(RlsSettings { config: config? })
}

pub(super) fn read_auth(r: &mut Reader) -> Option<AuthSettings> {
    let tokens_file = r.path("auth.tokens_file");
    let protect_metrics = r.boolean("auth.protect_metrics");
    let (tokens_file, protect_metrics) = (tokens_file?, protect_metrics?);
    if protect_metrics && tokens_file.is_none() {
        // Without tokens nothing is protected: refuse rather than leave
        // /metrics open while the setting says otherwise.
        r.problem(
            "auth.protect_metrics",
            "needs auth.tokens_file (no tokens, no protection)",
        );
        return None;
    }
    Some(AuthSettings {
        tokens_file,
        protect_metrics,
    })
}

pub(super) fn read_log(r: &mut Reader) -> Option<LogSettings> {
    let format = r.parse("log.format", |s| match s {
        "auto" => Ok(LogFormat::Auto),
        "pretty" => Ok(LogFormat::Pretty),
        "json" => Ok(LogFormat::Json),
        _ => Err("must be \"auto\", \"pretty\" or \"json\"".into()),
    });
    let level = r.parse("log.level", |s| {
        tracing_subscriber::EnvFilter::try_new(s)
            .map(|_| s.to_string())
            .map_err(|e| format!("is not a valid tracing filter: {e}"))
    });
    Some(LogSettings {
        format: format?,
        level: level?,
    })
}
