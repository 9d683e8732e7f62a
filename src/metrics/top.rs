//! The heavy-hitters sketches of `GET /v1/top` (see `limiter::top`).

use prometheus::{IntGauge, Registry};

use super::family::gauge;

pub struct TopMetrics {
    /// Bytes the sketches hold (set when `/metrics` is read).
    pub memory: IntGauge,
}

impl TopMetrics {
    pub fn register(registry: &Registry) -> TopMetrics {
        TopMetrics {
            memory: gauge(
                registry,
                "ratekeeper_top_memory_bytes",
                "Bytes the heavy-hitters sketches of GET /v1/top hold (their counters and keys); \
                 top.capacity and top.max_sets bound it.",
            ),
        }
    }
}
