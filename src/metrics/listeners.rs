//! The listeners' metrics (see [`crate::listener`]): open connections and
//! refusals per listener, connections closed by a deadline, accept
//! failures, and the HTTP/2 layer's warnings.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::family::{counter_vec, gauge_vec, registered};

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

/// TLS handshakes of one listener that failed, by why.
#[derive(Clone)]
pub struct TlsFailures {
    /// mTLS: no client certificate, or one the client CA did not sign.
    pub client_certificate: IntCounter,
    /// The client closed or reset the connection during the handshake.
    pub closed: IntCounter,
    /// No handshake within the head timeout (counted in
    /// `ratekeeper_connections_timed_out_total` too).
    pub timeout: IntCounter,
    /// Anything else: not TLS (plain HTTP to a TLS port), no common
    /// version or cipher, our certificate refused by the client.
    pub protocol: IntCounter,
}

/// One listener's connection metrics.
#[derive(Clone)]
pub struct ListenerMetrics {
    pub open: IntGauge,
    pub refused: IntCounter,
    pub accept_errors: IntCounter,
    pub timed_out: TimedOut,
    pub tls_failed: TlsFailures,
}

/// Both listeners' metrics.
pub struct Listeners {
    pub http: ListenerMetrics,
    pub grpc: ListenerMetrics,
}

impl Listeners {
    /// Every metric is labelled by `listener` (`http`, `grpc`), as the
    /// caps and deadlines are set per listener.
    pub fn register(registry: &Registry) -> Listeners {
        let open = gauge_vec(
            registry,
            "ratekeeper_connections",
            "Open client connections, by listener: http (server.max_connections bounds it, \
             plus the 16 kept for probes), grpc (grpc.max_connections bounds it).",
            &["listener"],
        );
        let refused = counter_vec(
            registry,
            "ratekeeper_connections_refused_total",
            "Connections closed at once because the listener's cap was reached, by listener: \
             http (server.max_connections open and the probe reserve full: a canned 503), grpc \
             (grpc.max_connections open: an HTTP/2 GOAWAY, ENHANCE_YOUR_CALM).",
            &["listener"],
        );
        let timed_out = counter_vec(
            registry,
            "ratekeeper_connections_timed_out_total",
            "Connections closed because a deadline passed, by listener (http, grpc) and timeout: head (no request head within server.header_read_timeout; gRPC: no call within grpc.handshake_timeout), idle (server.keepalive_timeout; grpc.idle_timeout), write (the client read nothing of a response for server.write_timeout; gRPC: 10 s).",
            &["listener", "timeout"],
        );
        let accept_errors = counter_vec(
            registry,
            "ratekeeper_accept_errors_total",
            "Failures to accept a connection, by listener (http, grpc), other than a client's reset: mostly running out of file descriptors (EMFILE). Each pauses that listener's accepting for 50 ms.",
            &["listener"],
        );
        let tls_failed = counter_vec(
            registry,
            "ratekeeper_tls_handshake_failures_total",
            "TLS handshakes that failed on a listener with TLS ([server.tls], [grpc.tls]), by listener (http, grpc) and reason: client_certificate (mTLS: none, or not signed by client_ca_file), closed (the client hung up), timeout (no handshake within the head timeout), protocol (anything else: plaintext to a TLS port, no common version or cipher, our certificate refused).",
            &["listener", "reason"],
        );
        let families = Families {
            open,
            refused,
            timed_out,
            accept_errors,
            tls_failed,
        };
        let of = |listener: &str| families.of(listener);
        Listeners {
            http: of("http"),
            grpc: of("grpc"),
        }
    }
}

/// The families every listener has its handles in.
struct Families {
    open: IntGaugeVec,
    refused: IntCounterVec,
    timed_out: IntCounterVec,
    accept_errors: IntCounterVec,
    tls_failed: IntCounterVec,
}

impl Families {
    /// The handles of `listener` in each family.
    fn of(&self, listener: &str) -> ListenerMetrics {
        let timed_out = |timeout| self.timed_out.with_label_values(&[listener, timeout]);
        let tls = |reason| self.tls_failed.with_label_values(&[listener, reason]);
        ListenerMetrics {
            open: self.open.with_label_values(&[listener]),
            refused: self.refused.with_label_values(&[listener]),
            accept_errors: self.accept_errors.with_label_values(&[listener]),
            timed_out: TimedOut {
                head: timed_out("head"),
                idle: timed_out("idle"),
                write: timed_out("write"),
            },
            tls_failed: TlsFailures {
                client_certificate: tls("client_certificate"),
                closed: tls("closed"),
                timeout: tls("timeout"),
                protocol: tls("protocol"),
            },
        }
    }
}

/// Registers `ratekeeper_http2_warnings_total`, read at each scrape from
/// `read`: the count the log layer keeps (`telemetry::http2_warnings`),
/// which exists before any metrics do. Passed in by the app, so these
/// metrics import nothing above the domain.
pub(super) fn register_http2_warnings(registry: &Registry, read: fn() -> u64) {
    registered(registry, Http2Warnings::new(read));
}

/// `ratekeeper_http2_warnings_total`: a count read at each scrape.
#[derive(Clone)]
struct Http2Warnings {
    /// Only for its description: each scrape reports a fresh counter set to
    /// the count, so two scrapes at once cannot add the same difference.
    counter: IntCounter,
    read: fn() -> u64,
}

const HTTP2_WARNINGS: &str = "ratekeeper_http2_warnings_total";
const HTTP2_WARNINGS_HELP: &str = "Warnings of the HTTP/2 layer (the h2 crate; only the gRPC listener speaks HTTP/2), nearly all about a client over a limit: too many reset streams (rapid reset), too many locally reset streams. Counted whether or not the line reached the log, which takes at most one per 10 s.";

impl Http2Warnings {
    fn new(read: fn() -> u64) -> Self {
        Http2Warnings {
            counter: IntCounter::new(HTTP2_WARNINGS, HTTP2_WARNINGS_HELP).expect("valid metric"),
            read,
        }
    }
}

impl Collector for Http2Warnings {
    fn desc(&self) -> Vec<&Desc> {
        self.counter.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = IntCounter::new(HTTP2_WARNINGS, HTTP2_WARNINGS_HELP).expect("valid metric");
        now.inc_by((self.read)());
        now.collect()
    }
}
