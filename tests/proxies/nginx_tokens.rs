//! The shipped nginx example in front of a ratekeeper that has
//! `auth.tokens_file`: with nginx's `check` token on the example's
//! `Authorization` line (as its comment says), requests pass and are
//! limited; a client's own `Authorization` header, even one holding a
//! valid ratekeeper token, neither authenticates nor gets in the way; the
//! example left as shipped (no token) lets nothing through.

use crate::policy_checks;
use crate::servers as proxies;
use crate::support;

use std::net::SocketAddr;

use policy_checks::{install, limit, policy};
use proxies::Upstream;
use proxies::nginx::Nginx;
use ratekeeper::domain::Algorithm;
use support::{TestApp, fresh_dir, settings};

const NGINX_TOKEN: &str = "nginx-check-token-0123456789abcdef";
const ADMIN_TOKEN: &str = "operator-admin-token-0123456789abcdef";
const N: usize = 3;

async fn setup(nginx_token: Option<&str>) -> (TestApp, Upstream, Nginx) {
    let dir = fresh_dir("nginx-tokens");
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!("check {NGINX_TOKEN}\nadmin {ADMIN_TOKEN}\n"),
    )
    .unwrap();
    let mut config = settings(None);
    config.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    config.auth.tokens_file = Some(tokens);
    let app = TestApp::spawn(config).await;
    // A day: N requests then a denial on the wall clock, and a fixed
    // window's end is epoch-aligned (an hour's fell between them now and then).
    let mut api = policy(
        "api",
        vec![limit("l", Algorithm::FixedWindow, N as u64, "1d", None)],
    );
    api.forward.deny_status = 403;
    install(&app, vec![api]);
    let upstream = Upstream::start().await;
    let ratekeeper: SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let nginx = Nginx::start_with_token(ratekeeper, upstream.addr, nginx_token);
    (app, upstream, nginx)
}

async fn get(nginx: &Nginx, authorization: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/page", nginx.port))
        .header("x-api-key", "k1");
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn nginx_authenticates_with_its_own_token() {
    let (app, upstream, nginx) = setup(Some(NGINX_TOKEN)).await;
    // The client's header is replaced, whatever it holds.
    let clients = [
        None,
        Some("Bearer not-a-ratekeeper-token"),
        Some("Basic dTpw"),
    ];
    for authorization in clients {
        assert_eq!(get(&nginx, authorization).await, 200, "{authorization:?}");
    }
    // The limit still applies: N spent, then the 429.
    assert_eq!(get(&nginx, None).await, 429);
    assert_eq!(upstream.seen(), N);
    app.stop().await;
}

#[tokio::test]
async fn a_client_token_never_authenticates_through_nginx() {
    // The example as shipped: nginx sends no token.
    let (app, upstream, nginx) = setup(None).await;
    let clients = [
        None,
        Some(format!("Bearer {NGINX_TOKEN}")),
        Some(format!("Bearer {ADMIN_TOKEN}")),
    ];
    for authorization in &clients {
        // auth_request passes ratekeeper's 401 on to the client.
        assert_eq!(get(&nginx, authorization.as_deref()).await, 401);
    }
    assert_eq!(upstream.seen(), 0);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let missing = r#"ratekeeper_auth_failures_total{reason="missing"} 3"#;
    assert!(metrics.contains(missing), "{metrics}");
    app.stop().await;
}
