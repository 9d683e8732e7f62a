//! Series that exist before their first event. A dashboard or alert that
//! divides or rates a series which is absent, rather than 0, shows "no
//! data" exactly when an operator is looking (before the first error, the
//! first reset, the first denial of a new policy).

use prometheus::IntGaugeVec;

use super::Metrics;
use crate::domain::PolicySet;

/// The kinds `ratekeeper_store_errors_total` counts (`StoreError::kind`).
const STORE_ERROR_KINDS: [&str; 6] = [
    "timeout",
    "unavailable",
    "auth",
    "backend",
    "overloaded",
    "tls",
];

/// `ratekeeper_build_info{version, revision}`, always 1: joined on
/// `instance` to see which build each instance runs. The revision is the
/// git commit the binary was built from, or `unknown` (see `build.rs`).
pub(super) fn build_info() -> IntGaugeVec {
    let info = IntGaugeVec::new(
        prometheus::Opts::new(
            "ratekeeper_build_info",
            "Always 1; the labels say which build this is: version (Cargo.toml) and \
             revision (the git commit, or unknown).",
        ),
        &["version", "revision"],
    )
    .expect("valid metric");
    info.with_label_values(&[env!("CARGO_PKG_VERSION"), env!("RATEKEEPER_REVISION")])
        .set(1);
    info
}

impl Metrics {
    /// Every store error kind and every reset/refund/settle outcome, at 0.
    pub(super) fn zero_fixed_series(&self) {
        for kind in STORE_ERROR_KINDS {
            self.store_errors.with_label_values(&[kind]);
        }
        for op in ["reset", "refund", "settle", "release", "renew"] {
            for result in ["ok", "error"] {
                self.adjustments.with_label_values(&[op, result]);
            }
        }
    }

    /// The decisions each limit of `set` can make, at 0: allowed and denied,
    /// or allowed and shadow_denied for a shadow policy. Overrides count
    /// too, as they may change a limit's algorithm. Series of policies no
    /// longer in the file stay until restart: they keep the counts already
    /// made.
    pub fn policy_series(&self, set: &PolicySet) {
        for policy in set.iter() {
            let denied = if policy.shadow {
                "shadow_denied"
            } else {
                "denied"
            };
            let limits = std::iter::once(&policy.limits).chain(policy.overrides.values());
            for limit in limits.flat_map(|l| l.iter()) {
                for decision in ["allowed", denied] {
                    self.checks.with_label_values(&[
                        policy.name.as_ref(),
                        limit.name.as_ref(),
                        limit.rule.algorithm.as_str(),
                        decision,
                    ]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_error_kinds_are_the_stores() {
        use crate::store::StoreError;
        let errors = [
            StoreError::Timeout("t".into()),
            StoreError::Unavailable("u".into()),
            StoreError::Auth("a".into()),
            StoreError::Backend("b".into()),
            StoreError::Overloaded("o".into()),
            StoreError::Tls("s".into()),
        ];
        let kinds: Vec<&str> = errors.iter().map(StoreError::kind).collect();
        assert_eq!(kinds, STORE_ERROR_KINDS);
    }
}

#[cfg(test)]
mod conventions {
    //! The naming review, kept: Prometheus's conventions for every family
    //! this registry exports, and one vocabulary of label names.
    use prometheus::proto::MetricType;

    use super::Metrics;

    /// Every label name in use. A new one is a decision: reuse one of
    /// these when it means the same thing.
    const LABELS: [&str; 18] = [
        "policy",
        "limit",
        "algorithm",
        "decision",
        "failure_mode",
        "kind",
        "op",
        "result",
        "state",
        "listener",
        "timeout",
        "reason",
        "scope",
        "file",
        "code",
        "version",
        "revision",
        // Where a leased unit went (ratekeeper_lease_units_total).
        "outcome",
    ];

    #[test]
    fn every_family_follows_the_conventions() {
        let metrics = Metrics::new();
        let families = metrics.registry.gather();
        assert!(families.len() > 30, "{} families", families.len());
        for family in &families {
            let name = family.name();
            if name.starts_with("process_") {
                continue;
            }
            assert!(
                name.starts_with("ratekeeper_"),
                "{name}: no ratekeeper_ prefix"
            );
            let help = family.help();
            assert!(
                help.len() > 20 && help.ends_with('.'),
                "{name}: the help must say what is counted, as a sentence: {help:?}"
            );
            match family.get_field_type() {
                MetricType::COUNTER => {
                    assert!(name.ends_with("_total"), "{name}: a counter ends in _total")
                }
                MetricType::HISTOGRAM => assert!(
                    name.ends_with("_seconds") || name.ends_with("_bytes"),
                    "{name}: a histogram is in base units"
                ),
                _ => assert!(!name.ends_with("_total"), "{name}: _total is for counters"),
            }
            for metric in family.get_metric() {
                for label in metric.get_label() {
                    assert!(
                        LABELS.contains(&label.name()),
                        "{name}: label {:?} is not in the vocabulary",
                        label.name()
                    );
                }
            }
        }
    }
}
