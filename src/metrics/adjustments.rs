//! Resets, refunds, settles, and a lease's releases and renewals, by
//! result (see `limiter::adjust`).

use prometheus::{IntCounterVec, Registry};

use super::family::counter_vec;
use crate::store::OpKind;

/// The operations counted here, by their `op` label ([`OpKind::name`]),
/// each exported at 0 for both results from the start: every one a
/// client asks for but a check (counted as a decision), so not a
/// give-back either (leasing's own, counted in `ratekeeper_lease_*`).
fn counted() -> impl Iterator<Item = OpKind> {
    OpKind::ALL
        .into_iter()
        .filter(|kind| !matches!(kind, OpKind::Check | OpKind::GiveBack { .. }))
}

pub struct AdjustmentMetrics {
    /// `ratekeeper_adjustments_total{op, result}`.
    adjustments: IntCounterVec,
}

impl AdjustmentMetrics {
    pub fn register(registry: &Registry) -> AdjustmentMetrics {
        let ops: Vec<&str> = counted().map(OpKind::name).collect();
        let help = format!(
            "Resets, refunds, settles and a lease's releases and renewals (op: {}) by result: ok, or error (the store could not apply it; answered 503 or 500).",
            ops.join("|")
        );
        let adjustments = counter_vec(
            registry,
            "ratekeeper_adjustments_total",
            &help,
            &["op", "result"],
        );
        for op in counted() {
            for result in ["ok", "error"] {
                adjustments.with_label_values(&[op.name(), result]);
            }
        }
        AdjustmentMetrics { adjustments }
    }

    /// Counts one adjustment, `ok` whether the store applied it.
    pub fn record(&self, op: OpKind, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.adjustments
            .with_label_values(&[op.name(), result])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series the alerts and dashboards read: every adjustment's `op`
    /// value exported at 0 for both results, the five from before `OpKind`
    /// named them among them, spelt as they were, and no check or give-back.
    #[test]
    fn the_op_labels_are_the_adjustments_exported_at_zero() {
        let registry = Registry::new();
        let metrics = AdjustmentMetrics::register(&registry);
        metrics.record(OpKind::Reset, false);
        let mut series: Vec<(String, String, u64)> = registry
            .gather()
            .iter()
            .flat_map(|family| family.get_metric())
            .map(|m| {
                let label = |name: &str| {
                    let pair = m.get_label().iter().find(|l| l.name() == name);
                    pair.map(|l| l.value().to_string()).unwrap_or_default()
                };
                let value = m.get_counter().get_value() as u64;
                (label("op"), label("result"), value)
            })
            .collect();
        series.sort();
        let mut ops: Vec<&str> = counted().map(OpKind::name).collect();
        for op in ["refund", "release", "renew", "reset", "settle"] {
            assert!(ops.contains(&op), "{op}");
        }
        assert!(!ops.contains(&"check") && !ops.contains(&"give_back"));
        ops.sort();
        let mut expected = Vec::new();
        for op in ops {
            for result in ["error", "ok"] {
                let value = u64::from(op == "reset" && result == "error");
                expected.push((op.to_string(), result.to_string(), value));
            }
        }
        assert_eq!(series, expected);
    }
}
