//! A connection of a listener with TLS: the handshake, over the timed
//! stream, so it runs under the head timeout (`server.header_read_timeout`,
//! `grpc.handshake_timeout`) and inside the connection cap, as a plaintext
//! connection's first request does: a TLS slow-loris holds no more than a
//! plaintext one. Failures are counted by why.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::debug;

use super::TimedIo;
use crate::metrics::TlsFailures;
use crate::tls::server::ServerTls;

/// A connection, in the clear or over TLS.
pub(crate) enum MaybeTls<IO> {
    Plain(IO),
    Tls(Box<TlsStream<IO>>),
}

/// Turns a new connection into one over TLS, when the listener has TLS.
#[derive(Clone)]
pub(crate) struct Handshake {
    tls: Option<Arc<ServerTls>>,
    failed: TlsFailures,
}

impl Handshake {
    pub(crate) fn new(tls: Option<Arc<ServerTls>>, failed: TlsFailures) -> Self {
        Handshake { tls, failed }
    }

    /// Whether connections speak TLS: then nothing is written to one in
    /// the clear, not even a refusal.
    pub(crate) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The connection, after its handshake when the listener has TLS;
    /// `None` when that failed (counted; the caller drops the connection).
    pub(crate) async fn accept<IO>(&self, io: TimedIo<IO>) -> Option<MaybeTls<TimedIo<IO>>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let Some(tls) = &self.tls else {
            return Some(MaybeTls::Plain(io));
        };
        // The config in force now: a rotation reaches the next handshake.
        let unfinished = Unfinished {
            deadline: io.head_deadline(),
            timed_out: Some(&self.failed.timeout),
        };
        let done = TlsAcceptor::from(tls.config()).accept(io).await;
        unfinished.disarm();
        match done {
            Ok(stream) => Some(MaybeTls::Tls(Box::new(stream))),
            Err(error) => {
                self.count(&error);
                debug!(%error, listener = tls.listener().label(), "TLS handshake failed");
                None
            }
        }
    }

    fn count(&self, error: &io::Error) {
        use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        let failed = &self.failed;
        let counter = match error.kind() {
            io::ErrorKind::TimedOut => &failed.timeout,
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => &failed.closed,
            _ if client_certificate(error) => &failed.client_certificate,
            _ => &failed.protocol,
        };
        counter.inc();
    }
}

/// A handshake under way. An HTTP/1 one past its deadline fails with
/// `TimedOut` and is counted from the error; a gRPC one is dropped
/// instead (the timed stream ends the connection's server, which drops
/// the handshake with it), so it is counted here when it is dropped past
/// its deadline. Dropped earlier, it ended with the listener's shutdown
/// (an HTTP/1 shutdown in the instant between the deadline and the timer
/// firing would count one timeout: harmless).
struct Unfinished<'a> {
    deadline: Option<Instant>,
    timed_out: Option<&'a prometheus::IntCounter>,
}

impl Unfinished<'_> {
    fn disarm(mut self) {
        self.timed_out = None;
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let (Some(counter), Some(deadline)) = (self.timed_out, self.deadline)
            && Instant::now() >= deadline
        {
            counter.inc();
        }
    }
}

/// Whether rustls refused the client's certificate (or its absence).
fn client_certificate(error: &io::Error) -> bool {
    let Some(rustls) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return false;
    };
    matches!(
        rustls,
        rustls::Error::NoCertificatesPresented
            | rustls::Error::InvalidCertificate(_)
            | rustls::Error::PeerIncompatible(
                rustls::PeerIncompatible::NoCertificateRequestSignatureSchemesInCommon
            )
    )
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(io) => Pin::new(io).poll_read(cx, buf),
            MaybeTls::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTls<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(io) => Pin::new(io).poll_write(cx, buf),
            MaybeTls::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(io) => io.is_write_vectored(),
            MaybeTls::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(io) => Pin::new(io).poll_flush(cx),
            MaybeTls::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(io) => Pin::new(io).poll_shutdown(cx),
            MaybeTls::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}
