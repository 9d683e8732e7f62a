//! OpenTelemetry traces from the real binary to a real OTLP receiver:
//! `tests/otel/receiver.py`, the OpenTelemetry protobuf definitions
//! (PyPI's opentelemetry-proto) behind a grpcio server and an HTTP server,
//! writing each span it receives as a JSON line. The service is configured
//! only by the standard `OTEL_*` variables, as an operator would.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::{Value, json};

use crate::rls_support::{desc, request};
use crate::support;
use support::binary::{Served, serve_logged};
use support::otlp::{Receiver, named};

/// The binary with the `OTEL_*` variables `otel` and `more`.
pub(crate) fn serve(otel: &[(&str, &str)], more: &[(&str, &str)]) -> Served {
    let env: Vec<(&str, &str)> = [("OTEL_BSP_SCHEDULE_DELAY", "50")]
        .into_iter()
        .chain(otel.iter().copied())
        .chain(more.iter().copied())
        .collect();
    serve_logged(&env)
}

pub(crate) fn traceparent(trace: &str, parent: &str, sampled: bool) -> String {
    format!("00-{trace}-{parent}-{}", if sampled { "01" } else { "00" })
}

pub(crate) async fn post(
    http: &str,
    path: &str,
    traceparent: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("http://{http}{path}"))
        .json(&body);
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn span_counts(http: &str) -> [u64; 3] {
    let text = reqwest::get(format!("http://{http}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    ["exported", "failed", "dropped"].map(|outcome| {
        let prefix = format!("ratekeeper_trace_spans_total{{outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
            .parse()
            .unwrap()
    })
}

/// A check, a batch and an RLS call, each with the caller's sampled
/// `traceparent`, reach the collector over gRPC as spans of the caller's
/// trace: the request's parent is the caller's span, the stages and the
/// store call are its children, and the attributes name the decision but
/// never the key. A request whose caller did not sample it, or that sent
/// no `traceparent` (the sampler is `parentbased_always_off`), makes none.
#[tokio::test]
async fn a_check_a_batch_and_an_rls_call_are_spans_of_the_callers_trace() {
    let receiver = Receiver::start();
    let endpoint = format!("http://127.0.0.1:{}", receiver.grpc);
    let rls = crate::rls_support::config_file(crate::rls_support::CONFIG);
    let served = serve(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "rk-under-test"),
            ("OTEL_TRACES_SAMPLER", "parentbased_always_off"),
        ],
        &[
            ("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0"),
            ("RATEKEEPER_RLS__CONFIG", rls.to_str().unwrap()),
        ],
    );
    let key = support::unique_key("secret-key");
    let check = json!({"key": key, "limit": 1, "window": "1h"});

    let (t1, p1) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let (status, _) = post(
        &served.http,
        "/v1/check",
        Some(&traceparent(t1, p1, true)),
        check.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let spans = receiver.trace(t1, |s| {
        !named(s, "store").is_empty() && !named(s, "POST /v1/check").is_empty()
    });
    let root = named(&spans, "POST /v1/check");
    assert_eq!(root.len(), 1, "{spans:#?}");
    let root = root[0];
    assert_eq!(root["parent_span_id"], p1);
    assert_eq!(root["kind"], 2, "SERVER");
    assert_eq!(root["service_name"], "rk-under-test");
    let attrs = &root["attributes"];
    assert_eq!(attrs["ratekeeper.algorithm"], "sliding_window", "{attrs}");
    assert_eq!(attrs["ratekeeper.decision"], "allowed");
    assert_eq!(attrs["ratekeeper.degraded"], false);
    assert_eq!(attrs["ratekeeper.store"], "memory");
    assert_eq!(attrs["http.response.status_code"], 200);
    assert_eq!(attrs["http.route"], "/v1/check");
    for stage in ["deny_cache", "breaker", "store"] {
        let s = named(&spans, stage);
        assert_eq!(s.len(), 1, "{stage}: {spans:#?}");
        assert_eq!(s[0]["parent_span_id"], root["span_id"], "{stage}");
    }
    let everything = serde_json::to_string(&receiver.spans()).unwrap();
    assert!(
        !everything.contains(&key),
        "a span carries the key: {everything}"
    );

    // A policy's denial, in a batch of three: one span per check under it.
    let (t2, p2) = ("1af7651916cd43dd8448eb211c80319c", "c7ad6b7169203331");
    let batch = json!({"checks": [check.clone(), check.clone(), {"key": "other", "limit": 5, "window": "1h"}]});
    let (status, body) = post(
        &served.http,
        "/v1/checks",
        Some(&traceparent(t2, p2, true)),
        batch,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let spans = receiver.trace(t2, |s| {
        named(s, "check").len() == 3 && !named(s, "POST /v1/checks").is_empty()
    });
    let root = named(&spans, "POST /v1/checks")[0];
    assert_eq!(root["parent_span_id"], p2);
    assert_eq!(root["attributes"]["ratekeeper.batch_size"], 3);
    let decisions: Vec<&Value> = named(&spans, "check")
        .iter()
        .map(|s| {
            assert_eq!(s["parent_span_id"], root["span_id"]);
            &s["attributes"]["ratekeeper.decision"]
        })
        .collect();
    assert_eq!(
        decisions.iter().filter(|d| **d == "denied").count(),
        2,
        "{decisions:?}"
    );

    // The RLS call: the trace context in the gRPC metadata, as Envoy sends it.
    let (t3, p3) = ("2af7651916cd43dd8448eb211c80319c", "d7ad6b7169203331");
    let grpc = served.grpc.clone().expect("the gRPC listener");
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let mut call = tonic::Request::new(request("edge", vec![desc(&[("client", "c1")])]));
    call.metadata_mut()
        .insert("traceparent", traceparent(t3, p3, true).parse().unwrap());
    client.should_rate_limit(call).await.unwrap();
    let name = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let spans = receiver.trace(t3, |s| {
        !named(s, name).is_empty() && !named(s, "store").is_empty()
    });
    let root = named(&spans, name)[0];
    assert_eq!(root["parent_span_id"], p3);
    assert_eq!(root["attributes"]["rpc.system"], "grpc");
    assert_eq!(root["attributes"]["rpc.grpc.status_code"], 0);
    assert_eq!(root["attributes"]["ratekeeper.decision"], "allowed");

    // Not sampled by the caller, or no caller trace at all: no span. Every
    // span so far has come (the waits above); the counts and the spans
    // received must not move after these two.
    std::thread::sleep(Duration::from_millis(500));
    let before = span_counts(&served.http).await;
    let received = receiver.spans().len();
    assert_eq!(before[0] as usize, received, "{before:?}");
    let (t4, p4) = ("3af7651916cd43dd8448eb211c80319c", "e7ad6b7169203331");
    let unsampled = traceparent(t4, p4, false);
    post(&served.http, "/v1/check", Some(&unsampled), check.clone()).await;
    post(&served.http, "/v1/check", None, check).await;
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        span_counts(&served.http).await,
        before,
        "spans without a sampled trace"
    );
    assert_eq!(receiver.spans().len(), received);
    assert_eq!((before[1], before[2]), (0, 0), "failed, dropped");
    let traces = [t1, t2, t3];
    for span in receiver.spans() {
        assert!(
            traces.contains(&span["trace_id"].as_str().unwrap()),
            "{span}"
        );
    }
}

