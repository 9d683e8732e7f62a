//! Our own accept loop around hyper, in place of `axum::serve`, which has
//! no timeouts and no connection limit: a slow or idle client would hold a
//! file descriptor and ~35 KB forever, and enough of them stop the service
//! from accepting anyone.
//!
//! Per connection: read deadlines (`listener::timed_io`), a body deadline handed to
//! the handler as a request extension ([`BodyDeadline`]), and on shutdown
//! hyper's `graceful_shutdown` (idle keep-alive connections close at once,
//! in-flight requests finish). Per process: at most `max_connections`;
//! beyond it a canned 503 is written without reading the request (with
//! `[server.tls]`, only a close: a plaintext 503 means nothing to a TLS
//! client), except
//! on [`PROBE_RESERVE`] more connections, which answer only the probe
//! paths (`/healthz`, `/readyz`, `/metrics`; anything else gets the same
//! 503), one request each: an orchestrator and a scraper still see the
//! service, and why it is full, while waiters or a flood hold every
//! connection.
//!
//! A client that closes its connection while its request is with the
//! router (a check waiting with `wait_ms`) cancels the request: hyper's
//! HTTP/1 dispatcher keeps reading while the response is pending
//! (`mid_message_detect_eof` in hyper 1.x), and an EOF or reset there ends
//! `serve_connection` with an error, so the task below returns and drops
//! the handler's future (tests/api/wait.rs measures about 1 ms). A half-close
//! counts as a close (hyper's `half_close` is off). Once bytes of a
//! pipelined next request are buffered, hyper stops looking, and a close
//! is only seen when this response is written.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use prometheus::{IntCounter, IntGauge};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::ServerSettings;
use crate::listener::{
    Acceptor, Activity, Handshake, Kind, MaybeTls, OpenConnection, TimedIo, Timeouts, refuse,
};
use crate::metrics::{ListenerMetrics, TimedOut};

/// When the body of the request carrying it must have arrived whole.
/// Set by the server on every request; [`super::ApiError::RequestTimeout`]
/// answers a body that misses it.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline {
    pub at: Instant,
    /// `server.body_read_timeout`, for the error message.
    pub timeout: Duration,
}

/// Largest request head (line and headers). hyper's default, ~400 KiB, would
/// let each of `max_connections` clients make the server buffer that much;
/// heads over this are answered 431 (by hyper, with an empty body).
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The body of every "too many connections" 503.
macro_rules! overloaded_body {
    () => {
        r#"{"error":{"code":"overloaded","message":"too many open connections; retry in a moment"}}"#
    };
}

/// Written to connections over `max_connections` and the reserve, without
/// reading them: parsing would cost what the limit is there to save.
const OVERLOADED: &[u8] = concat!(
    "HTTP/1.1 503 Service Unavailable\r\n",
    "content-type: application/json\r\n",
    "retry-after: 1\r\n",
    "connection: close\r\n",
    "content-length: 88\r\n\r\n",
    overloaded_body!()
)
.as_bytes();

/// Connections beyond `max_connections` kept for `PROBE_PATHS`. A few
/// probes at once (a kubelet's, a scraper's) is what they are for; each
/// serves one request, whose head must come within `PROBE_HEAD_TIMEOUT`,
/// so a silent or slow client holds one for at most that.
pub const PROBE_RESERVE: usize = 16;

/// A probe sends its request as soon as it connects.
const PROBE_HEAD_TIMEOUT: Duration = Duration::from_secs(1);

/// What the reserve connections answer.
const PROBE_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Serving,
    /// Finish in-flight requests; close idle connections.
    Draining,
    /// `shutdown_timeout` passed: drop whatever is left.
    Stop,
}

/// Serves `router` on `listener` until `shutdown` completes, then drains
/// for at most `settings.shutdown_timeout`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &ServerSettings,
    metrics: ListenerMetrics,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let (stage_tx, stage_rx) = watch::channel(Stage::Serving);
    let connection = ConnectionConfig::new(router, settings, &metrics);
    let max = i64::try_from(settings.max_connections).unwrap_or(i64::MAX);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut acceptor = Acceptor::new(
        listener,
        "server.max_connections",
        metrics.accept_errors.clone(),
    );
    // Counted in `metrics.open` too; only the accept loop adds to either.
    let in_reserve = IntGauge::new("probe_reserve", "-").expect("valid gauge");
    loop {
        let (stream, peer) = tokio::select! {
            accepted = acceptor.accept() => accepted,
            () = &mut shutdown => break,
        };
        let reserved = in_reserve.get();
        let probes_only = if metrics.open.get() - reserved < max {
            None
        } else if reserved < PROBE_RESERVE as i64 {
            Some(OpenConnection::new(&in_reserve))
        } else {
            let answer = (!connection.handshake.is_tls()).then_some(OVERLOADED);
            refuse(&stream, answer, &metrics.refused);
            continue;
        };
        let guard = OpenConnection::new(&metrics.open);
        let connection = connection.clone();
        let refused = probes_only.as_ref().map(|_| metrics.refused.clone());
        let stage = stage_rx.clone();
        tokio::spawn(async move {
            connection.run(stream, peer, stage, refused).await;
            drop((guard, probes_only));
        });
    }
    drop(acceptor);
    drop(stage_rx);
    drain(stage_tx, settings.shutdown_timeout, &metrics.open).await;
    Ok(())
}

