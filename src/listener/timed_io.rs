//! A TCP stream that enforces the read deadlines of one connection, HTTP/1
//! or gRPC (HTTP/2).
//!
//! hyper 1.x has one timer, `header_read_timeout`, and it restarts as soon
//! as a connection goes idle, so an idle keep-alive connection would be cut
//! at the header timeout and a separate, longer keep-alive timeout could not
//! exist; its HTTP/2 server has no such timer at all. The stream therefore
//! keeps its own clock:
//!
//! - from the connection's start, the first request head (HTTP/1) or the
//!   first call (gRPC) must arrive within the head timeout
//!   (`server.header_read_timeout`, `grpc.handshake_timeout`);
//! - after a response, the connection may sit idle for the idle timeout
//!   (`server.keepalive_timeout`, `grpc.idle_timeout`). On HTTP/1 the first
//!   byte of the next request starts its own head timeout. On HTTP/2 bytes
//!   are not requests (pings, window updates, a preface), so only a call
//!   ends the idleness: a client cannot hold a connection with pings alone;
//! - while a request is with the router, reads have no deadline here: the
//!   body deadline is the handler's (it answers 408), and hyper closes the
//!   connection after a response whose body was left unread; a gRPC call
//!   has its own deadline in tonic.
//!
//! Writes have their own clock: a response the client does not read (a
//! slow reader, or pipelined requests whose answers pile up) fails after
//! the write timeout without progress, since hyper reads nothing more while
//! a write is stuck.
//!
//! An HTTP/1 read past its deadline fails with `TimedOut`, and hyper drops
//! the connection without answering (as nginx does for
//! `client_header_timeout`). A gRPC one first asks the server to end the
//! connection gracefully ([`Activity::ended`]: an HTTP/2 GOAWAY, so the
//! client moves to a new connection without losing a call), and fails only
//! if the connection is still open `GOAWAY_GRACE` later. Each is counted
//! once, by which deadline passed. At shutdown, a
//! connection with no request in progress is closed at once, idle or in the
//! middle of a head (nothing was promised to it yet).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::metrics::TimedOut;

/// What the router side tells the stream: whether a request is in progress,
/// and how many have finished (a change means "idle again since now").
#[derive(Default)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    finished: AtomicU64,
    /// The connection task, parked in a read while a request was in flight:
    /// woken when it finishes so the keep-alive clock starts (hyper itself
    /// may not read again until the client sends something).
    reader: Mutex<Option<Waker>>,
    /// Set at shutdown: a connection waiting for a request head is closed at
    /// once rather than when its deadline comes.
    draining: AtomicBool,
    /// gRPC: told when the connection should end, its deadline passed (the
    /// server then sends a GOAWAY) or it closed.
    ended: Notify,
}

impl Activity {
    /// Marks a request as handed to the router until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        RequestGuard(self.clone())
    }
}

impl Activity {
    pub(crate) fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Tells [`ended`](Self::ended) (now or, if nobody waits yet, later).
    pub(crate) fn end(&self) {
        self.ended.notify_one();
    }

    /// Completes once [`end`](Self::end) was called.
    pub(crate) async fn ended(&self) {
        self.ended.notified().await;
    }
}

pub(crate) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        // `finished` first: the stream reads `in_flight` after it.
        self.0.finished.fetch_add(1, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::Release);
        let reader = self.0.reader.lock().map(|mut r| r.take());
        if let Ok(Some(waker)) = reader {
            waker.wake();
        }
    }
}

/// How long a gRPC connection past its deadline has to end after its
/// GOAWAY (a client acknowledges at once) before it is closed regardless.
const GOAWAY_GRACE: Duration = Duration::from_secs(5);

/// Which protocol the stream carries: it decides what ends idleness and
/// what the timeouts are called in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Http1,
    Grpc,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub kind: Kind,
    /// For the first request head (gRPC: the first call).
    pub header: Duration,
    /// For an idle connection.
    pub keepalive: Duration,
    pub write: Duration,
}

