//! The decision inside the proxy's trace: a real Envoy (1.40) with its
//! OpenTelemetry tracer on, in front of the shipped `ratelimit.yaml`,
//! sends its spans and ratekeeper's to one real OTLP receiver. The span of
//! ratekeeper's RLS call must be a child of Envoy's span for that call, in
//! the trace of the client's request.

use crate::servers as proxies;
use crate::support;

use std::time::Duration;

use serde_json::Value;

use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use support::binary::serve_logged;
use support::free_port;
use support::otlp::{Receiver, named};

const EXAMPLE: &str = include_str!("../../examples/envoy/ratelimit.yaml");
const RLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/rls.yaml");
const RLS_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

const TRACING: &str = include_str!("../../examples/envoy/tracing.yaml");

/// `examples/envoy/tracing.yaml` put into the example: its first document
/// (the tracer) under the connection manager, its second (the collector's
/// cluster, at port `collector`) first among the clusters. Comments are
/// left out; every other line is indented to its place.
fn tracing(collector: u16) -> [(&'static str, String); 2] {
    let (tracer, cluster) = TRACING.split_once("---\n").expect("two documents");
    let indent = |text: &str, by: usize| -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .map(|l| format!("{}{l}\n", " ".repeat(by)))
            .collect()
    };
    let cluster = cluster.replace("port_value: 4317", &format!("port_value: {collector}"));
    let manager = "                use_remote_address: true\n";
    let clusters = "  clusters:\n";
    [
        (manager, format!("{manager}{}", indent(tracer, 16))),
        (clusters, format!("{clusters}{}", indent(&cluster, 4))),
    ]
}

#[tokio::test]
async fn the_rls_decision_is_a_span_inside_envoys_trace() {
    let receiver = Receiver::start();
    let upstream = Upstream::start().await;
    let grpc = free_port();
    let listen = format!("127.0.0.1:{grpc}");
    let endpoint = format!("http://127.0.0.1:{}", receiver.grpc);
    let _service = serve_logged(&[
        ("RATEKEEPER_GRPC__LISTEN", listen.as_str()),
        ("RATEKEEPER_RLS__CONFIG", RLS),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        // Only what a caller sampled: the RLS call's span exists only
        // because Envoy's trace context came with it.
        ("OTEL_TRACES_SAMPLER", "parentbased_always_off"),
    ]);
    let port = free_port();
    let mut pairs = vec![
        ("port_value: 10000", format!("port_value: {port}")),
        (
            "port_value: 9000",
            format!("port_value: {}", upstream.addr.port()),
        ),
        ("port_value: 8081", format!("port_value: {grpc}")),
    ];
    pairs.extend(tracing(receiver.grpc));
    let envoy = Envoy::start(&substitute(EXAMPLE, &pairs), port).await;

    let status = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/orders/1"))
        .header("x-api-key", "traced")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "{}", envoy.log());

    // Envoy flushes its spans every 5 s.
    let ours = wait_for(&receiver, |s| {
        s["name"] == RLS_SPAN && s["service_name"] == "ratekeeper"
    });
    let ours =
        ours.unwrap_or_else(|| panic!("no RLS span: {:#?}\n{}", receiver.spans(), envoy.log()));
    let trace = ours["trace_id"].as_str().unwrap().to_string();
    let parent = ours["parent_span_id"].clone();
    let envoys = wait_for(&receiver, |s| {
        s["service_name"] == "envoy" && s["span_id"] == parent
    });
    let envoys = envoys.unwrap_or_else(|| {
        panic!(
            "our parent {parent} is no span of Envoy's: {:#?}",
            receiver.spans()
        )
    });
    assert_eq!(envoys["trace_id"], trace.as_str());
    // And that trace is the client's request through Envoy.
    let spans = receiver.trace(&trace, |s| {
        s.iter()
            .any(|s| s["kind"] == 2 && s["service_name"] == "envoy")
    });
    assert!(
        spans
            .iter()
            .any(|s| s["kind"] == 2 && s["service_name"] == "envoy"),
        "no server span of Envoy's in the trace: {spans:#?}"
    );
    assert!(!named(&spans, "store").is_empty(), "{spans:#?}");
    // Its descriptors (the key's and the address's) are one check of two
    // limits, all or nothing: decided on the call's own span.
    assert_eq!(
        ours["attributes"]["ratekeeper.decision"], "allowed",
        "{ours}"
    );
}

/// The first span `matches` takes, within 15 s.
fn wait_for(receiver: &Receiver, matches: impl Fn(&Value) -> bool) -> Option<Value> {
    let until = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(span) = receiver.spans().into_iter().find(|s| matches(s)) {
            return Some(span);
        }
        if std::time::Instant::now() > until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
