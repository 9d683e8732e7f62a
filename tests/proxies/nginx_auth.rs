//! nginx `auth_request` in front of an upstream, with ratekeeper deciding:
//! the shipped `examples/nginx/ratekeeper.conf`, run by a real nginx. N
//! requests pass, then 429 with Retry-After and RateLimit; the upstream
//! never sees a denied request; keyed by X-API-Key, and by client address
//! through nginx as a trusted proxy (clients bind distinct loopback
//! addresses, nginx connects to ratekeeper from 127.0.0.1).

use crate::policy_checks;
use crate::servers as proxies;
use crate::support;

use std::net::{IpAddr, SocketAddr};

use policy_checks::{install, limit, policy};
use proxies::Upstream;
use proxies::nginx::Nginx;
use ratekeeper::domain::Algorithm;
use support::{RedisServer, TestApp, settings, unique_key};

const N: usize = 3;

async fn setup(redis: Option<&str>) -> (TestApp, Upstream, Nginx) {
    let (app, ratekeeper) = api_behind_nginx(settings(redis)).await;
    let upstream = Upstream::start().await;
    let nginx = Nginx::start(ratekeeper, upstream.addr);
    (app, upstream, nginx)
}

/// The app with `config`, nginx (127.0.0.1) as a trusted proxy, and the
/// policy `api` (N a day, denials 403); and its address.
async fn api_behind_nginx(mut config: ratekeeper::config::Settings) -> (TestApp, SocketAddr) {
    config.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let app = TestApp::spawn(config).await;
    // A day: N requests then a denial on the wall clock, and a fixed
    // window's end is epoch-aligned (an hour's fell between them now and then).
    let mut api = policy(
        "api",
        vec![limit("l", Algorithm::FixedWindow, N as u64, "1d", None)],
    );
    api.forward.deny_status = 403;
    install(&app, vec![api]);
    let ratekeeper: SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    (app, ratekeeper)
}

fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// N allowed, then denied, for one client; returns what it saw.
async fn spend(nginx: &Nginx, client: &reqwest::Client, headers: &[(&str, &str)]) {
    let url = format!("http://127.0.0.1:{}/some/page?q=1", nginx.port);
    for i in 0..N {
        let mut request = client.get(&url);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "request {i} {headers:?}");
        let ratelimit = response.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            ratelimit.starts_with(&format!("\"l\";r={};t=", N - 1 - i)),
            "{ratelimit}"
        );
        assert_eq!(response.text().await.unwrap(), "hello");
    }
    let mut request = client.post(&url).body("a body nginx must not forward");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 429, "{headers:?}");
    let h = response.headers();
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    assert!(h["ratelimit"].to_str().unwrap().starts_with("\"l\";r=0;t="));
    assert_eq!(h["ratelimit-policy"], "\"l\";q=3;w=86400");
    assert_eq!(h["content-type"], "application/problem+json");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["status"], 429);
}

async fn keyed_by_api_key_and_by_client_address(redis: Option<&str>) {
    let (_app, upstream, nginx) = setup(redis).await;
    let local = client_from("127.0.0.1");
    let key = unique_key("nginx");
    spend(&nginx, &local, &[("x-api-key", &key)]).await;
    assert_eq!(
        upstream.seen(),
        N,
        "the upstream never sees a denied request"
    );
    // Another key has its own budget.
    let other = unique_key("nginx");
    spend(&nginx, &local, &[("x-api-key", &other)]).await;
    assert_eq!(upstream.seen(), 2 * N);

    // No key: by the client's address, which nginx forwards and
    // ratekeeper believes because nginx (127.0.0.1) is trusted.
    let a = client_from("127.0.0.21");
    spend(&nginx, &a, &[]).await;
    // A forged X-Forwarded-For is replaced by nginx: still 127.0.0.21.
    let response = a
        .get(format!("http://127.0.0.1:{}/", nginx.port))
        .header("x-forwarded-for", "203.0.113.99")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    // Another address has its own budget.
    let b = client_from("127.0.0.22");
    spend(&nginx, &b, &[("x-forwarded-for", "127.0.0.21")]).await;
    assert_eq!(upstream.seen(), 4 * N);
    // A client's own cost never reaches ratekeeper: 0 does not bypass the
    // limit (each request spends 1), nor does a huge cost empty a bucket.
    let c = client_from("127.0.0.23");
    spend(&nginx, &c, &[("x-ratelimit-cost", "0")]).await;
    let d = client_from("127.0.0.24");
    spend(&nginx, &d, &[("x-ratelimit-cost", "1000000")]).await;
    assert_eq!(upstream.seen(), 6 * N);
}

#[tokio::test]
async fn nginx_auth_request_on_the_embedded_store() {
    keyed_by_api_key_and_by_client_address(None).await;
}

