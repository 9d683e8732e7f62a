//! The gRPC listener's connections, bounded like the HTTP API's: at most
//! `grpc.max_connections` open (beyond it a GOAWAY and a close, without
//! reading; with `[grpc.tls]` only the close), a first call within `grpc.handshake_timeout`, a close after
//! `grpc.idle_timeout` without a call, and a pause in accepting when out
//! of file descriptors. The pieces are the HTTP listener's
//! ([`crate::listener`]).
//!
//! Each connection gets its own tonic server ([`serve`]): tonic's graceful
//! shutdown (a GOAWAY, then a close once the calls in flight are done) is
//! per server, and a connection past its deadline is ended that way, so a
//! client never loses a call it sent as the connection was closed.
//!
//! Without these, idle connections were held for good and preface-only
//! ones for 40 s, and about 19 900 of them took every file descriptor: the
//! HTTP API, `/healthz` included, could then accept nothing, and no file
//! could be reloaded.
//!
//! What is a call: any HTTP/2 request (stream) tonic hands to the service,
//! whatever its answer, from the moment it arrives until its response is
//! ready (a unary response follows at once). [`Tracked`] marks them on
//! the connection's `Activity`, which tonic passes to each request as
//! its connect info ([`Calls`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::Service;
use tonic::codegen::http;
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::config::GrpcSettings;
use crate::listener::{
    Acceptor, Activity, Handshake, Kind, MaybeTls, OpenConnection, TimedIo, Timeouts, refuse,
};
use crate::metrics::ListenerMetrics;

/// A client that reads nothing of a response for this long is dropped
/// (HTTP/2 pings find one that is gone, but not one that stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Written to connections over the cap, without reading them: the server
/// preface (an empty SETTINGS frame), then GOAWAY with last stream 0 and
/// ENHANCE_YOUR_CALM, whose debug data says why. A client retries on a new
/// connection; nothing of this one is processed.
const REFUSED: &[u8] = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00\
\x00\x00\x1c\x07\x00\x00\x00\x00\x00\
\x00\x00\x00\x00\x00\x00\x00\x0b\
too many connections";

/// Accepts connections under the cap.
pub struct Incoming {
    acceptor: Acceptor,
    max: i64,
    timeouts: Timeouts,
    metrics: ListenerMetrics,
    /// `[grpc.tls]`'s handshake, or none.
    handshake: Handshake,
}

impl Incoming {
    pub fn new(listener: TcpListener, settings: &GrpcSettings, metrics: ListenerMetrics) -> Self {
        Incoming {
            acceptor: Acceptor::new(
                listener,
                "grpc.max_connections",
                metrics.accept_errors.clone(),
            ),
            max: i64::try_from(settings.max_connections).unwrap_or(i64::MAX),
            timeouts: Timeouts {
                kind: Kind::Grpc,
                header: settings.handshake_timeout,
                keepalive: settings.idle_timeout,
                write: WRITE_TIMEOUT,
            },
            handshake: Handshake::new(settings.tls.clone(), metrics.tls_failed.clone()),
            metrics,
        }
    }
}

