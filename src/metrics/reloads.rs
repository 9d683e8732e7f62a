//! Loads of the watched files: the policies file, `rls.config` and
//! `auth.tokens_file`, and the TLS files (`[redis.tls]`, `[server.tls]`, `[grpc.tls]`). One pair
//! of metrics with a `file` label, so one query or alert covers all and a new file is one more label.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::{Gauge, IntCounter, Registry};

use super::family::{counter_vec, float_gauge_vec};

/// One watched file's load counts and the time of its last good load.
#[derive(Clone)]
pub struct ReloadMetrics {
    /// `ratekeeper_reloads_total{file, result="ok"}`.
    pub ok: IntCounter,
    /// `ratekeeper_reloads_total{file, result="error"}`.
    pub error: IntCounter,
    /// `ratekeeper_last_reload_timestamp_seconds{file}`.
    pub last: Gauge,
}

impl ReloadMetrics {
    /// A good load, made at `at`: counted, and its time kept.
    pub fn loaded(&self, at: SystemTime) {
        self.ok.inc();
        self.last.set(
            at.duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        );
    }
}

/// A hot file counts its loads here.
impl crate::watch::hot::CountLoads for ReloadMetrics {
    fn loaded(&self, at: SystemTime) {
        ReloadMetrics::loaded(self, at);
    }

    fn failed(&self) {
        self.error.inc();
    }
}

/// The watched files' metrics.
pub struct Reloads {
    pub policies: ReloadMetrics,
    pub rls: ReloadMetrics,
    pub tokens: ReloadMetrics,
    /// The `[redis.tls]` files, as one.
    pub tls: ReloadMetrics,
    /// The `[server.tls]` files, as one.
    pub server_tls: ReloadMetrics,
    /// The `[grpc.tls]` files, as one.
    pub grpc_tls: ReloadMetrics,
}

/// The `file` label of each watched file.
pub const FILES: [&str; 6] = ["policies", "rls", "tokens", "tls", "server_tls", "grpc_tls"];

impl Reloads {
    pub fn register(registry: &Registry) -> Reloads {
        let loads = counter_vec(
            registry,
            "ratekeeper_reloads_total",
            "Loads of a watched file (the first at startup counts), by file (policies: the \
             policies file; rls: rls.config; tokens: auth.tokens_file; tls: the [redis.tls] files; server_tls, grpc_tls: the [server.tls] and [grpc.tls] files) and result: ok, or error \
             (the new version was rejected whole and the one in force stayed).",
            &["file", "result"],
        );
        let last = float_gauge_vec(
            registry,
            "ratekeeper_last_reload_timestamp_seconds",
            "Unix time of the last good load of a watched file, by file (policies, rls, \
             tokens, tls); 0 before any.",
            &["file"],
        );
        let of = |file: &str| ReloadMetrics {
            ok: loads.with_label_values(&[file, "ok"]),
            error: loads.with_label_values(&[file, "error"]),
            last: last.with_label_values(&[file]),
        };
        let [policies, rls, tokens, tls, server_tls, grpc_tls] = FILES.map(of);
        Reloads {
            policies,
            rls,
            tokens,
            tls,
            server_tls,
            grpc_tls,
        }
    }
}
