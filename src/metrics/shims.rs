//! The old flat names of [`Metrics`], kept while the decision pipeline is
//! rebuilt (issue 28): `src/limiter/**`, `src/http/check/**` and a few
//! tests still call them, and other branches of that rebuild may. Each
//! delegates to its concern, or is a clone of the concern's handle (the
//! same series). They go when the pipeline lands and those callers use the
//! concerns (`metrics.store.record_error`, `metrics.deny_cache.hits`, ...);
//! nothing new may use them.

use std::ops::Deref;

use prometheus::{Histogram, IntCounter, IntGauge};

use super::{
    AuthFailure, BreakerMetrics, DecisionMetrics, DenyCacheMetrics, InvalidationMetrics, Metrics,
    RlsMetrics, RlsRequestError, StoreMetrics, TopMetrics, WaitMetrics,
};
use crate::domain::{BreakerState, Check, Decision, FailureMode, PolicySet};

/// The old handle fields, reached through `Deref` so that
/// `metrics.deny_cache_hits.inc()` still compiles.
pub struct Shims {
    /// `decisions.check_duration`.
    pub check_duration: Histogram,
    /// `decisions.batch_duration`.
    pub batch_duration: Histogram,
    /// `store.duration`.
    pub store_duration: Histogram,
    /// `store.up`.
    pub store_up: IntGauge,
    /// `store.keys`.
    pub store_keys: IntGauge,
    /// `store.leases`.
    pub store_leases: IntGauge,
    /// `store.reservations`.
    pub store_reservations: IntGauge,
    /// `top.memory`.
    pub top_memory: IntGauge,
    /// `decisions.policies_loaded`.
    pub policies_loaded: IntGauge,
    /// `rls.domains_loaded`.
    pub rls_domains_loaded: IntGauge,
    /// `deny_cache.hits`.
    pub deny_cache_hits: IntCounter,
    /// `invalidations.sent_ok`.
    pub invalidations_sent_ok: IntCounter,
    /// `invalidations.sent_error`.
    pub invalidations_sent_error: IntCounter,
    /// `invalidations.received`.
    pub invalidations_received: IntCounter,
    /// `invalidations.subscribed`.
    pub invalidation_subscribed: IntGauge,
    /// `invalidations.subscription_lost`.
    pub invalidation_subscription_lost: IntCounter,
    /// `breakers.opened`.
    pub breaker_opened: IntCounter,
    /// `waiting.waiters`.
    pub waiters: IntGauge,
    /// `waiting.rejected`.
    pub wait_rejected: IntCounter,
    /// `waiting.duration`.
    pub wait_duration: Histogram,
}

impl Shims {
    /// One argument per concern the old names reach into; it goes with
    /// the shims.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        decisions: &DecisionMetrics,
        store: &StoreMetrics,
        top: &TopMetrics,
        deny_cache: &DenyCacheMetrics,
        invalidations: &InvalidationMetrics,
        breakers: &BreakerMetrics,
        waiting: &WaitMetrics,
        rls: &RlsMetrics,
    ) -> Shims {
        Shims {
            check_duration: decisions.check_duration.clone(),
            batch_duration: decisions.batch_duration.clone(),
            store_duration: store.duration.clone(),
            store_up: store.up.clone(),
            store_keys: store.keys.clone(),
            store_leases: store.leases.clone(),
            store_reservations: store.reservations.clone(),
            top_memory: top.memory.clone(),
            policies_loaded: decisions.policies_loaded.clone(),
            rls_domains_loaded: rls.domains_loaded.clone(),
            deny_cache_hits: deny_cache.hits.clone(),
            invalidations_sent_ok: invalidations.sent_ok.clone(),
            invalidations_sent_error: invalidations.sent_error.clone(),
            invalidations_received: invalidations.received.clone(),
            invalidation_subscribed: invalidations.subscribed.clone(),
            invalidation_subscription_lost: invalidations.subscription_lost.clone(),
            breaker_opened: breakers.opened.clone(),
            waiters: waiting.waiters.clone(),
            wait_rejected: waiting.rejected.clone(),
            wait_duration: waiting.duration.clone(),
        }
    }
}

impl Deref for Metrics {
    type Target = Shims;

    #[inline]
    fn deref(&self) -> &Shims {
        &self.shims
    }
}

impl Metrics {
    /// `decisions.record`.
    #[inline]
    pub fn record_decision(&self, check: &Check, decision: &Decision) {
        self.decisions.record(check, decision);
    }

    /// `decisions.record_degraded`.
    #[inline]
    pub fn record_degraded(&self, mode: FailureMode) {
        self.decisions.record_degraded(mode);
    }

    /// `store.record_error(&error)`; this one takes `error.kind()`.
    #[inline]
    pub fn record_store_error(&self, kind: &str) {
        self.store.errors.with_label_values(&[kind]).inc();
    }

    /// `adjustments.record`.
    #[inline]
    pub fn record_adjustment(&self, op: &'static str, ok: bool) {
        self.adjustments.record(op, ok);
    }

    /// `breakers.record`.
    #[inline]
    pub fn record_breaker(&self, from: Option<BreakerState>, to: BreakerState) {
        self.breakers.record(from, to);
    }

    /// `breakers.forget`.
    #[inline]
    pub fn forget_breaker(&self, state: BreakerState) {
        self.breakers.forget(state);
    }

    /// `decisions.policy_series`.
    #[inline]
    pub fn policy_series(&self, set: &PolicySet) {
        self.decisions.policy_series(set);
    }

    /// `auth.record_failure`.
    #[inline]
    pub fn record_auth_failure(&self, reason: AuthFailure) {
        self.auth.record_failure(reason);
    }

    /// `auth.set_tokens`.
    #[inline]
    pub fn set_tokens_loaded(&self, check: usize, admin: usize) {
        self.auth.set_tokens(check, admin);
    }

    /// `rls.record_error`.
    #[inline]
    pub fn record_rls_request_error(&self, reason: RlsRequestError) {
        self.rls.record_error(reason);
    }

    /// `store.evictions.sync`.
    #[inline]
    pub fn sync_store_evictions(&self, total: u64) {
        self.store.evictions.sync(total);
    }

    /// `redis.connections_replaced.sync`.
    #[inline]
    pub fn sync_connections_replaced(&self, total: u64) {
        self.redis.connections_replaced.sync(total);
    }

    /// `redis.check_calls.sync`.
    #[inline]
    pub fn sync_redis_check_calls(&self, total: u64) {
        self.redis.check_calls.sync(total);
    }
}
