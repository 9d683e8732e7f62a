//! Hot-key leasing (`limiter::lease`): where leased units went, the
//! reservations, and the table's size against its cap.

use prometheus::{IntCounter, IntGauge, Registry};

use super::family::{counter, counter_vec, gauge};

/// The resolved handles.
pub struct LeaseMetrics {
    /// `ratekeeper_lease_units_total{outcome}`, one handle per outcome.
    pub reserved: IntCounter,
    pub answered: IntCounter,
    pub given_back: IntCounter,
    pub lapsed: IntCounter,
    pub dropped: IntCounter,
    pub give_back_failed: IntCounter,
    /// `ratekeeper_lease_reservations_total{result}`.
    pub granted: IntCounter,
    pub denied: IntCounter,
    pub failed: IntCounter,
    /// `ratekeeper_lease_keys`.
    pub keys: IntGauge,
    /// `ratekeeper_lease_table_full_total`.
    pub table_full: IntCounter,
}

impl LeaseMetrics {
    pub fn register(registry: &Registry) -> LeaseMetrics {
        let units = counter_vec(
            registry,
            "ratekeeper_lease_units_total",
            "Units of hot keys' leased chunks, by outcome: reserved (taken in the store for \
             a chunk), answered (handed out from a chunk, without the store), given_back \
             (unused, returned at the chunk's TTL, when the key cooled, or at shutdown), \
             lapsed (unused when the chunk's window ended: they went with it), dropped \
             (unused when a reset or refund of the key, or a lost invalidation channel, \
             voided the chunk), give_back_failed (the store did not take the give-back; \
             they lapse with their window).",
            &["outcome"],
        );
        let reservations = counter_vec(
            registry,
            "ratekeeper_lease_reservations_total",
            "Reservations of a chunk for a hot key, by result: granted, denied (the key had \
             too little left: the check was asked in the store as usual), error (the store \
             did not answer).",
            &["result"],
        );
        let unit = |outcome: &str| units.with_label_values(&[outcome]);
        let result = |r: &str| reservations.with_label_values(&[r]);
        LeaseMetrics {
            reserved: unit("reserved"),
            answered: unit("answered"),
            given_back: unit("given_back"),
            lapsed: unit("lapsed"),
            dropped: unit("dropped"),
            give_back_failed: unit("give_back_failed"),
            granted: result("granted"),
            denied: result("denied"),
            failed: result("error"),
            keys: gauge(
                registry,
                "ratekeeper_lease_keys",
                "(policy, key) pairs of leasing policies whose rate this instance tracks; \
                 limits.max_lease_keys bounds it.",
            ),
            table_full: counter(
                registry,
                "ratekeeper_lease_table_full_total",
                "Checks of a leasing policy not tracked because limits.max_lease_keys pairs were: \
                 asked in the store as usual.",
            ),
        }
    }
}