impl Timeouts {
    /// What a passed deadline says: the setting to look at.
    fn message(&self, phase: Phase) -> &'static str {
        match (self.kind, phase) {
            (Kind::Http1, Phase::Head(_)) => {
                "request head not received within server.header_read_timeout"
            }
            (Kind::Http1, Phase::Idle(_)) => {
                "keep-alive connection idle past server.keepalive_timeout"
            }
            (Kind::Grpc, Phase::Head(_)) => "no call started within grpc.handshake_timeout",
            (Kind::Grpc, Phase::Idle(_)) => "gRPC connection idle past grpc.idle_timeout",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for (the rest of) a request head that began at this instant.
    Head(Instant),
    /// A response went out at this instant; nothing of the next request yet.
    Idle(Instant),
}

pub(crate) struct TimedIo<T> {
    inner: T,
    activity: Arc<Activity>,
    timeouts: Timeouts,
    counters: TimedOut,
    /// Set once a deadline failed the stream, so it is counted once.
    timed_out: bool,
    /// gRPC: when the server was asked to end the connection gracefully.
    ending_since: Option<Instant>,
    phase: Phase,
    seen_finished: u64,
    timer: Pin<Box<Sleep>>,
    armed_for: Instant,
    /// Armed while a write waits for the client to read; made on first need.
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl<T> TimedIo<T> {
    pub(crate) fn new(
        inner: T,
        activity: Arc<Activity>,
        timeouts: Timeouts,
        counters: TimedOut,
    ) -> Self {
        let now = Instant::now();
        let deadline = now + timeouts.header;
        TimedIo {
            inner,
            activity,
            timeouts,
            counters,
            timed_out: false,
            ending_since: None,
            phase: Phase::Head(now),
            seen_finished: 0,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            armed_for: deadline,
            write_timer: None,
        }
    }

    /// Passes a write's result through, failing a write that has made no
    /// progress for `write_timeout`.
    fn write_progress<R>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if result.is_ready() {
            self.write_timer = None;
            return result;
        }
        let write = self.timeouts.write;
        let timer = self
            .write_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(write)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.count(|c| &c.write);
                let what = match self.timeouts.kind {
                    Kind::Http1 => "client read nothing for server.write_timeout",
                    Kind::Grpc => "gRPC client read nothing of a response for 10 s",
                };
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn count(&mut self, which: impl Fn(&TimedOut) -> &prometheus::IntCounter) {
        if !self.timed_out {
            self.timed_out = true;
            which(&self.counters).inc();
        }
    }

    /// Moves to `Idle` when a request finished since the last look.
    fn observe_requests(&mut self) -> bool {
        let in_flight = self.activity.in_flight.load(Ordering::Acquire) > 0;
        let finished = self.activity.finished.load(Ordering::Acquire);
        if finished != self.seen_finished && !in_flight {
            self.seen_finished = finished;
            self.phase = Phase::Idle(Instant::now());
        }
        in_flight
    }

    /// When the request head being waited for is due; at the start, the
    /// clock a TLS handshake runs under too. `None` while idle.
    pub(crate) fn head_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Head(since) => Some(since + self.timeouts.header),
            Phase::Idle(_) => None,
        }
    }

    fn deadline(&self) -> Instant {
        if let Some(since) = self.ending_since {
            return since + GOAWAY_GRACE;
        }
        match self.phase {
            Phase::Head(since) => since + self.timeouts.header,
            Phase::Idle(since) => since + self.timeouts.keepalive,
        }
    }

    /// Ready(Err) once the current deadline has passed; otherwise registers
    /// the waker for it.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        // hyper also reads while it writes a response body, to notice a
        // closed connection; a response still going out is not idle.
        if self.activity.draining.load(Ordering::Acquire) && self.write_timer.is_none() {
            return Poll::Ready(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "shutting down: no request in progress on this connection",
            ));
        }
        // Re-arm lazily: a deadline that moved later (every request on a
        // busy keep-alive connection moves it) keeps the earlier timer, and
        // when that fires early it is re-armed to the real deadline. So a
        // steady connection touches the timer wheel about once per timeout,
        // not twice per request; only a deadline that moved earlier re-arms
        // at once.
        let mut deadline = self.deadline();
        if deadline < self.armed_for {
            self.timer.as_mut().reset(deadline);
            self.armed_for = deadline;
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            if Instant::now() >= deadline {
                let phase = self.phase;
                match phase {
                    Phase::Head(_) => self.count(|c| &c.head),
                    Phase::Idle(_) => self.count(|c| &c.idle),
                }
                if self.timeouts.kind == Kind::Grpc && self.ending_since.is_none() {
                    // A plain close would fail a call the client sends at
                    // that moment (tonic's client: its next call, always).
                    // A GOAWAY tells it to use a new connection; the close
                    // is forced only if that has not ended it in time.
                    self.ending_since = Some(Instant::now());
                    self.activity.end();
                    deadline = self.deadline();
                } else {
                    let what = self.timeouts.message(phase);
                    return Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, what));
                }
            }
            self.timer.as_mut().reset(deadline);
            self.armed_for = deadline;
        }
        Poll::Pending
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let in_flight = this.observe_requests();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let request_bytes = this.timeouts.kind == Kind::Http1;
                if request_bytes
                    && buf.filled().len() > before
                    && matches!(this.phase, Phase::Idle(_))
                {
                    this.phase = Phase::Head(Instant::now());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if in_flight => {
                if let Ok(mut reader) = this.activity.reader.lock() {
                    *reader = Some(cx.waker().clone());
                }
                // The request may have finished before the waker was stored.
                if this.observe_requests() {
                    Poll::Pending
                } else {
                    this.poll_deadline(cx).map(Err)
                }
            }
            Poll::Pending => this.poll_deadline(cx).map(Err),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.write_progress(cx, result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.write_progress(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.write_progress(cx, result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