impl Incoming {
    /// The next connection under the cap; those over it are refused here.
    async fn next(&mut self) -> Accepted {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Accepted> {
        let this = self;
        loop {
            let (stream, _) = std::task::ready!(this.acceptor.poll_accept(cx));
            if this.metrics.open.get() >= this.max {
                let answer = (!this.handshake.is_tls()).then_some(REFUSED);
                refuse(&stream, answer, &this.metrics.refused);
                continue;
            }
            // Responses are written whole; don't let Nagle hold them.
            let _ = stream.set_nodelay(true);
            let addresses = TcpConnectInfo {
                local_addr: stream.local_addr().ok(),
                remote_addr: stream.peer_addr().ok(),
            };
            let activity = Arc::new(Activity::default());
            let io = TimedIo::new(
                stream,
                activity.clone(),
                this.timeouts,
                this.metrics.timed_out.clone(),
            );
            return Poll::Ready(Accepted {
                io,
                activity,
                addresses,
                open: OpenConnection::new(&this.metrics.open),
                handshake: this.handshake.clone(),
            });
        }
    }
}

/// Serves every connection `incoming` accepts with `serve_one`, each on a
/// task of its own, until `stop` turns true; then stops accepting, ends
/// every connection (each tonic server's graceful shutdown: a GOAWAY, the
/// calls in flight answered) and returns once all are done. The caller
/// bounds that wait. `serve_one` gets the connection as a stream of one,
/// and a future that completes when it should end: its tonic server's
/// shutdown signal.
pub async fn serve<F, Fut>(
    mut incoming: Incoming,
    serve_one: F,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    F: Fn(Single, Ended) -> Fut,
    Fut: Future<Output = Result<(), tonic::transport::Error>> + Send + 'static,
{
    let mut connections = tokio::task::JoinSet::new();
    let mut live: Vec<std::sync::Weak<Activity>> = Vec::new();
    loop {
        let conn = tokio::select! {
            conn = incoming.next() => conn,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        // Reap the finished ones, so the set holds only live connections.
        while connections.try_join_next().is_some() {}
        live.retain(|a| a.strong_count() > 0);
        live.push(Arc::downgrade(&conn.activity));
        let ended = Ended(conn.activity.clone());
        let served = serve_one(Single::new(conn), ended);
        connections.spawn(async move {
            if let Err(error) = served.await {
                tracing::debug!(%error, "gRPC connection ended with an error");
            }
        });
    }
    drop(incoming);
    for activity in live.iter().filter_map(std::sync::Weak::upgrade) {
        activity.end();
    }
    while connections.join_next().await.is_some() {}
}

/// One connection as the stream of connections tonic serves, its TLS
/// handshake (if any) run as tonic first polls it, in the connection's own
/// task. It never ends: an ended stream would shut the server down at
/// once. A failed handshake ends the connection's server through
/// [`Ended`]; one past `grpc.handshake_timeout` is ended the same way by
/// the timed stream, which drops the handshake.
pub struct Single(Option<Handshaking>);

type Handshaking = Pin<Box<dyn Future<Output = Option<Conn>> + Send>>;

impl Single {
    fn new(accepted: Accepted) -> Single {
        Single(Some(Box::pin(accepted.handshake())))
    }
}

impl Stream for Single {
    type Item = io::Result<Conn>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(handshaking) = &mut this.0 else {
            return Poll::Pending;
        };
        let conn = std::task::ready!(handshaking.as_mut().poll(cx));
        this.0 = None;
        match conn {
            Some(conn) => Poll::Ready(Some(Ok(conn))),
            None => Poll::Pending,
        }
    }
}

/// A connection under the cap, before its handshake.
pub struct Accepted {
    io: TimedIo<TcpStream>,
    activity: Arc<Activity>,
    addresses: TcpConnectInfo,
    open: OpenConnection,
    handshake: Handshake,
}

impl Accepted {
    /// The connection after its handshake; `None` (and its server told to
    /// end) when that failed.
    async fn handshake(self) -> Option<Conn> {
        let Accepted {
            io,
            activity,
            addresses,
            open,
            handshake,
        } = self;
        let Some(io) = handshake.accept(io).await else {
            activity.end();
            return None;
        };
        Some(Conn {
            io,
            activity,
            addresses,
            _open: open,
        })
    }
}

/// Completes when a connection should end: its deadline passed, or it
/// closed (then its server has nothing left to wait for).
pub struct Ended(Arc<Activity>);

impl Ended {
    pub async fn wait(self) {
        self.0.ended().await;
    }
}

/// One accepted gRPC connection: counted while it lives, with deadlines.
pub struct Conn {
    io: MaybeTls<TimedIo<TcpStream>>,
    activity: Arc<Activity>,
    /// What tonic's own TCP connect info would say (see [`Calls`]).
    addresses: TcpConnectInfo,
    _open: OpenConnection,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.activity.end();
    }
}

/// Each request's handle on its connection's calls (tonic's connect
/// info), and the connection's addresses: [`Tracked`] hands those on as
/// the `TcpConnectInfo` tonic's `Request::remote_addr` reads, which it
/// would otherwise not find (this connect info is not tonic's own type).
#[derive(Clone)]
pub struct Calls(Arc<Activity>, TcpConnectInfo);

impl Connected for Conn {
    type ConnectInfo = Calls;

    fn connect_info(&self) -> Calls {
        Calls(self.activity.clone(), self.addresses.clone())
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Marks each call of one method as in progress on its connection, which
/// stops the handshake and idle clocks meanwhile. It goes inside the
/// bearer-token check, so only authorised calls keep a connection open: a
/// client whose calls are all refused is closed by `grpc.handshake_timeout`
/// like one that makes none.
#[derive(Clone)]
pub struct Tracked<S> {
    inner: S,
    /// The one path that counts as a call (others are answered
    /// UNIMPLEMENTED, and must not hold a connection either).
    path: &'static str,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, path: &'static str) -> Tracked<S> {
        Tracked { inner, path }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Tracked<S> {
    const NAME: &'static str = S::NAME;
}

type CallFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B> Service<http::Request<B>> for Tracked<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = CallFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let calls = request.extensions().get::<Calls>().cloned();
        let counts = request.uri().path() == self.path;
        let call = calls.and_then(|Calls(activity, addresses)| {
            request.extensions_mut().insert(addresses);
            counts.then(|| activity.begin())
        });
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            drop(call);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_settings_then_a_goaway_frame() {
        let (settings, goaway) = REFUSED.split_at(9);
        assert_eq!(settings, [0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let length = u32::from_be_bytes([0, goaway[0], goaway[1], goaway[2]]) as usize;
        assert_eq!((goaway[3], length), (7, goaway.len() - 9));
        assert_eq!(&goaway[13..17], [0, 0, 0, 0x0b], "ENHANCE_YOUR_CALM");
    }
}