#[tokio::test]
async fn nginx_auth_request_on_redis() {
    let redis = RedisServer::start();
    keyed_by_api_key_and_by_client_address(Some(&redis.url())).await;
}

/// Issue 30 through a real nginx: a block set by API denies the key's
/// requests at once (the upstream sees none), its deletion lets them
/// through, and an override set by API is the limit nginx's clients meet.
/// A forward-auth key is the one the policy's `key_from` makes
/// (`h:x-api-key=<value>`).
#[tokio::test]
async fn blocks_and_overrides_set_by_api_apply_behind_nginx() {
    let redis = RedisServer::start();
    let (app, upstream, nginx) = setup(Some(&redis.url())).await;
    let client = client_from("127.0.0.1");
    let url = format!("http://127.0.0.1:{}/page", nginx.port);
    let get = |key: &str| client.get(&url).header("x-api-key", key).send();
    let put =
        |path: String, body: serde_json::Value| app.http.put(app.url(&path)).json(&body).send();
    let blocked = unique_key("nginx-blocked");
    let status = put(
        format!("/v1/blocks/h:x-api-key={blocked}"),
        serde_json::json!({"reason": "abuse"}),
    )
    .await
    .unwrap()
    .status();
    assert_eq!(status, 201);
    for _ in 0..2 {
        assert_eq!(get(&blocked).await.unwrap().status(), 429);
    }
    assert_eq!(
        upstream.seen(),
        0,
        "a blocked key's request reached the upstream"
    );
    let path = app.url(&format!("/v1/blocks/h:x-api-key={blocked}"));
    assert_eq!(app.http.delete(path).send().await.unwrap().status(), 204);
    assert_eq!(get(&blocked).await.unwrap().status(), 200);
    // Nothing was spent while blocked: N - 1 more pass.
    for _ in 1..N {
        assert_eq!(get(&blocked).await.unwrap().status(), 200);
    }
    assert_eq!(get(&blocked).await.unwrap().status(), 429);

    let raised = unique_key("nginx-raised");
    let body = serde_json::json!({"limits": [{"name": "l", "limit": N + 2}]});
    let status = put(format!("/v1/overrides/api/h:x-api-key={raised}"), body)
        .await
        .unwrap()
        .status();
    assert_eq!(status, 201);
    for i in 0..N + 2 {
        let response = get(&raised).await.unwrap();
        assert_eq!(response.status(), 200, "request {i}");
    }
    let response = get(&raised).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["ratelimit-policy"], "\"l\";q=5;w=86400");
}

/// `examples/nginx/README.md`'s trial, as a newcomer runs it: the real
/// binary with the example's `ratekeeper.toml` (which names its
/// `policies.toml`), `python3 -m http.server` as the application, and nginx
/// from the example's `nginx.conf`; five requests a minute pass, the sixth
/// is a 429 with Retry-After.
#[tokio::test]
async fn the_example_runs_as_its_readme_says() {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/nginx/ratekeeper.toml"
    );
    let (_ratekeeper, addr) = support::binary::serve(&[("RATEKEEPER_CONFIG", config)]);
    let site = support::fresh_dir("nginx-app");
    std::fs::write(site.join("index.html"), "hello from the application\n").unwrap();
    let port = support::free_port();
    let app = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--directory")
        .arg(&site)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 runs the example's application");
    let _app = support::binary::KillOnDrop(app);
    support::wait_until(
        std::time::Duration::from_secs(10),
        "the application listens",
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    let upstream: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let nginx = Nginx::start(addr.parse().unwrap(), upstream);

    let url = format!("http://127.0.0.1:{}/", nginx.port);
    let client = reqwest::Client::new();
    // The policy's window is a calendar minute: all six within one.
    support::early_in_a_minute(std::time::Duration::from_secs(50)).await;
    for i in 0..5 {
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 200, "request {i}");
        let ratelimit = response.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            ratelimit.starts_with(&format!("\"minute\";r={};t=", 4 - i)),
            "{ratelimit}"
        );
        assert_eq!(
            response.text().await.unwrap(),
            "hello from the application\n"
        );
    }
    let denied = client.get(&url).send().await.unwrap();
    assert_eq!(denied.status(), 429);
    let retry: u64 = denied.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(denied.headers()["ratelimit-policy"], "\"minute\";q=5;w=60");
    // Another client address (nginx's X-Forwarded-For, believed because
    // the example trusts nginx) has its own budget.
    let other = client_from("127.0.0.2").get(&url).send().await.unwrap();
    assert_eq!(other.status(), 200);
}

