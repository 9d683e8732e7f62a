//! Every Prometheus metric, named and documented in one place.
//!
//! Labels are bounded (algorithm, decision, failure mode, error kind), never
//! a client key. Label handles are resolved once here, so the request path
//! only increments atomics.

use std::sync::OnceLock;

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::domain::{Algorithm, FailureMode};
use crate::limiter::breaker::State as BreakerState;

mod auth;
mod leases;
mod listeners;
mod record;
mod reloads;
mod rls;
mod series;
pub use auth::AuthFailure;
use auth::auth_metrics;
pub use leases::LeaseMetrics;
pub use listeners::{ListenerMetrics, Listeners, TimedOut};
pub use reloads::{ReloadMetrics, Reloads};
pub use rls::RlsRequestError;
use rls::rls_metrics;

/// The `limit` label of an inline check's limit: its position (the
/// configured maximum caps the count; the last label covers any beyond).
const POSITIONS: [&str; 32] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31",
];

/// Latency buckets from 50 µs to 1 s: a check should sit in the first few.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

pub struct Metrics {
    registry: Registry,
    /// `ratekeeper_checks_total{policy, limit, algorithm, decision}`.
    checks: IntCounterVec,
    /// Resolved handles of `checks` for inline checks, indexed [position]
    /// [algorithm][outcome]: every label is static there, so the hot path
    /// of the single-rule form skips the label hashing and map lock of
    /// `with_label_values`. Filled on first use, so unused series are
    /// never exported.
    inline_checks: Box<[[[OnceLock<IntCounter>; 3]; Algorithm::ALL.len()]; POSITIONS.len()]>,
    /// `ratekeeper_degraded_total{failure_mode}`, indexed by [`FailureMode`].
    degraded: [IntCounter; FailureMode::ALL.len()],
    store_errors: IntCounterVec,
    /// `ratekeeper_adjustments_total{op, result}`: resets, refunds, settles,
    /// releases and renewals.
    adjustments: IntCounterVec,
    pub check_duration: Histogram,
    /// `POST /v1/checks`, once per batch: its checks are counted one by
    /// one in `checks`, but a batch's time is not a check's.
    pub batch_duration: Histogram,
    pub store_duration: Histogram,
    /// Keys the embedded store holds (set when /metrics is read).
    pub store_keys: IntGauge,
    pub store_leases: IntGauge,
    /// Reservations the embedded store holds (set when /metrics is read).
    pub store_reservations: IntGauge,
    /// Bytes the heavy-hitters sketches hold (set when /metrics is read).
    pub top_memory: IntGauge,
    /// Keys the embedded store evicted before their reset (synced when
    /// /metrics is read).
    pub store_evictions: IntCounter,
    /// Serialises the scrape-time syncs of counters the store keeps itself.
    store_counters_sync: std::sync::Mutex<()>,
    pub redis_connections_replaced: IntCounter,
    /// Redis script calls made for checks (synced when /metrics is read).
    redis_check_calls: IntCounter,
    /// Checks answered by the local deny cache, without a store call.
    pub deny_cache_hits: IntCounter,
    /// `ratekeeper_invalidations_sent_total{result="ok"|"error"}`: ok when
    /// a reset or refund script published, error when its PUBLISH or the
    /// call failed.
    pub invalidations_sent_ok: IntCounter,
    pub invalidations_sent_error: IntCounter,
    /// Invalidations received on the channel (this instance's own included).
    pub invalidations_received: IntCounter,
    /// 1 while subscribed to the invalidation channel (the deny cache is
    /// in use), 0 otherwise.
    pub invalidation_subscribed: IntGauge,
    /// Times the subscription was lost (the deny cache was dropped).
    pub invalidation_subscription_lost: IntCounter,
    /// 1 while the store answers, 0 while the failure policy answers.
    pub store_up: IntGauge,
    /// `ratekeeper_breaker_state{state}`: failure domains per breaker state,
    /// indexed by [`BreakerState`].
    breaker_state: [IntGauge; 3],
    /// Times a circuit breaker opened.
    pub breaker_opened: IntCounter,
    /// Both listeners' connection metrics.
    pub listeners: Listeners,
    /// Loads of the policies file, `rls.config` and the tokens file.
    pub reloads: Reloads,
    pub leases: LeaseMetrics,
    /// Policies in force.
    pub policies_loaded: IntGauge,
    /// RLS domains in force.
    pub rls_domains_loaded: IntGauge,
    /// The RLS calls' counts, by answer and by error.
    rls: rls::RlsMetrics,
    /// `ratekeeper_auth_failures_total{reason}`, indexed by [`AuthFailure`].
    auth_failures: [IntCounter; 4],
    /// `ratekeeper_auth_tokens{scope}`: tokens in force per scope.
    auth_tokens: [IntGauge; 2],
    /// Checks waiting for their retry (`wait_ms`) now.
    pub waiters: IntGauge,
    /// Checks that asked to wait but were answered at once because
    /// `limits.max_waiters` were waiting.
    pub wait_rejected: IntCounter,
    /// How long checks that waited took, waiting included.
    pub wait_duration: Histogram,
}

