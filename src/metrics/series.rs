//! Series that exist before their first event. A dashboard or alert that
//! divides or rates a series which is absent, rather than 0, shows "no
//! data" exactly when an operator is looking (before the first error, the
//! first reset, the first denial of a new policy).

use prometheus::IntGaugeVec;

use super::Metrics;
use crate::domain::PolicySet;

/// The kinds `ratekeeper_backend_errors_total` counts (`StoreError::kind`).
const STORE_ERROR_KINDS: [&str; 4] = ["timeout", "unavailable", "auth", "backend"];

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
    /// Every store error kind and every reset/refund outcome, at 0.
    pub(super) fn zero_fixed_series(&self) {
        for kind in STORE_ERROR_KINDS {
            self.backend_errors.with_label_values(&[kind]);
        }
        for op in ["reset", "refund"] {
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
        ];
        let kinds: Vec<&str> = errors.iter().map(StoreError::kind).collect();
        assert_eq!(kinds, STORE_ERROR_KINDS);
    }
}
