//! The Envoy RLS server on a real Redis Cluster: every limit of one request
//! lives under the domain's hash tag, so descriptors with different values
//! are still one script call in one slot (no CROSSSLOT) and stay exact.

use crate::support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper::app::Application;
use support::RedisCluster;

/// `client` counts per day: a unit's window is epoch-aligned, and a
/// minute's (or an hour's) could turn over inside the sequence (gcra has no
/// windows).
const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: client
    rate_limit: { unit: day, requests_per_unit: 3 }
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 100, algorithm: gcra }
"#;

fn desc(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_with_different_values_share_one_slot() {
    let cluster = RedisCluster::start(3);
    let dir = support::fresh_dir("rls-cluster");
    let path = dir.join("edge.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    let mut settings = support::settings(Some(&cluster.url()));
    settings.grpc.listen = Some("127.0.0.1:0".parse().unwrap());
    settings.rls.config = Some(path);
    let app = Application::build(settings).await.expect("app builds");
    let addr = app.grpc_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut codes = Vec::new();
    for _ in 0..5 {
        let req = RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![desc("client", "alice"), desc("tenant", "acme")],
            hits_addend: 1,
        };
        let r = client.should_rate_limit(req).await.unwrap().into_inner();
        let degraded = r
            .response_headers_to_add
            .iter()
            .any(|h| h.key == "ratelimit-degraded");
        assert!(!degraded);
        codes.push((r.overall_code(), r.statuses[1].limit_remaining));
    }
    use Code::{Ok, OverLimit};
    // Exact (a CROSSSLOT error would have answered fail-open: all OK), and
    // all or nothing: the two denied calls spend nothing of `tenant`.
    assert_eq!(
        codes,
        [
            (Ok, 99),
            (Ok, 98),
            (Ok, 97),
            (OverLimit, 97),
            (OverLimit, 97)
        ]
    );
    let _ = stop.send(());
}
