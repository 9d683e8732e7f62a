//! The process's own series: `ratekeeper_build_info` and, on Linux, the
//! `process_*` family; and the conventions every family follows, tested.

use prometheus::Registry;

use super::family::gauge_vec;

/// Registers `ratekeeper_build_info{version, revision}`, always 1: joined
/// on `instance` to see which build each instance runs. The revision is
/// the git commit the binary was built from, or `unknown` (see
/// `build.rs`). Then the process collector (CPU, memory, open files).
pub(super) fn register_process(registry: &Registry) {
    let info = gauge_vec(
        registry,
        "ratekeeper_build_info",
        "Always 1; the labels say which build this is: version (Cargo.toml) and \
         revision (the git commit, or unknown).",
        &["version", "revision"],
    );
    info.with_label_values(&[env!("CARGO_PKG_VERSION"), env!("RATEKEEPER_REVISION")])
        .set(1);
    #[cfg(target_os = "linux")]
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("process metrics register once");
}

#[cfg(test)]
mod conventions {
    //! The naming review, kept: Prometheus's conventions for every family
    //! this registry exports, and one vocabulary of label names.
    use prometheus::proto::MetricType;

    use crate::metrics::Metrics;

    /// Every label name in use. A new one is a decision: reuse one of
    /// these when it means the same thing.
    const LABELS: [&str; 19] = [
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
        // Where a leased unit went (ratekeeper_lease_units_total), what became
        // of a span (ratekeeper_trace_spans_total).
        "outcome",
        // What an operator did to a runtime entry (ratekeeper_tenant_changes_total).
        "action",
    ];

    #[test]
    fn every_family_follows_the_conventions() {
        let metrics = Metrics::new();
        metrics.count_http2_warnings(|| 0);
        metrics.count_trace_spans(|| [0; 3]);
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
