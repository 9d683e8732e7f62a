//! The shipped Envoy ext_authz example in front of a ratekeeper that has
//! `auth.tokens_file`: with Envoy's `check` token in the example's
//! `headers_to_add` (as its comment says), requests pass and are limited
//! whatever `Authorization` the client sends; the example as shipped (the
//! client's header replaced by an empty one) lets nothing through, even a
//! client holding a valid ratekeeper token.

use crate::policy_checks;
use crate::servers as proxies;
use crate::support;

use std::net::SocketAddr;

use policy_checks::{install, limit, policy};
use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use ratekeeper::domain::Algorithm;
use support::{TestApp, free_port, fresh_dir, settings};

const N: usize = 3;
const EXAMPLE: &str = include_str!("../../examples/envoy/ext_authz.yaml");
const ENVOY_TOKEN: &str = "envoy-check-token-0123456789abcdef";
const ADMIN_TOKEN: &str = "operator-admin-token-0123456789abcdef";

async fn setup(envoy_token: Option<&str>) -> (TestApp, Upstream, Envoy) {
    let dir = fresh_dir("envoy-tokens");
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!("check {ENVOY_TOKEN}\nadmin {ADMIN_TOKEN}\n"),
    )
    .unwrap();
    let mut config = settings(None);
    config.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    config.auth.tokens_file = Some(tokens);
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
    let mut pairs = vec![
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
    ];
    if let Some(token) = envoy_token {
        pairs.push(("value: \"none\"", format!("value: \"Bearer {token}\"")));
    }
    let envoy = Envoy::start(&substitute(EXAMPLE, &pairs), port).await;
    (app, upstream, envoy)
}

async fn get(envoy: &Envoy, authorization: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .get(envoy.url("/page"))
        .header("x-api-key", "k1");
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn envoy_authenticates_with_its_own_token() {
    let (app, upstream, envoy) = setup(Some(ENVOY_TOKEN)).await;
    let clients = [
        None,
        Some("Bearer not-a-ratekeeper-token"),
        Some("Basic dTpw"),
    ];
    for authorization in clients {
        let (status, body) = get(&envoy, authorization).await;
        assert_eq!(status, 200, "{authorization:?}: {body}\n{}", envoy.log());
    }
    assert_eq!(get(&envoy, None).await.0, 429);
    assert_eq!(upstream.seen(), N);
    app.stop().await;
}

#[tokio::test]
async fn a_client_token_never_authenticates_through_envoy() {
    let (app, upstream, envoy) = setup(None).await;
    let clients = [
        None,
        Some(format!("Bearer {ENVOY_TOKEN}")),
        Some(format!("Bearer {ADMIN_TOKEN}")),
    ];
    for authorization in &clients {
        let (status, body) = get(&envoy, authorization.as_deref()).await;
        assert_eq!(status, 401, "{authorization:?}: {body}\n{}", envoy.log());
    }
    assert_eq!(upstream.seen(), 0);
    app.stop().await;
}
