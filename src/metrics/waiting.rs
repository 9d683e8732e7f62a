//! Checks that wait for their `retry_after` (`wait_ms`; see
//! `limiter::wait`): how many wait now, how many could not, how long the
//! ones that did took.

use prometheus::{Histogram, IntCounter, IntGauge, Registry};

use super::family::{counter, gauge, histogram};

/// Waits run from a few milliseconds to `limits.max_wait` (10 s by default).
const WAIT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

pub struct WaitMetrics {
    /// Checks waiting for their retry now.
    pub waiters: IntGauge,
    /// Checks that asked to wait but were answered at once because
    /// `limits.max_waiters` were waiting.
    pub rejected: IntCounter,
    /// How long checks that waited took, waiting included.
    pub duration: Histogram,
}

impl WaitMetrics {
    pub fn register(registry: &Registry) -> WaitMetrics {
        WaitMetrics {
            waiters: gauge(
                registry,
                "ratekeeper_waiters",
                "Checks waiting for their retry_after (wait_ms) now; limits.max_waiters bounds it.",
            ),
            rejected: counter(
                registry,
                "ratekeeper_wait_rejected_total",
                "Checks that asked to wait (wait_ms) but were answered at once because limits.max_waiters (or limits.max_waiters_per_key on their key) were waiting, or the server was draining.",
            ),
            duration: histogram(
                registry,
                "ratekeeper_wait_duration_seconds",
                "Time to answer a check that waited in line (wait_ms), waiting included.",
                WAIT_BUCKETS,
            ),
        }
    }
}
