//! The store: its errors by kind, the time of a call, whether it answers,
//! and what the embedded store holds (set when `/metrics` is read).

use prometheus::{Histogram, IntCounterVec, IntGauge, Registry};

use super::family::{LATENCY_BUCKETS, SyncedCounter, counter_vec, gauge, histogram};
use crate::store::StoreError;

pub struct StoreMetrics {
    /// `ratekeeper_store_errors_total{kind}`, every kind at 0 from the start.
    pub(super) errors: IntCounterVec,
    /// One store call.
    pub duration: Histogram,
    /// 1 while the store answers, 0 while the failure policy answers.
    pub up: IntGauge,
    /// Keys the embedded store holds.
    pub keys: IntGauge,
    pub leases: IntGauge,
    /// Reservations the embedded store holds.
    pub reservations: IntGauge,
    /// Keys the embedded store evicted before their reset.
    pub evictions: SyncedCounter,
}

impl StoreMetrics {
    pub fn register(registry: &Registry) -> StoreMetrics {
        let errors = counter_vec(
            registry,
            "ratekeeper_store_errors_total",
            "Store errors by kind: timeout, unavailable (connection or server not ready), auth (credentials or permissions refused), backend (script or reply error).",
            &["kind"],
        );
        for kind in StoreError::KINDS {
            errors.with_label_values(&[kind]);
        }
        StoreMetrics {
            errors,
            duration: histogram(
                registry,
                "ratekeeper_store_duration_seconds",
                "Time of one store call (the Redis round trip, or the in-memory decision).",
                LATENCY_BUCKETS,
            ),
            up: gauge(
                registry,
                "ratekeeper_store_up",
                "1 while the store answers checks (ready), 0 while degraded.",
            ),
            keys: gauge(
                registry,
                "ratekeeper_store_keys",
                "Keys holding state in the embedded store (memory.max_keys bounds it); 0 with Redis.",
            ),
            leases: gauge(
                registry,
                "ratekeeper_store_leases",
                "Concurrency leases the embedded store's keys hold, expired ones not yet trimmed \
                 included; each counts against memory.max_keys like a key. 0 with Redis.",
            ),
            reservations: gauge(
                registry,
                "ratekeeper_store_reservations",
                "Reservations (checks with reservation_ttl, until settled or expired) the embedded \
                 store holds, expired ones until swept (within memory.max_keys); 0 with Redis, \
                 where each is a key.",
            ),
            evictions: SyncedCounter::register(
                registry,
                "ratekeeper_store_evictions_total",
                "Keys the embedded store evicted before their reset because it held memory.max_keys (nearest reset first).",
            ),
        }
    }

    /// Counts `error` by its kind.
    pub fn record_error(&self, error: &StoreError) {
        self.errors.with_label_values(&[error.kind()]).inc();
    }
}

#[cfg(test)]
mod tests {
    use crate::store::StoreError;

    #[test]
    fn every_kind_of_store_error_is_exported() {
        let errors = [
            StoreError::Timeout("t".into()),
            StoreError::Unavailable("u".into()),
            StoreError::Auth("a".into()),
            StoreError::Backend("b".into()),
            StoreError::Overloaded("o".into()),
            StoreError::Tls("s".into()),
        ];
        let kinds: Vec<&str> = errors.iter().map(StoreError::kind).collect();
        assert_eq!(kinds, StoreError::KINDS);
    }
}
