//! The runtime overrides, blocks and exemptions (see [`crate::tenants`]).

use prometheus::{IntCounter, IntGauge, Registry};

use super::family::{counter, counter_vec, gauge, gauge_vec};
use crate::domain::tenants::Kind;

/// What an audited change did: the bounded `action` label.
pub const ACTIONS: [&str; 9] = [
    "override.set",
    "override.delete",
    "override.expire",
    "block.set",
    "block.delete",
    "block.expire",
    "exemption.set",
    "exemption.delete",
    "exemption.expire",
];

/// The tenants metrics' resolved handles.
pub struct TenantMetrics {
    /// `ratekeeper_tenant_entries{kind}`, in [`Kind::ALL`]'s order.
    entries: [IntGauge; 3],
    /// `ratekeeper_tenant_entries_max`: the cap, for the alert's ratio.
    pub max_entries: IntGauge,
    /// `ratekeeper_tenant_entries_stale`.
    pub stale: IntGauge,
    /// `ratekeeper_tenant_version`.
    pub version: IntGauge,
    /// `ratekeeper_tenant_changes_total{action}`, in [`ACTIONS`]' order.
    changes: [IntCounter; ACTIONS.len()],
    /// `ratekeeper_tenant_sync_errors_total`.
    pub sync_errors: IntCounter,
}

impl TenantMetrics {
    pub fn register(registry: &Registry) -> TenantMetrics {
        let entries = gauge_vec(
            registry,
            "ratekeeper_tenant_entries",
            "Runtime overrides, blocks and exemptions this instance holds, by kind (override, block, exemption), expired ones not yet swept included.",
            &["kind"],
        );
        let changes = counter_vec(
            registry,
            "ratekeeper_tenant_changes_total",
            "Changes to runtime overrides, blocks and exemptions made through this instance, by action (<kind>.set, <kind>.delete, <kind>.expire).",
            &["action"],
        );
        TenantMetrics {
            entries: Kind::ALL.map(|k| entries.with_label_values(&[k.as_str()])),
            max_entries: gauge(
                registry,
                "ratekeeper_tenant_entries_max",
                "tenants.max_entries: the most runtime overrides, blocks and exemptions in all (the alert's denominator).",
            ),
            stale: gauge(
                registry,
                "ratekeeper_tenant_entries_stale",
                "Runtime overrides that no longer fit the policies in force (a limit or policy gone from the file): kept, applied nowhere.",
            ),
            version: gauge(
                registry,
                "ratekeeper_tenant_version",
                "The version of the runtime entries this instance applies: the store's change counter. Equal on every instance once a change has reached them all.",
            ),
            changes: ACTIONS.map(|a| changes.with_label_values(&[a])),
            sync_errors: counter(
                registry,
                "ratekeeper_tenant_sync_errors_total",
                "Failed reads of the runtime entries from the store (the poll that catches changes up): the view in force stays.",
            ),
        }
    }

    /// The entries held, per kind.
    pub fn set_counts(&self, counts: [usize; 3]) {
        for (gauge, n) in self.entries.iter().zip(counts) {
            gauge.set(n as i64);
        }
    }

    /// Counts one change by its action (`override.set`).
    pub fn changed(&self, action: &str) {
        if let Some(i) = ACTIONS.iter().position(|a| *a == action) {
            self.changes[i].inc();
        }
    }
}
