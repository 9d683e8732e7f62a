//! Every Prometheus metric, one struct per concern.
//!
//! Each concern (decisions, the store, the breakers, ...) lives in its own
//! file, where one `register` call names, documents and registers its
//! families and resolves their label handles, so the request path only
//! increments atomics. [`Metrics`] only composes them around one registry.
//!
//! Labels are bounded (algorithm, decision, failure mode, error kind), never
//! a client key, and come from the domain's own enums
//! ([`FailureMode`](crate::domain::FailureMode),
//! [`BreakerState`](crate::domain::BreakerState),
//! [`StoreError::KINDS`](crate::store::StoreError::KINDS)). These modules
//! import only the domain, the store's error and prometheus: nothing of the
//! limiter or the transports, whose counts (the HTTP/2 warnings the log
//! layer sees) are handed in.
//!
//! Series known in advance exist at 0 before their first event (every
//! store error kind, every adjustment outcome, each policy limit's
//! decisions): a dashboard or alert that divides or rates a series which
//! is absent, rather than 0, shows "no data" exactly when an operator is
//! looking (before the first error, the first reset, the first denial of
//! a new policy).

use prometheus::{Encoder, Registry, TextEncoder};

mod adjustments;
mod auth;
mod breakers;
mod decisions;
mod deny_cache;
mod family;
mod invalidations;
mod leases;
mod listeners;
mod redis;
mod reloads;
mod rls;
mod series;
mod store;
mod tenants;
mod top;
mod traces;
mod waiting;

pub use adjustments::AdjustmentMetrics;
pub use auth::{AuthFailure, AuthMetrics};
pub use breakers::BreakerMetrics;
pub use decisions::DecisionMetrics;
pub use deny_cache::DenyCacheMetrics;
pub use family::SyncedCounter;
pub use invalidations::InvalidationMetrics;
pub use leases::LeaseMetrics;
pub use listeners::{ListenerMetrics, Listeners, TimedOut, TlsFailures};
pub use redis::RedisMetrics;
pub use reloads::{ReloadMetrics, Reloads};
pub use rls::{RlsAnswer, RlsMetrics, RlsRequestError};
pub use store::StoreMetrics;
pub use tenants::{ACTIONS as TENANT_ACTIONS, TenantMetrics};
pub use top::TopMetrics;
pub use waiting::WaitMetrics;

pub struct Metrics {
    registry: Registry,
    /// Checks by policy, limit, algorithm and decision; degraded answers;
    /// check and batch latency; the policies in force.
    pub decisions: DecisionMetrics,
    /// Store errors, call latency, readiness, the embedded store's size.
    pub store: StoreMetrics,
    /// The Redis store's connection replacements and script calls.
    pub redis: RedisMetrics,
    /// The heavy-hitters sketches' memory.
    pub top: TopMetrics,
    pub deny_cache: DenyCacheMetrics,
    /// The invalidation channel.
    pub invalidations: InvalidationMetrics,
    /// The circuit breakers' states and openings.
    pub breakers: BreakerMetrics,
    /// Checks waiting for their retry (`wait_ms`).
    pub waiting: WaitMetrics,
    /// Resets, refunds, settles, releases and renewals.
    pub adjustments: AdjustmentMetrics,
    /// The RLS calls, by answer and by error; the RLS domains in force.
    pub rls: RlsMetrics,
    /// Bearer-authentication refusals and the tokens in force.
    pub auth: AuthMetrics,
    /// Hot-key leasing.
    pub leases: LeaseMetrics,
    /// Both listeners' connection metrics.
    pub listeners: Listeners,
    /// Loads of the watched files.
    pub reloads: Reloads,
    /// Runtime overrides, blocks and exemptions.
    pub tenants: TenantMetrics,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        series::register_process(&registry);
        let decisions = DecisionMetrics::register(&registry);
        let store = StoreMetrics::register(&registry);
        let top = TopMetrics::register(&registry);
        let deny_cache = DenyCacheMetrics::register(&registry);
        let invalidations = InvalidationMetrics::register(&registry);
        let breakers = BreakerMetrics::register(&registry);
        let waiting = WaitMetrics::register(&registry);
        let rls = RlsMetrics::register(&registry);
        Metrics {
            redis: RedisMetrics::register(&registry),
            adjustments: AdjustmentMetrics::register(&registry),
            auth: AuthMetrics::register(&registry),
            leases: LeaseMetrics::register(&registry),
            listeners: Listeners::register(&registry),
            reloads: Reloads::register(&registry),
            tenants: TenantMetrics::register(&registry),
            decisions,
            store,
            top,
            deny_cache,
            invalidations,
            breakers,
            waiting,
            rls,
            registry,
        }
    }

    /// Exports `ratekeeper_http2_warnings_total`, read from `read` at each
    /// scrape (the app passes `telemetry::http2_warnings`). Call it once.
    pub fn count_http2_warnings(&self, read: fn() -> u64) {
        listeners::register_http2_warnings(&self.registry, read);
    }

    /// Exports `ratekeeper_trace_spans_total`, read from `read` at each
    /// scrape (the app passes `telemetry::otel::span_counts`). Call it once.
    pub fn count_trace_spans(&self, read: fn() -> [u64; 3]) {
        traces::register(&self.registry, read);
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

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
