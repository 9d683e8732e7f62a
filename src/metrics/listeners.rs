//! The listeners' metrics (see [`crate::listener`]): open connections and
//! refusals per listener, connections closed by a deadline, accept
//! failures, and the HTTP/2 layer's warnings.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use super::auth::Collectors;

/// Connections of one listener closed because a deadline passed.
#[derive(Clone)]
pub struct TimedOut {
    /// No request head (HTTP), no first call (gRPC) in time.
    pub head: IntCounter,
    /// Idle past the keep-alive (HTTP) or idle (gRPC) timeout.
    pub idle: IntCounter,
    /// The client read nothing of a response for the write timeout.
    pub write: IntCounter,
}

/// One listener's connection metrics.
#[derive(Clone)]
pub struct ListenerMetrics {
    pub open: IntGauge,
    pub refused: IntCounter,
    pub accept_errors: IntCounter,
    pub timed_out: TimedOut,
}

/// Both listeners' metrics.
pub struct Listeners {
    pub http: ListenerMetrics,
    pub grpc: ListenerMetrics,
}

/// The listeners' collectors to register, and their handles. Every
/// metric is labelled by `listener` (`http`, `grpc`), as the caps and
/// deadlines are set per listener.
pub(super) fn listener_metrics() -> (Collectors, Listeners) {
    let open = IntGaugeVec::new(
        Opts::new(
            "ratekeeper_connections",
            "Open client connections, by listener: http (server.max_connections bounds it, \
             plus the 16 kept for probes), grpc (grpc.max_connections bounds it).",
        ),
        &["listener"],
    )
    .expect("valid metric");
    let refused = IntCounterVec::new(
        Opts::new(
            "ratekeeper_connections_refused_total",
            "Connections closed at once because the listener's cap was reached, by listener: \
             http (server.max_connections open and the probe reserve full: a canned 503), grpc \
             (grpc.max_connections open: an HTTP/2 GOAWAY, ENHANCE_YOUR_CALM).",
        ),
        &["listener"],
    )
    .expect("valid metric");
    let timed_out = IntCounterVec::new(
        Opts::new(
            "ratekeeper_connections_timed_out_total",
            "Connections closed because a deadline passed, by listener (http, grpc) and timeout: head (no request head within server.header_read_timeout; gRPC: no call within grpc.handshake_timeout), idle (server.keepalive_timeout; grpc.idle_timeout), write (the client read nothing of a response for server.write_timeout; gRPC: 10 s).",
        ),
        &["listener", "timeout"],
    )
    .expect("valid metric");
    let accept_errors = IntCounterVec::new(
        Opts::new(
            "ratekeeper_accept_errors_total",
            "Failures to accept a connection, by listener (http, grpc), other than a client's reset: mostly running out of file descriptors (EMFILE). Each pauses that listener's accepting for 50 ms.",
        ),
        &["listener"],
    )
    .expect("valid metric");
    let timed_out_of = |listener: &str| TimedOut {
        head: timed_out.with_label_values(&[listener, "head"]),
        idle: timed_out.with_label_values(&[listener, "idle"]),
        write: timed_out.with_label_values(&[listener, "write"]),
    };
    let listeners = Listeners {
        http: ListenerMetrics {
            open: open.with_label_values(&["http"]),
            refused: refused.with_label_values(&["http"]),
            accept_errors: accept_errors.with_label_values(&["http"]),
            timed_out: timed_out_of("http"),
        },
        grpc: ListenerMetrics {
            open: open.with_label_values(&["grpc"]),
            refused: refused.with_label_values(&["grpc"]),
            accept_errors: accept_errors.with_label_values(&["grpc"]),
            timed_out: timed_out_of("grpc"),
        },
    };
    let collectors: Collectors = vec![
        Box::new(open),
        Box::new(refused),
        Box::new(timed_out),
        Box::new(accept_errors),
        Box::new(Http2Warnings::new()),
    ];
    (collectors, listeners)
}

/// `ratekeeper_http2_warnings_total`: read at each scrape from the count
/// the log layer keeps ([`crate::telemetry::http2_warnings`]), which exists
/// before any metrics do.
struct Http2Warnings {
    /// Only for its description: each scrape reports a fresh counter set to
    /// the count, so two scrapes at once cannot add the same difference.
    counter: IntCounter,
}

const HTTP2_WARNINGS: &str = "ratekeeper_http2_warnings_total";
const HTTP2_WARNINGS_HELP: &str = "Warnings of the HTTP/2 layer (the h2 crate; only the gRPC listener speaks HTTP/2), nearly all about a client over a limit: too many reset streams (rapid reset), too many locally reset streams. Counted whether or not the line reached the log, which takes at most one per 10 s.";

impl Http2Warnings {
    fn new() -> Self {
        Http2Warnings {
            counter: IntCounter::new(HTTP2_WARNINGS, HTTP2_WARNINGS_HELP).expect("valid metric"),
        }
    }
}

impl Collector for Http2Warnings {
    fn desc(&self) -> Vec<&Desc> {
        self.counter.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = IntCounter::new(HTTP2_WARNINGS, HTTP2_WARNINGS_HELP).expect("valid metric");
        now.inc_by(crate::telemetry::http2_warnings());
        now.collect()
    }
}