/// OTLP over HTTP/protobuf, the specification's default protocol; and the
/// log lines of a sampled request carry its trace id (a reset the store
/// cannot make logs a warning inside the request).
#[tokio::test]
async fn http_protobuf_export_and_the_trace_id_in_the_log() {
    let receiver = Receiver::start();
    let endpoint = format!("http://127.0.0.1:{}", receiver.http);
    let dead = format!("redis://127.0.0.1:{}", support::free_port());
    let served = serve(
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
        &[
            ("RATEKEEPER_REDIS__URL", &dead),
            ("RATEKEEPER_REDIS__TIMEOUT", "200ms"),
        ],
    );
    let (trace, parent) = ("4af7651916cd43dd8448eb211c80319c", "f7ad6b7169203331");
    let body = json!({"key": "k", "limit": 5, "window": "1h"});
    let (status, answer) = post(
        &served.http,
        "/v1/reset",
        Some(&traceparent(trace, parent, true)),
        body,
    )
    .await;
    assert!(status >= 500, "{status} {answer}");
    let spans = receiver.trace(trace, |s| !named(s, "POST /v1/reset").is_empty());
    let root = named(&spans, "POST /v1/reset")[0];
    assert_eq!(root["protocol"], "http/protobuf");
    assert_eq!(root["parent_span_id"], parent);
    assert!(
        root["attributes"]["ratekeeper.failure_kind"].is_string(),
        "{root}"
    );
    let logged = served
        .log()
        .into_iter()
        .find(|l| l.contains("store could not adjust") || l.contains("store error"))
        .unwrap_or_else(|| panic!("no line about the reset: {:#?}", served.log()));
    assert!(logged.contains(trace), "{logged}");
}
