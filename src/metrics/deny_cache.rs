//! The local deny cache (see `limiter::deny_cache`).

use prometheus::{IntCounter, Registry};

use super::family::counter;

pub struct DenyCacheMetrics {
    /// Checks answered by the deny cache, without a store call.
    pub hits: IntCounter,
}

impl DenyCacheMetrics {
    pub fn register(registry: &Registry) -> DenyCacheMetrics {
        DenyCacheMetrics {
            hits: counter(
                registry,
                "ratekeeper_deny_cache_hits_total",
                "Denials answered by the local deny cache without asking the store.",
            ),
        }
    }
}
