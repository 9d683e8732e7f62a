//! The spans ratekeeper makes, and the one rule that keeps them cheap: a
//! request that is not sampled builds none. The edge (the HTTP layer, the
//! RLS service) decides once per request; every stage below asks
//! [`LIVE`] first, one atomic load, and builds nothing while no sampled
//! request is in flight anywhere.

use std::sync::atomic::{AtomicUsize, Ordering};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{EDGE, TARGET};
use crate::domain::{Check, Decision};

/// Sampled requests in flight: while it is 0, no stage looks further.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A sampled request's span, counted in `LIVE` while it lives.
/// Boxed: the request's future holds an `Option<Traced>`, a pointer wide.
pub struct Traced {
    span: Box<Span>,
}

impl Traced {
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// The answer's status: an HTTP status code, or a gRPC status code.
    pub fn record_status(&self, attribute: &'static str, status: i64) {
        self.span.set_attribute(attribute, status);
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The W3C limit of a `tracestate` (32 members of at most 256 bytes makes
/// more, but 512 is what the specification asks propagators to keep).
const MAX_CONTEXT_BYTES: usize = 512;

/// The W3C trace context of a request's headers (`traceparent`,
/// `tracestate`).
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    /// A value over [`MAX_CONTEXT_BYTES`] is ignored: a `tracestate` is
    /// copied into every span of the request and kept while it waits in
    /// the queue, so a client's 60 KiB one would multiply there.
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .filter(|v| v.len() <= MAX_CONTEXT_BYTES)
            .and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The RLS call's span name: its gRPC method, as the conventions say.
const RLS_METHOD: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The kind of server span.
#[derive(Clone, Copy)]
pub enum Server<'a> {
    /// An HTTP request: its method and route template (never its path,
    /// which may hold a key).
    Http { method: &'a str, route: &'a str },
    /// An Envoy RLS call.
    Rls,
}

/// The header of the W3C trace context, named once (a `&str` key is parsed
/// at every lookup).
const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

/// A request the sampler took, with its caller's context.
pub struct Sampled(opentelemetry::Context);

/// Whether traces are on and the sampler takes a request with `headers`:
/// a child of the caller's `traceparent` when it sent one. `None` costs a
/// header lookup, and builds nothing.
pub fn sample(headers: &http::HeaderMap) -> Option<Sampled> {
    let edge = EDGE.get()?;
    if !headers.contains_key(TRACEPARENT) {
        // No caller's context to build or read: the root sampler alone.
        return edge
            .sampler
            .root()
            .then(|| Sampled(opentelemetry::Context::new()));
    }
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    edge.sampler
        .sample(parent.span().span_context())
        .then_some(Sampled(parent))
}

/// The span of a sampled request.
pub fn server_span(sampled: Sampled, server: Server<'_>) -> Traced {
    let Sampled(parent) = sampled;
    LIVE.fetch_add(1, Ordering::Relaxed);
    // At ERROR: a span is kept by every log filter that lets a line of the
    // request through, so the log lines of a sampled request carry its
    // trace id whatever `log.level` says. Its only fields are what those
    // lines show; the rest are OpenTelemetry attributes alone
    // (`set_attribute`), which the log layer never formats.
    let span = tracing::error_span!(
        target: TARGET,
        "request",
        otel.name = Empty,
        otel.kind = "server",
        trace_id = Empty,
    );
    match server {
        Server::Http { method, route } => {
            span.record("otel.name", format!("{method} {route}"));
            span.set_attribute("http.request.method", method.to_string());
            span.set_attribute("http.route", route.to_string());
        }
        Server::Rls => {
            span.record("otel.name", RLS_METHOD);
            span.set_attribute("rpc.system", "grpc");
        }
    }
    let traced = Traced {
        span: Box::new(span),
    };
    let _ = traced.span.set_parent(parent);
    let trace_id = traced.span.context().span().span_context().trace_id();
    traced
        .span
        .record("trace_id", tracing::field::display(trace_id));
    traced
}

/// The current span, if a sampled request is in flight on this task.
#[inline]
fn current() -> Option<Span> {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let span = Span::current();
    (!span.is_none()).then_some(span)
}

/// A stage's span, held while the stage runs (its time is from creation
/// to drop; it is never entered, so nothing wraps the stage's future).
/// Boxed: the futures that hold one across an await grow by a pointer, not
/// by a span.
pub struct Stage(#[allow(dead_code)] Box<Span>);

/// A stage of the decision (`deny_cache`, `lease`, `breaker`, `waiting`)
/// under the current request's span; `None` without a sampled request.
#[inline]
pub fn stage(name: &'static str) -> Option<Stage> {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    stage_under(current()?, name)
}

fn stage_under(parent: Span, name: &'static str) -> Option<Stage> {
    let span = tracing::info_span!(target: TARGET, parent: &parent, "stage", otel.name = name);
    Some(Stage(Box::new(span)))
}

/// The store call of a request: `ops` operations to the store `name`
/// gives (asked only for a sampled request).
#[inline]
pub fn store_call(name: impl FnOnce() -> &'static str, ops: usize) -> Option<Stage> {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let parent = current()?;
    let span = tracing::info_span!(
        target: TARGET,
        parent: &parent,
        "store",
        otel.name = "store",
        otel.kind = "client",
    );
    span.set_attribute("ratekeeper.store", name());
    span.set_attribute("ratekeeper.batch_size", ops as i64);
    Some(Stage(Box::new(span)))
}

/// The context a micro-batched store call links back to: the request's.
pub fn current_link() -> Option<SpanContext> {
    let span = current()?;
    let context = span.context().span().span_context().clone();
    context.is_valid().then_some(context)
}

/// One micro-batched Redis call, linked from each check it carried: a root
/// of its own, since it belongs to no one request.
pub fn batch_call(links: Vec<SpanContext>, ops: usize) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "redis batch",
        otel.name = "redis batch",
        otel.kind = "client",
    );
    span.set_attribute("ratekeeper.store", "redis");
    span.set_attribute("ratekeeper.batch_size", ops as i64);
    for link in links {
        span.add_link(link);
    }
    span
}

/// How many requests a list held (a batch, an RLS call's descriptors).
pub fn record_batch_size(n: usize) {
    if let Some(span) = current() {
        span.set_attribute("ratekeeper.batch_size", n as i64);
    }
}

/// Why the store could not answer.
pub fn record_failure(kind: &'static str) {
    if let Some(span) = current() {
        span.set_attribute("ratekeeper.failure_kind", kind);
    }
}

/// A check's decision: on the request's span when it is the request's only
/// check, else on a span of its own under it.
#[inline]
pub fn record_check(
    check: &Check,
    decision: &Decision,
    store: impl FnOnce() -> &'static str,
    alone: bool,
) {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    record_check_under(check, decision, store(), alone);
}

fn record_check_under(check: &Check, decision: &Decision, store: &'static str, alone: bool) {
    let Some(request) = current() else { return };
    let span = if alone {
        request
    } else {
        tracing::info_span!(target: TARGET, parent: &request, "check", otel.name = "check")
    };
    if let Some(policy) = &check.policy {
        span.set_attribute("ratekeeper.policy", policy.to_string());
    }
    if let Some(limit) = check.limits.get(decision.most_restrictive) {
        span.set_attribute("ratekeeper.algorithm", limit.rule.algorithm.as_str());
    }
    let verdict = match (decision.allowed, decision.shadow) {
        (true, true) => "shadow_denied",
        (true, false) => "allowed",
        (false, _) => "denied",
    };
    span.set_attribute("ratekeeper.decision", verdict);
    span.set_attribute("ratekeeper.degraded", decision.degraded);
    span.set_attribute("ratekeeper.store", store);
    if let Some(hash) = EDGE.get().and_then(|edge| edge.key_hash(&check.key)) {
        span.set_attribute("ratekeeper.key_hash", hash);
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::propagation::Extractor;

    use super::Headers;

    #[test]
    fn a_context_header_over_512_bytes_is_ignored() {
        let mut headers = http::HeaderMap::new();
        headers.insert("tracestate", "a=b".parse().unwrap());
        assert_eq!(Headers(&headers).get("tracestate"), Some("a=b"));
        let long = (0..200)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        headers.insert("tracestate", long.parse().unwrap());
        assert_eq!(Headers(&headers).get("tracestate"), None);
    }
}
