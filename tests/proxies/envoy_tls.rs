//! Envoy's rate limit filter reaching ratekeeper's gRPC listener over TLS
//! with client certificates (`[grpc.tls]`): the shipped
//! `examples/envoy/ratelimit-tls.yaml` run by a real Envoy, only its
//! addresses, files and ratekeeper's name changed. With Envoy's client
//! certificate, requests are limited as in plaintext; an Envoy without one
//! is refused at the handshake (counted), and its own `failure_mode_deny`
//! decides, as when ratekeeper is unreachable.

use crate::servers as proxies;
use crate::support;

use std::time::Duration;

use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use support::binary::serve_logged;
use support::tls::Certs;
use support::{free_port, path_str, unique_key};

const EXAMPLE: &str = include_str!("../../examples/envoy/ratelimit-tls.yaml");
const RLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/rls.yaml");
/// rls.yaml's per-key limit.
const N: usize = 3;
/// The example's client certificate lines, left out for an Envoy without one.
const CLIENT_CERT: &str = "            tls_certificates:
              - certificate_chain: { filename: /etc/envoy/tls/client.crt }
                private_key: { filename: /etc/envoy/tls/client.key }
";

async fn start_envoy(certs: &Certs, upstream: &Upstream, grpc: u16, with_cert: bool) -> Envoy {
    let port = free_port();
    let mut pairs = vec![
        ("port_value: 10000", format!("port_value: {port}")),
        (
            "port_value: 9000",
            format!("port_value: {}", upstream.addr.port()),
        ),
        ("port_value: 8081", format!("port_value: {grpc}")),
        ("ratekeeper.internal", "localhost".to_string()),
    ];
    let file = |path: std::path::PathBuf| path_str(&path).to_string();
    if with_cert {
        pairs.push(("/etc/envoy/tls/client.crt", file(certs.crt("client"))));
        pairs.push(("/etc/envoy/tls/client.key", file(certs.key("client"))));
    } else {
        pairs.push((CLIENT_CERT, String::new()));
    }
    pairs.push(("/etc/envoy/tls/ca.crt", file(certs.crt("ca"))));
    Envoy::start(&substitute(EXAMPLE, &pairs), port).await
}

#[tokio::test]
async fn envoy_limits_through_the_rls_over_mtls_and_one_without_a_certificate_is_refused() {
    let certs = Certs::new("envoy-tls");
    let upstream = Upstream::start().await;
    let grpc = free_port();
    let listen = format!("127.0.0.1:{grpc}");
    let (cert, key, ca) = (certs.crt("server"), certs.key("server"), certs.crt("ca"));
    let served = serve_logged(&[
        ("RATEKEEPER_GRPC__LISTEN", &listen),
        ("RATEKEEPER_RLS__CONFIG", RLS),
        ("RATEKEEPER_GRPC__TLS__CERT_FILE", path_str(&cert)),
        ("RATEKEEPER_GRPC__TLS__KEY_FILE", path_str(&key)),
        ("RATEKEEPER_GRPC__TLS__CLIENT_CA_FILE", path_str(&ca)),
    ]);
    let log = served.log().join("\n");
    assert!(log.contains(r#""tls":"mtls""#), "{log}");
    let with_cert = start_envoy(&certs, &upstream, grpc, true).await;
    let without = start_envoy(&certs, &upstream, grpc, false).await;
    let client = reqwest::Client::builder()
        .local_address(support::fresh_loopback())
        .build()
        .unwrap();
    let get = |envoy: &Envoy, key: &str| {
        client
            .get(envoy.url("/orders/1"))
            .header("x-api-key", key)
            .send()
    };

    support::early_in_a_minute(Duration::from_millis(45_000)).await;
    let key = unique_key("envoy-tls");
    for i in 0..N {
        let response = get(&with_cert, &key).await.unwrap();
        assert_eq!(response.status(), 200, "request {i}\n{}", with_cert.log());
        assert!(response.headers().contains_key("ratelimit"));
    }
    let response = get(&with_cert, &key).await.unwrap();
    assert_eq!(response.status(), 429, "{}", with_cert.log());

    // Without a client certificate: refused at the handshake, so Envoy's
    // failure_mode_deny: false lets the spent key through, unlimited.
    let response = get(&without, &key).await.unwrap();
    assert_eq!(response.status(), 200, "{}", without.log());
    assert!(!response.headers().contains_key("ratelimit"));
    assert!(without.counter("cluster.app.ratelimit.error").await >= 1);
    let metrics = reqwest::get(format!("http://{}/metrics", served.http))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series =
        r#"ratekeeper_tls_handshake_failures_total{listener="grpc",reason="client_certificate"} "#;
    let refused: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .expect("the series");
    assert!(refused >= 1.0, "{refused}");
    assert_eq!(upstream.seen(), N + 1);
}
