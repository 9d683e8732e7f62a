//! Envoy's ext_authz HTTP filter in front of an upstream, with ratekeeper
//! deciding: the shipped `examples/envoy/ext_authz.yaml`, run by a real
//! Envoy (from PyPI) with only its addresses changed. N requests pass with
//! the RateLimit headers, then ratekeeper's 429 reaches the client with
//! Retry-After, RateLimit and the problem body; the upstream never sees a
//! denied request; keyed by X-API-Key, and by client address through Envoy
//! as a trusted proxy; a client's X-RateLimit-Cost never reaches ratekeeper.

use crate::policy_checks;
use crate::servers as proxies;
use crate::support;

use std::net::{IpAddr, SocketAddr};

use policy_checks::{install, limit, policy};
use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use ratekeeper::domain::Algorithm;
use support::{TestApp, free_port, settings, unique_key};

const N: usize = 3;
const EXAMPLE: &str = include_str!("../../examples/envoy/ext_authz.yaml");

async fn setup() -> (TestApp, Upstream, Envoy) {
    let mut config = settings(None);
    config.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let app = TestApp::spawn(config).await;
    // A day: N requests then a denial on the wall clock, and a fixed
    // window's end is epoch-aligned (an hour's fell between them now and then).
    let api = policy(
        "api",
        vec![limit("l", Algorithm::FixedWindow, N as u64, "1d", None)],
    );
    install(&app, vec![api]);
    let upstream = Upstream::start().await;
    let ratekeeper: SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let port = free_port();
    let bootstrap = substitute(
        EXAMPLE,
        &[
            ("port_value: 10000", format!("port_value: {port}")),
            (
                "port_value: 9000",
                format!("port_value: {}", upstream.addr.port()),
            ),
            (
                "port_value: 8080",
                format!("port_value: {}", ratekeeper.port()),
            ),
            ("http://127.0.0.1:8080", format!("http://{ratekeeper}")),
        ],
    );
    let envoy = Envoy::start(&bootstrap, port).await;
    (app, upstream, envoy)
}

fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

fn request(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    headers
        .iter()
        .fold(client.get(url), |r, (k, v)| r.header(*k, *v))
}

/// N allowed, then denied with ratekeeper's headers and body.
async fn spend(envoy: &Envoy, client: &reqwest::Client, headers: &[(&str, &str)]) {
    let url = envoy.url("/some/page?q=1");
    for i in 0..N {
        let response = request(client, &url, headers).send().await.unwrap();
        assert_eq!(
            response.status(),
            200,
            "request {i} {headers:?}\n{}",
            envoy.log()
        );
        let h = response.headers();
        let ratelimit = h["ratelimit"].to_str().unwrap();
        assert!(
            ratelimit.starts_with(&format!("\"l\";r={};t=", N - 1 - i)),
            "{ratelimit}"
        );
        assert_eq!(h["ratelimit-policy"], "\"l\";q=3;w=86400");
        assert_eq!(h["x-ratelimit-limit"], "3");
        assert_eq!(response.text().await.unwrap(), "hello");
    }
    let response = request(client, &url, headers).send().await.unwrap();
    assert_eq!(response.status(), 429, "{headers:?}");
    let h = response.headers();
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    assert!(h["ratelimit"].to_str().unwrap().starts_with("\"l\";r=0;t="));
    assert_eq!(h["ratelimit-policy"], "\"l\";q=3;w=86400");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["content-type"], "application/problem+json");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["l"]));
}

#[tokio::test]
async fn envoy_ext_authz_passes_the_429_and_keys_by_api_key_and_address() {
    let (app, upstream, envoy) = setup().await;
    let local = client_from("127.0.0.1");
    let key = unique_key("envoy");
    spend(&envoy, &local, &[("x-api-key", &key)]).await;
    assert_eq!(
        upstream.seen(),
        N,
        "the upstream never sees a denied request"
    );
    // Another key has its own budget.
    let other = unique_key("envoy");
    spend(&envoy, &local, &[("x-api-key", &other)]).await;
    assert_eq!(upstream.seen(), 2 * N);

    // No key: by the client's address, which Envoy appends to
    // X-Forwarded-For; ratekeeper believes it as Envoy (127.0.0.1) is
    // trusted, and takes the rightmost untrusted hop, never a forged one.
    let a = client_from("127.0.0.21");
    spend(&envoy, &a, &[("x-forwarded-for", "127.0.0.99")]).await;
    let b = client_from("127.0.0.22");
    spend(&envoy, &b, &[("x-forwarded-for", "127.0.0.21")]).await;
    assert_eq!(upstream.seen(), 4 * N);

    // A client's own cost never reaches ratekeeper (not in allowed_headers):
    // one equal to the limit, which ratekeeper would believe from Envoy,
    // does not drain the bucket in one request; 0 or a huge one (which it
    // would refuse with a 400) does not fail the request. Each spends 1.
    let whole = N.to_string();
    let c = client_from("127.0.0.23");
    spend(&envoy, &c, &[("x-ratelimit-cost", &whole)]).await;
    let d = client_from("127.0.0.24");
    spend(&envoy, &d, &[("x-ratelimit-cost", "1000000")]).await;
    let e = client_from("127.0.0.25");
    spend(&envoy, &e, &[("x-ratelimit-cost", "0")]).await;
    assert_eq!(upstream.seen(), 7 * N);

    // ratekeeper itself gone: `failure_mode_allow: false` denies with
    // Envoy's own 403 (ratekeeper's store outages are answered by ratekeeper).
    app.stop().await;
    let response = request(
        &local,
        &envoy.url("/"),
        &[("x-api-key", &unique_key("envoy"))],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 403, "{}", envoy.log());
    assert_eq!(upstream.seen(), 7 * N);
}
