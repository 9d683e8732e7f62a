//! Decisions: every check counted by policy, limit, algorithm and
//! decision; the ones the failure policy answered; how long a check and a
//! batch took; the policies in force.

use std::sync::OnceLock;

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::family::{LATENCY_BUCKETS, counter_vec, gauge, gauge_vec, histogram};
use crate::domain::{Algorithm, Check, Decision, FailureMode, PolicySet};

/// The `limit` label of an inline check's limit: its position (the
/// configured maximum caps the count; the last label covers any beyond).
const POSITIONS: [&str; 32] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31",
];

/// The `decision` label, indexed by [`outcome`].
const OUTCOMES: [&str; 3] = ["allowed", "denied", "shadow_denied"];

/// Resolved handles of `ratekeeper_checks_total` for inline checks,
/// indexed [position][algorithm][outcome].
type InlineChecks =
    [[[OnceLock<IntCounter>; OUTCOMES.len()]; Algorithm::ALL.len()]; POSITIONS.len()];

pub struct DecisionMetrics {
    /// `ratekeeper_checks_total{policy, limit, algorithm, decision}`.
    checks: IntCounterVec,
    /// `ratekeeper_level_checks_total{policy, level, decision}`: each
    /// level of a levels check (`domain::level`).
    level_checks: IntCounterVec,
    /// Every label of an inline check is static, so the hot path of the
    /// single-rule form skips the label hashing and map lock of
    /// `with_label_values`. Filled on first use, so unused series are
    /// never exported.
    inline_checks: Box<InlineChecks>,
    /// `ratekeeper_degraded_total{failure_mode}`, indexed by [`FailureMode`].
    degraded: [IntCounter; FailureMode::ALL.len()],
    /// `POST /v1/check`, whole request, without the time a check waited.
    pub check_duration: Histogram,
    /// `POST /v1/checks`, once per batch: its checks are counted one by
    /// one in `checks`, but a batch's time is not a check's.
    pub batch_duration: Histogram,
    /// Policies in force.
    pub policies_loaded: IntGauge,
    /// `ratekeeper_policies_file_info{sha256}`: the file in force.
    policies_file: IntGaugeVec,
}

impl DecisionMetrics {
    pub fn register(registry: &Registry) -> DecisionMetrics {
        let degraded = counter_vec(
            registry,
            "ratekeeper_degraded_total",
            "Checks answered by the failure policy because the store was unreachable or too slow.",
            &["failure_mode"],
        );
        DecisionMetrics {
            checks: counter_vec(
                registry,
                "ratekeeper_checks_total",
                "Checks answered, by policy (\"inline\" for checks that carry their limits), \
                 the limit that decided (a denied check: the denying limit with the longest wait; \
                 an allowed one: the most restrictive; inline checks: its position), its \
                 algorithm, and decision (allowed|denied|shadow_denied).",
                &["policy", "limit", "algorithm", "decision"],
            ),
            level_checks: counter_vec(
                registry,
                "ratekeeper_level_checks_total",
                "Levels of levels checks answered, by the level's policy (\"inline\" for a level \
                 that carries its limits), the level's name (its position, \"0\" to \"7\"), and \
                 what that level decided (allowed|denied). The check itself counts once in \
                 ratekeeper_checks_total with policy=\"levels\" and the deciding level's name as \
                 its limit.",
                &["policy", "level", "decision"],
            ),
            inline_checks: Box::new(std::array::from_fn(|_| {
                std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new()))
            })),
            degraded: FailureMode::ALL.map(|m| degraded.with_label_values(&[m.as_str()])),
            check_duration: histogram(
                registry,
                "ratekeeper_check_duration_seconds",
                "Time to answer POST /v1/check, whole request, without the time a wait_ms check waited (see ratekeeper_wait_duration_seconds).",
                LATENCY_BUCKETS,
            ),
            batch_duration: histogram(
                registry,
                "ratekeeper_batch_duration_seconds",
                "Time to answer POST /v1/checks, whole request (every check of the batch), once per batch; its checks count in ratekeeper_checks_total one by one, not in ratekeeper_check_duration_seconds.",
                LATENCY_BUCKETS,
            ),
            policies_loaded: gauge(
                registry,
                "ratekeeper_policies_loaded",
                "Policies in force, from the last good load of the policies file.",
            ),
            policies_file: gauge_vec(
                registry,
                "ratekeeper_policies_file_info",
                "1 for the sha256 of the policies file in force (one series; none without a file): equal on every instance once a rollout reached them all.",
                &["sha256"],
            ),
        }
    }

    /// The policies file in force: its sha256 the one series of
    /// `ratekeeper_policies_file_info`, and its count of policies.
    pub fn policies_in_force(&self, set: &PolicySet) {
        self.policies_file.reset();
        self.policies_file.with_label_values(&[&set.sha256]).set(1);
        // Those with levels too: each is a policy of the file.
        let loaded = set.len() + set.hierarchies().count();
        self.policies_loaded.set(loaded as i64);
    }

    /// Counts one check. Every label is bounded: policy and limit names
    /// come from the policies file, inline checks are `policy="inline"`
    /// with the limit's position (their names come from clients), never a
    /// client key.
    pub fn record(&self, check: &Check, decision: &Decision) {
        if check.has_levels() {
            return self.record_levels(check, decision);
        }
        let index = decision.deciding();
        let outcome = outcome(decision);
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

    /// Counts a levels check once, under `policy="levels"` and its deciding
    /// level's name, and each of its levels by what it decided.
    fn record_levels(&self, check: &Check, decision: &Decision) {
        let index = decision.deciding();
        let limit = &check.limits[index];
        let level = limit.level.as_ref().map_or("0", |l| &*l.name);
        self.checks
            .with_label_values(&[
                "levels",
                level,
                limit.rule.algorithm.as_str(),
                OUTCOMES[outcome(decision)],
            ])
            .inc();
        for (level, range) in check.level_ranges() {
            let allowed = decision.limits[range].iter().all(|l| l.allowed);
            let policy = level.policy.as_deref().unwrap_or("inline");
            self.level_checks
                .with_label_values(&[policy, &level.name, OUTCOMES[usize::from(!allowed)]])
                .inc();
        }
    }

    /// Counts a check the failure policy answered, in `mode`.
    pub fn record_degraded(&self, mode: FailureMode) {
        self.degraded[mode as usize].inc();
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

/// The index in [`OUTCOMES`] of what `decision` answered.
fn outcome(decision: &Decision) -> usize {
    let denied = decision.limits.iter().any(|l| !l.allowed);
    match (denied, decision.shadow) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    }
}