/// `examples/nginx/ratekeeper-tls.conf`: the subrequest to a ratekeeper
/// with `[server.tls]` and client certificates goes over https://, nginx
/// presenting its own certificate; limits apply as in plaintext. Without
/// nginx's certificate, the handshake fails and nginx answers 500: nothing
/// passes unchecked.
#[tokio::test]
async fn nginx_auth_request_to_https_forward_auth_with_a_client_certificate() {
    use ratekeeper::tls::server::{Listener, ServerTls, ServerTlsFiles};
    use support::tls::Certs;
    let certs = Certs::new("nginx-tls");
    let mut config = settings(None);
    let files = ServerTlsFiles {
        cert_file: certs.crt("server"),
        key_file: certs.key("server"),
        client_ca_file: Some(certs.crt("ca")),
    };
    let tls = ServerTls::load(Listener::Http, files).unwrap();
    config.server.tls = Some(std::sync::Arc::new(tls));
    let (_app, ratekeeper) = api_behind_nginx(config).await;
    let upstream = Upstream::start().await;
    let file = |path: std::path::PathBuf| support::path_str(&path).to_string();
    let mut pairs = vec![
        (
            "proxy_ssl_name ratekeeper.internal;",
            "proxy_ssl_name localhost;".to_string(),
        ),
        ("/etc/nginx/ratekeeper/ca.crt", file(certs.crt("ca"))),
        (
            "/etc/nginx/ratekeeper/client.crt",
            file(certs.crt("client")),
        ),
        (
            "/etc/nginx/ratekeeper/client.key",
            file(certs.key("client")),
        ),
    ];
    let tls_example = proxies::nginx::TLS_EXAMPLE;
    let nginx = Nginx::start_from(tls_example, ratekeeper, upstream.addr, &pairs);
    let local = client_from("127.0.0.1");
    spend(&nginx, &local, &[("x-api-key", &unique_key("nginx-tls"))]).await;
    assert_eq!(upstream.seen(), N);

    // nginx without its client certificate: refused at the handshake.
    pairs.truncate(2);
    let uncertified = "        proxy_ssl_certificate /etc/nginx/ratekeeper/client.crt;
        proxy_ssl_certificate_key /etc/nginx/ratekeeper/client.key;
";
    pairs.insert(0, (uncertified, String::new()));
    let bare = Nginx::start_from(tls_example, ratekeeper, upstream.addr, &pairs);
    let url = format!("http://127.0.0.1:{}/page", bare.port);
    let response = local
        .get(url)
        .header("x-api-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500, "nginx let it through unchecked");
    assert_eq!(upstream.seen(), N);
    // ...and it was ratekeeper that refused it, for its missing certificate.
    let (ca, cert, key) = (certs.crt("ca"), certs.crt("client"), certs.key("client"));
    let addr = ratekeeper.to_string();
    let mut scrape = support::tls::TlsConnection::open(&addr, &ca, Some((&cert, &key)))
        .await
        .unwrap();
    let (status, body) = scrape.get("/metrics").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let series =
        r#"ratekeeper_tls_handshake_failures_total{listener="http",reason="client_certificate"} "#;
    let refused: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(refused >= 1.0, "{body}");
}

/// nginx's `auth_request` subrequest carries the client's headers, so a
/// client's `traceparent` reaches forward-auth: with the example's config
/// and traces on (`parentbased_always_off`: only what a caller sampled),
/// the forward-auth span is a child of the client's span, and its trace
/// holds the decision.
#[tokio::test]
async fn the_callers_traceparent_reaches_forward_auth_through_nginx() {
    use support::otlp::{Receiver, named};
    let receiver = Receiver::start();
    let endpoint = format!("http://127.0.0.1:{}", receiver.grpc);
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/nginx/ratekeeper.toml"
    );
    let (_ratekeeper, addr) = support::binary::serve(&[
        ("RATEKEEPER_CONFIG", config),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_TRACES_SAMPLER", "parentbased_always_off"),
    ]);
    let upstream = Upstream::start().await;
    let nginx = Nginx::start(addr.parse().unwrap(), upstream.addr);
    let (trace, parent) = ("6af7651916cd43dd8448eb211c80319c", "b8ad6b7169203331");
    let response = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/", nginx.port))
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let spans = receiver.trace(trace, |s| s.iter().any(|s| s["kind"] == 2));
    let server: Vec<_> = spans.iter().filter(|s| s["kind"] == 2).collect();
    assert_eq!(server.len(), 1, "{spans:#?}");
    let auth = server[0];
    assert!(
        auth["name"].as_str().unwrap().contains("/v1/auth/{policy}"),
        "{auth}"
    );
    assert_eq!(auth["parent_span_id"], parent);
    assert_eq!(
        auth["attributes"]["ratekeeper.decision"], "allowed",
        "{auth}"
    );
    let traced = receiver.trace(trace, |s| !named(s, "store").is_empty());
    assert!(!named(&traced, "store").is_empty(), "{traced:#?}");
}
