//! Recording what happened: decisions, degraded answers, breakers,
//! adjustments, backend errors, authentication; and rendering.

use prometheus::{Encoder, TextEncoder};

use super::{AuthFailure, Metrics, POSITIONS};
use crate::domain::{Check, Decision, FailureMode};
use crate::limiter::breaker::State as BreakerState;

impl Metrics {
    /// Counts a request refused by bearer authentication.
    pub fn record_auth_failure(&self, reason: AuthFailure) {
        self.auth_failures[reason as usize].inc();
    }

    /// The tokens in force, per scope (counts only, never a token).
    pub fn set_tokens_loaded(&self, check: usize, admin: usize) {
        self.auth_tokens[0].set(check as i64);
        self.auth_tokens[1].set(admin as i64);
    }

    /// Counts one check. Every label is bounded: policy and limit names
    /// come from the policies file, inline checks are `policy="inline"`
    /// with the limit's position (their names come from clients), never a
    /// client key.
    pub fn record_decision(&self, check: &Check, decision: &Decision) {
        let denied = decision.limits.iter().any(|l| !l.allowed);
        let index = decision.deciding();
        const OUTCOMES: [&str; 3] = ["allowed", "denied", "shadow_denied"];
        let outcome = match (denied, decision.shadow) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        };
        let limit = &check.limits[index];
        let algorithm = limit.rule.algorithm;
        match &check.policy {
            Some(policy) => self
                .checks
                .with_label_values(&[
                    policy.as_ref(),
                    limit.name.as_ref(),
                    algorithm.as_str(),
                    OUTCOMES[outcome],
                ])
                .inc(),
            None => {
                let position = index.min(POSITIONS.len() - 1);
                self.inline_checks[position][algorithm.index()][outcome]
                    .get_or_init(|| {
                        self.checks.with_label_values(&[
                            "inline",
                            POSITIONS[position],
                            algorithm.as_str(),
                            OUTCOMES[outcome],
                        ])
                    })
                    .inc()
            }
        }
    }

    pub fn record_degraded(&self, mode: FailureMode) {
        self.degraded[mode as usize].inc();
    }

    /// A breaker moved from `from` to `to` (`from` is `None` for a new one).
    pub fn record_breaker(&self, from: Option<BreakerState>, to: BreakerState) {
        if let Some(from) = from {
            self.breaker_state[from as usize].dec();
        }
        self.breaker_state[to as usize].inc();
        if to == BreakerState::Open {
            self.breaker_opened.inc();
        }
    }

    /// A breaker in `state` was dropped with its limiter.
    pub fn forget_breaker(&self, state: BreakerState) {
        self.breaker_state[state as usize].dec();
    }

    /// Counts one reset, refund, settle, release or renewal; `op` is its
    /// name.
    pub fn record_adjustment(&self, op: &'static str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.adjustments.with_label_values(&[op, result]).inc();
    }

    pub fn record_store_error(&self, kind: &str) {
        self.store_errors.with_label_values(&[kind]).inc();
    }

    /// Brings `ratekeeper_store_evictions_total` up to the store's own
    /// count. Under a lock: two scrapes at once would otherwise both add
    /// the same difference.
    pub fn sync_store_evictions(&self, total: u64) {
        self.sync_counter(&self.store_evictions, total);
    }

    /// Brings `ratekeeper_redis_connections_replaced_total` up to the
    /// store's own count.
    pub fn sync_connections_replaced(&self, total: u64) {
        self.sync_counter(&self.redis_connections_replaced, total);
    }

    /// Brings `ratekeeper_redis_check_calls_total` up to the store's own
    /// count.
    pub fn sync_redis_check_calls(&self, total: u64) {
        self.sync_counter(&self.redis_check_calls, total);
    }

    fn sync_counter(&self, counter: &prometheus::IntCounter, total: u64) {
        let _one_at_a_time = self
            .store_counters_sync
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        counter.inc_by(total.saturating_sub(counter.get()));
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .expect("encoding to a Vec cannot fail");
        String::from_utf8(buffer).expect("the text format is UTF-8")
    }
}
