//! Resets, refunds, settles, and a lease's releases and renewals, by
//! result (see `limiter::adjust`).

use prometheus::{IntCounterVec, Registry};

use super::family::counter_vec;

/// The `op` label: what `limiter::Adjustment::as_str` answers. Each is
/// exported at 0 for both results from the start.
const OPS: [&str; 5] = ["reset", "refund", "settle", "release", "renew"];

pub struct AdjustmentMetrics {
    /// `ratekeeper_adjustments_total{op, result}`.
    adjustments: IntCounterVec,
}

impl AdjustmentMetrics {
    pub fn register(registry: &Registry) -> AdjustmentMetrics {
        let adjustments = counter_vec(
            registry,
            "ratekeeper_adjustments_total",
            "Resets, refunds, settles and a lease's releases and renewals (op: reset|refund|settle|release|renew) by result: ok, or error (the store could not apply it; answered 503 or 500).",
            &["op", "result"],
        );
        for op in OPS {
            for result in ["ok", "error"] {
                adjustments.with_label_values(&[op, result]);
            }
        }
        AdjustmentMetrics { adjustments }
    }

    /// Counts one adjustment: `op` is `Adjustment::as_str`, `ok` whether the
    /// store applied it.
    pub fn record(&self, op: &'static str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.adjustments.with_label_values(&[op, result]).inc();
    }
}
