//! Traefik `forwardAuth` in front of a ratekeeper that has
//! `auth.tokens_file`: the shipped `examples/traefik/dynamic-tokens.yml`,
//! run by a real Traefik with its token placeholder filled in, lets
//! requests through and limits them whatever `Authorization` the client
//! sends, and the application never sees ratekeeper's token; the plain
//! `dynamic.yml` never forwards the client's `Authorization`, so even a
//! client holding a valid ratekeeper token gets ratekeeper's 401.

use crate::policy_checks;
use crate::servers as proxies;
use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use policy_checks::{install, limit, policy};
use proxies::traefik::{EXAMPLE_TOKENS, Traefik};
use ratekeeper::domain::Algorithm;
use support::{TestApp, fresh_dir, settings, unique_key};

const N: usize = 3;
const TRAEFIK_TOKEN: &str = "traefik-check-token-0123456789abcdef";
const ADMIN_TOKEN: &str = "operator-admin-token-0123456789abcdef";

/// An upstream that answers 200 and keeps the Authorization header of
/// every request that reached it.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Upstream {
    async fn start() -> Upstream {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let authorization = headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string());
            record.lock().unwrap().push(authorization);
            async { "hello" }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Upstream { addr, seen }
    }

    fn seen(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().clone()
    }
}

async fn setup(example: Option<&str>, token: Option<&str>) -> (TestApp, Upstream, Traefik) {
    let dir = fresh_dir("traefik-tokens");
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!("check {TRAEFIK_TOKEN}\nadmin {ADMIN_TOKEN}\n"),
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
    let traefik = match example {
        Some(path) => Traefik::start_example(path, ratekeeper, upstream.addr, token).await,
        None => Traefik::start(ratekeeper, upstream.addr).await,
    };
    (app, upstream, traefik)
}

async fn get(traefik: &Traefik, key: &str, authorization: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/page", traefik.port))
        .header("x-api-key", key);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn traefik_authenticates_with_its_own_token() {
    let (app, upstream, traefik) = setup(Some(EXAMPLE_TOKENS), Some(TRAEFIK_TOKEN)).await;
    let before = upstream.seen().len();
    let key = unique_key("traefik-tokens");
    let clients = [
        None,
        Some("Bearer not-a-ratekeeper-token"),
        Some("Basic dTpw"),
    ];
    for authorization in clients {
        assert_eq!(
            get(&traefik, &key, authorization).await,
            200,
            "{authorization:?}"
        );
    }
    assert_eq!(get(&traefik, &key, None).await, 429);
    let seen = upstream.seen();
    assert_eq!(seen.len() - before, N);
    // The application gets neither ratekeeper's token nor the client's.
    assert!(seen.iter().all(Option::is_none), "{seen:?}");
    app.stop().await;
}

#[tokio::test]
async fn a_client_token_never_authenticates_through_traefik() {
    // The plain example: Traefik sends no token, and not the client's.
    let (app, upstream, traefik) = setup(None, None).await;
    let key = unique_key("traefik-tokens");
    let clients = [
        None,
        Some(format!("Bearer {TRAEFIK_TOKEN}")),
        Some(format!("Bearer {ADMIN_TOKEN}")),
    ];
    for authorization in &clients {
        assert_eq!(get(&traefik, &key, authorization.as_deref()).await, 401);
    }
    assert!(upstream.seen().is_empty());
    app.stop().await;
}