/// Waits run from a few milliseconds to `limits.max_wait` (10 s by default).
const WAIT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let checks = IntCounterVec::new(
            Opts::new(
                "ratekeeper_checks_total",
                "Checks answered, by policy (\"inline\" for checks that carry their limits), \
                 the limit that decided (a denied check: the denying limit with the longest wait; \
                 an allowed one: the most restrictive; inline checks: its position), its \
                 algorithm, and decision (allowed|denied|shadow_denied).",
            ),
            &["policy", "limit", "algorithm", "decision"],
        )
        .expect("valid metric");
        let degraded_vec = IntCounterVec::new(
            Opts::new(
                "ratekeeper_degraded_total",
                "Checks answered by the failure policy because the store was unreachable or too slow.",
            ),
            &["failure_mode"],
        )
        .expect("valid metric");
        let degraded = FailureMode::ALL.map(|m| degraded_vec.with_label_values(&[m.as_str()]));
        let store_errors = IntCounterVec::new(
            Opts::new(
                "ratekeeper_store_errors_total",
                "Store errors by kind: timeout, unavailable (connection or server not ready), auth (credentials or permissions refused), backend (script or reply error).",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let adjustments = IntCounterVec::new(
            Opts::new(
                "ratekeeper_adjustments_total",
                "Resets, refunds, settles and a lease's releases and renewals (op: reset|refund|settle|release|renew) by result: ok, or error (the store could not apply it; answered 503 or 500).",
            ),
            &["op", "result"],
        )
        .expect("valid metric");
        let check_duration = Histogram::with_opts(
            HistogramOpts::new(
                "ratekeeper_check_duration_seconds",
                "Time to answer POST /v1/check, whole request, without the time a wait_ms check waited (see ratekeeper_wait_duration_seconds).",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .expect("valid metric");
        let batch_duration = Histogram::with_opts(
            HistogramOpts::new(
                "ratekeeper_batch_duration_seconds",
                "Time to answer POST /v1/checks, whole request (every check of the batch), once per batch; its checks count in ratekeeper_checks_total one by one, not in ratekeeper_check_duration_seconds.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .expect("valid metric");
        let store_duration = Histogram::with_opts(
            HistogramOpts::new(
                "ratekeeper_store_duration_seconds",
                "Time of one store call (the Redis round trip, or the in-memory decision).",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .expect("valid metric");
        let store_keys = IntGauge::new(
            "ratekeeper_store_keys",
            "Keys holding state in the embedded store (memory.max_keys bounds it); 0 with Redis.",
        )
        .expect("valid metric");
        let store_leases = IntGauge::new(
            "ratekeeper_store_leases",
            "Concurrency leases the embedded store's keys hold, expired ones not yet trimmed \
             included; each counts against memory.max_keys like a key. 0 with Redis.",
        )
        .expect("valid metric");
        let store_reservations = IntGauge::new(
            "ratekeeper_store_reservations",
            "Reservations (checks with reservation_ttl, until settled or expired) the embedded \
             store holds, expired ones until swept (within memory.max_keys); 0 with Redis, \
             where each is a key.",
        )
        .expect("valid metric");
        let top_memory = IntGauge::new(
            "ratekeeper_top_memory_bytes",
            "Bytes the heavy-hitters sketches of GET /v1/top hold (their counters and keys); \
             top.capacity and top.max_sets bound it.",
        )
        .expect("valid metric");
        let store_evictions = IntCounter::new(
            "ratekeeper_store_evictions_total",
            "Keys the embedded store evicted before their reset because it held memory.max_keys (nearest reset first).",
        )
        .expect("valid metric");
        let redis_connections_replaced = IntCounter::new(
            "ratekeeper_redis_connections_replaced_total",
            "Redis connections replaced because they stopped answering (a call timed out and a \
             PING on the same connection got no reply within redis.unresponsive_timeout): a \
             silently dead path, or a frozen Redis.",
        )
        .expect("valid metric");
        let redis_check_calls = IntCounter::new(
            "ratekeeper_redis_check_calls_total",
            "Redis script calls that decided checks: one per check sent alone, one per \
             micro-batch of checks. ratekeeper_store_duration_seconds_count over this is the \
             mean number of checks a call carried.",
        )
        .expect("valid metric");
        let deny_cache_hits = IntCounter::new(
            "ratekeeper_deny_cache_hits_total",
            "Denials answered by the local deny cache without asking the store.",
        )
        .expect("valid metric");
        let invalidations_sent = IntCounterVec::new(
            Opts::new(
                "ratekeeper_invalidations_sent_total",
                "Invalidations published by reset and refund (the Redis script publishes after \
                 the change), by result: ok, or error (that PUBLISH failed, e.g. an ACL without \
                 the channel, or the call itself failed): an error may leave other instances' \
                 cached denials of that key for up to 1 s.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let invalidations_sent_ok = invalidations_sent.with_label_values(&["ok"]);
        let invalidations_sent_error = invalidations_sent.with_label_values(&["error"]);
        let invalidations_received = IntCounter::new(
            "ratekeeper_invalidations_received_total",
            "Invalidations received on the Redis channel, this instance's own included.",
        )
        .expect("valid metric");
        let invalidation_subscribed = IntGauge::new(
            "ratekeeper_invalidation_subscribed",
            "1 while subscribed to the Redis invalidation channel (the deny cache is in use); \
             0 while the subscription is lost (the deny cache is dropped and unused), and \
             always 0 without Redis or without a deny cache.",
        )
        .expect("valid metric");
        let invalidation_subscription_lost = IntCounter::new(
            "ratekeeper_invalidation_subscription_lost_total",
            "Times the invalidation subscription was lost and the deny cache dropped.",
        )
        .expect("valid metric");
        let store_up = IntGauge::new(
            "ratekeeper_store_up",
            "1 while the store answers checks (ready), 0 while degraded.",
        )
        .expect("valid metric");
        let breaker_vec = IntGaugeVec::new(
            Opts::new(
                "ratekeeper_breaker_state",
                "Failure domains (Redis nodes; one for a single server) whose circuit breaker is closed, open or half_open.",
            ),
            &["state"],
        )
        .expect("valid metric");
        let breaker_state = BreakerState::ALL.map(|s| breaker_vec.with_label_values(&[s.as_str()]));
        let breaker_opened = IntCounter::new(
            "ratekeeper_breaker_opened_total",
            "Times a circuit breaker opened after a sustained store failure.",
        )
        .expect("valid metric");
        let policies_loaded = IntGauge::new(
            "ratekeeper_policies_loaded",
            "Policies in force, from the last good load of the policies file.",
        )
        .expect("valid metric");
        let rls_domains_loaded = IntGauge::new(
            "ratekeeper_rls_domains_loaded",
            "RLS domains in force, from the last good load of rls.config.",
        )
        .expect("valid metric");
        let (auth_vecs, auth_failures, auth_tokens) = auth_metrics();
        let (reload_vecs, reloads) = reloads::reload_metrics();
        let (lease_vecs, leases) = leases::lease_metrics();
        let (rls_vecs, rls) = rls_metrics();
        let (listener_vecs, listeners) = listeners::listener_metrics();
        let waiters = IntGauge::new(
            "ratekeeper_waiters",
            "Checks waiting for their retry_after (wait_ms) now; limits.max_waiters bounds it.",
        )
        .expect("valid metric");
        let wait_rejected = IntCounter::new(
            "ratekeeper_wait_rejected_total",
            "Checks that asked to wait (wait_ms) but were answered at once because limits.max_waiters (or limits.max_waiters_per_key on their key) were waiting, or the server was draining.",
        )
        .expect("valid metric");
        let wait_duration = Histogram::with_opts(
            HistogramOpts::new(
                "ratekeeper_wait_duration_seconds",
                "Time to answer a check that waited in line (wait_ms), waiting included.",
            )
            .buckets(WAIT_BUCKETS.to_vec()),
        )
        .expect("valid metric");

        for collector in [
            Box::new(checks.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(degraded_vec),
            Box::new(store_errors.clone()),
            Box::new(adjustments.clone()),
            Box::new(check_duration.clone()),
            Box::new(batch_duration.clone()),
            Box::new(store_duration.clone()),
            Box::new(deny_cache_hits.clone()),
            Box::new(invalidations_sent),
            Box::new(invalidations_received.clone()),
            Box::new(invalidation_subscribed.clone()),
            Box::new(invalidation_subscription_lost.clone()),
            Box::new(store_keys.clone()),
            Box::new(store_leases.clone()),
            Box::new(store_reservations.clone()),
            Box::new(store_evictions.clone()),
            Box::new(top_memory.clone()),
            Box::new(redis_connections_replaced.clone()),
            Box::new(redis_check_calls.clone()),
            Box::new(store_up.clone()),
            Box::new(breaker_vec),
            Box::new(breaker_opened.clone()),
            Box::new(policies_loaded.clone()),
            Box::new(rls_domains_loaded.clone()),
            Box::new(waiters.clone()),
            Box::new(wait_rejected.clone()),
            Box::new(wait_duration.clone()),
            Box::new(series::build_info()),
        ]
        .into_iter()
        .chain(auth_vecs)
        .chain(rls_vecs)
        .chain(listener_vecs)
        .chain(reload_vecs)
        .chain(lease_vecs)
        {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("process metrics register once");

        let metrics = Metrics {
            registry,
            checks,
            inline_checks: Box::new(std::array::from_fn(|_| {
                std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new()))
            })),
            degraded,
            store_errors,
            adjustments,
            check_duration,
            batch_duration,
            store_duration,
            deny_cache_hits,
            invalidations_sent_ok,
            invalidations_sent_error,
            invalidations_received,
            invalidation_subscribed,
            invalidation_subscription_lost,
            store_keys,
            store_leases,
            store_reservations,
            store_evictions,
            top_memory,
            store_counters_sync: std::sync::Mutex::new(()),
            redis_connections_replaced,
            redis_check_calls,
            store_up,
            breaker_state,
            breaker_opened,
            listeners,
            reloads,
            leases,
            policies_loaded,
            rls_domains_loaded,
            rls,
            auth_failures,
            auth_tokens,
            waiters,
            wait_rejected,
            wait_duration,
        };
        metrics.zero_fixed_series();
        metrics
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
