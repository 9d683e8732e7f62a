//! `ratekeeper healthcheck`: the container's probe. It asks the running
//! service's `/healthz` from inside its own host or container (the image
//! has no curl), over TLS when `[server.tls]` is on. With mTLS
//! (`server.tls.client_ca_file`) it has no client certificate to present,
//! so it only checks that the listener accepts a connection, as a
//! Kubernetes `tcpSocket` probe would.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::EX_USAGE;
use crate::config::{Overrides, ProbeTls, Settings};

/// How long the whole probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) async fn run(config: Option<PathBuf>, url: Option<String>) -> ExitCode {
    let target = match url {
        Some(url) => Target::Url(url),
        None => match Settings::probe_target(&Overrides {
            config_file: config,
            ..Overrides::default()
        }) {
            Ok((listen, ProbeTls::Mutual)) => Target::Accepts(loopback(listen)),
            Ok((listen, tls)) => Target::Url(healthz_url(listen, tls == ProbeTls::Tls)),
            Err(error) => {
                eprintln!("ratekeeper: {error}");
                return ExitCode::from(EX_USAGE);
            }
        },
    };
    let probe = async {
        match target {
            Target::Url(url) => probe(&url).await,
            Target::Accepts(addr) => tokio::net::TcpStream::connect(addr)
                .await
                .map(drop)
                .map_err(|e| format!("{addr}: {e}")),
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(reason)) => unhealthy(&reason),
        Err(_) => unhealthy("no answer within 2 s"),
    }
}

/// What the probe asks.
enum Target {
    /// `GET /healthz` answered 200.
    Url(String),
    /// A TCP connection accepted (mTLS: see the module doc).
    Accepts(SocketAddr),
}

fn unhealthy(reason: &str) -> ExitCode {
    eprintln!("ratekeeper: unhealthy: {reason}");
    ExitCode::FAILURE
}

/// Where the service is reached from inside its own host or container: a
/// wildcard listen address over loopback.
fn loopback(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

fn healthz_url(listen: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}/healthz", loopback(listen))
}

/// A minimal HTTP/1.1 GET of `url` (`http://` or `https://`, host:port
/// then a path): Ok on a 200.
async fn probe(url: &str) -> Result<(), String> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err("only http:// and https:// URLs are supported".into());
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| e.to_string())?;
    if !tls {
        return get(stream, host, path).await.map_err(Failed::text);
    }
    // The certificate is not examined (see crate::tls::probe), so any
    // name does; the host's, when it is one, for SNI.
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    let name = rustls::pki_types::ServerName::try_from(name.trim_matches(['[', ']']).to_string())
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(crate::tls::probe::client()));
    // TLS 1.3: a refused client certificate shows at the first read.
    let tls_failed = |e: String| format!("TLS: {e}");
    let stream = connector
        .connect(name, stream)
        .await
        .map_err(|e| tls_failed(e.to_string()))?;
    get(stream, host, path)
        .await
        .map_err(|failed| match failed {
            Failed::Io(e) => tls_failed(e),
            status => status.text(),
        })
}

/// Why a GET failed: on the connection, or with another status than 200.
enum Failed {
    Io(String),
    Status(String),
}

impl Failed {
    fn text(self) -> String {
        match self {
            Failed::Io(e) | Failed::Status(e) => e,
        }
    }
}

async fn get(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    host: &str,
    path: &str,
) -> Result<(), Failed> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let io = |e: std::io::Error| Failed::Io(e.to_string());
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.map_err(io)?;
    if &head[9..12] == b"200" {
        Ok(())
    } else {
        let status = String::from_utf8_lossy(&head[9..12]);
        Err(Failed::Status(format!("status {status}")))
    }
}
