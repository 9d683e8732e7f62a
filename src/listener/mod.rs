//! What the two listeners share, the HTTP API's ([`crate::http::server`])
//! and the Envoy RLS gRPC one ([`crate::rls::listener`]): accepting with a
//! pause when out of file descriptors (`Acceptor`), counting open
//! connections under a cap (`OpenConnection`), read and write deadlines
//! (`TimedIo`), and fitting both caps under the open-files limit
//! ([`fds`]), and the TLS handshake of a listener with TLS (`tls.rs`).
//!
//! Each listener has its own cap, so a flood on one (idle gRPC connections,
//! say) cannot take the other's connections, and the caps together leave
//! file descriptors for Redis and for reloading files.

pub mod fds;
mod timed_io;
mod tls;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tracing::warn;

use crate::telemetry::LogThrottle;

pub(crate) use timed_io::{Activity, Kind, TimedIo, Timeouts};
pub(crate) use tls::{Handshake, MaybeTls};

/// Accepts connections on one listener. Errors that belong to one
/// connection (reset before accept) are skipped; running out of file
/// descriptors is not: the loop pauses so it does not spin (a full core
/// otherwise, each `accept4` failing at once), counts the failure, and
/// warns at most once a second.
pub(crate) struct Acceptor {
    listener: TcpListener,
    /// The setting to lower, named in the warning.
    cap_key: &'static str,
    errors: IntCounter,
    warnings: LogThrottle,
    /// Armed after a failure: no accept until it has passed.
    pause: Option<Pin<Box<Sleep>>>,
}

/// How long accepting pauses after a failure such as EMFILE.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

impl Acceptor {
    pub(crate) fn new(listener: TcpListener, cap_key: &'static str, errors: IntCounter) -> Self {
        Acceptor {
            listener,
            cap_key,
            errors,
            warnings: LogThrottle::new(Duration::from_secs(1)),
            pause: None,
        }
    }

    /// The next connection. Cancel-safe: dropping the future loses none.
    pub(crate) async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// The next connection, for a `Stream` of them (the gRPC listener's).
    pub(crate) fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<(TcpStream, SocketAddr)> {
        loop {
            if let Some(pause) = &mut self.pause {
                ready!(pause.as_mut().poll(cx));
                self.pause = None;
            }
            match ready!(self.listener.poll_accept(cx)) {
                Ok(accepted) => return Poll::Ready(accepted),
                Err(error) => self.failed(error),
            }
        }
    }

    /// Counts and reports a failure, and arms the pause, unless it was one
    /// connection's own.
    fn failed(&mut self, error: io::Error) {
        use io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted};
        if matches!(
            error.kind(),
            ConnectionAborted | ConnectionReset | Interrupted
        ) {
            return;
        }
        self.errors.inc();
        if let Some(unlogged) = self.warnings.admit() {
            warn!(
                %error,
                cap = self.cap_key,
                unlogged,
                "cannot accept connections (out of file descriptors?); lower {} or raise the limit",
                self.cap_key
            );
        }
        self.pause = Some(Box::pin(tokio::time::sleep(ACCEPT_PAUSE)));
    }
}

/// Refuses a connection over a cap: writes `answer` (a canned response
/// that fits a fresh socket's empty send buffer, so this never waits) and
/// lets the caller drop the stream. A TLS listener passes no answer: a
/// plaintext one would be garbage to its client's TLS stack, so the close
/// alone refuses. Whatever of the client's request has
/// arrived is read off first, without waiting for more: closing a socket
/// with unread data sends a reset, which can reach the client before the
/// answer and throw it away.
pub(crate) fn refuse(stream: &TcpStream, answer: Option<&[u8]>, refused: &IntCounter) {
    refused.inc();
    let mut sink = [0u8; 4096];
    for _ in 0..4 {
        if !matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
    // If it cannot write, the close alone still refuses.
    if let Some(answer) = answer {
        let _ = stream.try_write(answer);
    }
}

/// Counts one open connection for as long as it lives.
pub(crate) struct OpenConnection(IntGauge);

impl OpenConnection {
    pub(crate) fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        OpenConnection(gauge.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}