/// Lets in-flight requests finish for at most `drain_limit` (idle
/// connections close at once), then stops the rest.
async fn drain(stage_tx: watch::Sender<Stage>, drain_limit: Duration, open: &IntGauge) {
    info!("shutting down: finishing in-flight requests");
    let _ = stage_tx.send(Stage::Draining);
    // Every connection task holds a receiver: closed() means all are done.
    if tokio::time::timeout(drain_limit, stage_tx.closed())
        .await
        .is_err()
    {
        warn!(
            ?drain_limit,
            remaining = open.get(),
            "shutdown timeout reached; dropping remaining connections"
        );
        let _ = stage_tx.send(Stage::Stop);
    }
}

/// What every connection task needs, cloned per connection.
#[derive(Clone)]
struct ConnectionConfig {
    service: TowerToHyperService<Router>,
    timeouts: Timeouts,
    timed_out: TimedOut,
    body_timeout: Duration,
    /// `[server.tls]`'s handshake, or none.
    handshake: Handshake,
}

impl ConnectionConfig {
    /// The connection's timed I/O and the service answering on it; with
    /// `probes_only`, a shorter head timeout and no keep-alive.
    fn prepare(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        probes_only: Option<IntCounter>,
    ) -> (TimedIo<TcpStream>, ConnectionService, Arc<Activity>) {
        // Responses are written whole; don't let Nagle hold the last segment.
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::default());
        let mut timeouts = self.timeouts;
        if probes_only.is_some() {
            timeouts.header = timeouts.header.min(PROBE_HEAD_TIMEOUT);
        }
        let io = TimedIo::new(stream, activity.clone(), timeouts, self.timed_out);
        let service = ConnectionService {
            inner: self.service,
            activity: activity.clone(),
            body_timeout: self.body_timeout,
            peer,
            keep_alive: probes_only.is_none(),
            probes_only,
        };
        (io, service, activity)
    }

    fn new(router: Router, settings: &ServerSettings, metrics: &ListenerMetrics) -> Self {
        ConnectionConfig {
            service: TowerToHyperService::new(router),
            timed_out: metrics.timed_out.clone(),
            handshake: Handshake::new(settings.tls.clone(), metrics.tls_failed.clone()),
            timeouts: Timeouts {
                kind: Kind::Http1,
                header: settings.header_read_timeout,
                keepalive: settings.keepalive_timeout,
                write: settings.write_timeout,
            },
            body_timeout: settings.body_read_timeout,
        }
    }
}

impl ConnectionConfig {
    /// Serves one connection; with `probes_only` (the refusal counter), one
    /// request, answered only on [`PROBE_PATHS`].
    async fn run(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        mut stage: watch::Receiver<Stage>,
        probes_only: Option<IntCounter>,
    ) {
        let handshake = self.handshake.clone();
        let (io, service, activity) = self.prepare(stream, peer, probes_only);
        // Under the head timeout, as the first request's head is (the
        // timed stream's clock runs from the connection's start).
        let io = tokio::select! {
            // A plaintext connection is ready at once: never dropped here.
            biased;
            io = handshake.accept(io) => io,
            // Nothing was promised to a connection still shaking hands.
            _ = stage.wait_for(|stage| *stage != Stage::Serving) => None,
        };
        let Some(io) = io else {
            return;
        };
        let io: TokioIo<MaybeTls<TimedIo<TcpStream>>> = TokioIo::new(io);
        // hyper's own header timer is left off: it restarts whenever the
        // connection goes idle, which would make the keep-alive timeout the
        // header timeout (see timed_io).
        let conn = hyper::server::conn::http1::Builder::new()
            .keep_alive(service.keep_alive)
            .header_read_timeout(None)
            .max_header_size(MAX_HEAD_BYTES)
            .max_buf_size(MAX_HEAD_BYTES)
            .serve_connection(io, service);
        let mut conn = std::pin::pin!(conn);
        let mut draining = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        debug!(%error, "connection closed with an error");
                    }
                    return;
                }
                changed = stage.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = *stage.borrow_and_update();
                    match now {
                        Stage::Draining if !draining => {
                            draining = true;
                            activity.drain();
                            conn.as_mut().graceful_shutdown();
                        }
                        Stage::Stop => return,
                        _ => {}
                    }
                }
            }
        }
    }
}

/// Hands each request to the router, marking the connection busy meanwhile
/// and stamping the body deadline on it.
#[derive(Clone)]
struct ConnectionService {
    inner: TowerToHyperService<Router>,
    activity: Arc<Activity>,
    body_timeout: Duration,
    /// The socket peer, as axum's `ConnectInfo` (forward-auth keys by it).
    peer: SocketAddr,
    keep_alive: bool,
    /// On a reserve connection: counts the requests refused there.
    probes_only: Option<IntCounter>,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        if let Some(refused) = &self.probes_only
            && !PROBE_PATHS.contains(&request.uri().path())
        {
            refused.inc();
            return Box::pin(std::future::ready(Ok(overloaded())));
        }
        let busy = self.activity.begin();
        request.extensions_mut().insert(BodyDeadline {
            at: Instant::now() + self.body_timeout,
            timeout: self.body_timeout,
        });
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let traced = super::trace::request_span(&request);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = match traced {
                None => response.await,
                // Boxed: only a sampled request pays for the larger future.
                Some(traced) => Box::pin(super::trace::traced(traced, response)).await,
            };
            drop(busy);
            response
        })
    }
}

/// The canned 503 as a response, for a reserve connection.
fn overloaded() -> Response {
    let mut response = Response::new(axum::body::Body::from(overloaded_body!()));
    *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert("content-type", "application/json".parse().expect("valid"));
    headers.insert("retry-after", "1".parse().expect("valid"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canned_503_is_well_formed() {
        let text = std::str::from_utf8(OVERLOADED).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "overloaded");
    }
}
