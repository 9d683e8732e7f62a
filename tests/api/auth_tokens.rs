//! Bearer-token authentication over HTTP, in process, with the shipped
//! `config/tokens.example` filled in: 401/403/200 per route and scope, the open
//! endpoints, `auth.protect_metrics`, the metrics, and hot reload of the
//! tokens file (a token added and one revoked, each within 2 s through
//! file events alone; a bad file kept out).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support;

use support::{TestApp, fresh_dir, settings};

/// The tokens put in place of `config/tokens.example`'s placeholders.
const CHECK: &str = "app-check-token-0123456789abcdef";
const CHECK_NGINX: &str = "nginx-check-token-0123456789abcdef";
const ADMIN: &str = "admin-token-0123456789abcdef";

const POLICIES: &str = r#"[policies.api]
limits = [{ name = "minute", limit = 100, window = "1m" }]

[policies.by_authorization]
key_from = ["header:authorization"]
limits = [{ name = "minute", limit = 100, window = "1m" }]
"#;

/// `config/tokens.example` with its placeholders filled in, as its
/// comment tells an operator to do.
fn example() -> PathBuf {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tokens.example");
    let text = std::fs::read_to_string(shipped)
        .unwrap()
        .replace("<nginx-check-token>", CHECK_NGINX)
        .replace("<app-check-token>", CHECK)
        .replace("<admin-token>", ADMIN);
    assert!(!text.contains("-token>"), "a placeholder left:\n{text}");
    let file = fresh_dir("auth-example").join("tokens");
    std::fs::write(&file, text).unwrap();
    file
}

async fn spawn(tokens: &Path, protect_metrics: bool) -> TestApp {
    let dir = fresh_dir("auth-policies");
    let policies = dir.join("policies.toml");
    std::fs::write(&policies, POLICIES).unwrap();
    let mut settings = settings(None);
    settings.policies.file = Some(policies);
    settings.auth.tokens_file = Some(tokens.to_path_buf());
    settings.auth.protect_metrics = protect_metrics;
    // Changes are seen through file events only.
    settings.policies.poll_interval = Duration::from_secs(3600);
    TestApp::spawn(settings).await
}

/// Sends `method path` with `token` (if any); returns the status, the
/// `WWW-Authenticate` header and the body.
async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, Option<String>, String) {
    let mut request = app
        .http
        .request(method.parse().unwrap(), app.url(path))
        .header("content-type", "application/json");
    if method == "POST" {
        let check = json!({"key": "k", "limit": 10, "window": "1m"});
        let body = match path {
            "/v1/checks" => json!({ "checks": [check] }),
            // A real reservation, made with a check token (a settle
            // without a good token is refused before its body is read).
            "/v1/settle" => json!({"reservation": reservation(app).await, "actual": 1}),
            // A lease nobody holds: released/renewed false, still a 200.
            "/v1/release" | "/v1/renew" => json!({
                "key": "k", "limit": 2, "algorithm": "concurrency", "lease_ttl": "1m",
                "lease": "0123456789abcdef0123456789abcdef"
            }),
            _ => check,
        };
        request = request.body(body.to_string());
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (status, challenge, response.text().await.unwrap())
}

/// The reservation of a check made with a check token.
async fn reservation(app: &TestApp) -> String {
    let check = json!({"key": "k", "limit": 1000, "window": "1m", "reservation_ttl": "1m"});
    let request = app.http.post(app.url("/v1/check")).bearer_auth(CHECK);
    let answer: serde_json::Value = request
        .json(&check)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["reservation"]["id"].as_str().unwrap().to_owned()
}

fn code(body: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// (method, path, what a check token gets, what an admin token gets).
const ROUTES: &[(&str, &str, u16, u16)] = &[
    ("POST", "/v1/check", 200, 200),
    ("POST", "/v1/checks", 200, 200),
    ("POST", "/v1/settle", 200, 200),
    ("POST", "/v1/release", 200, 200),
    ("POST", "/v1/renew", 200, 200),
    ("GET", "/v1/auth/api", 200, 200),
    ("POST", "/v1/auth/api/orders/1", 200, 200),
    ("GET", "/v1/policies", 403, 200),
    ("GET", "/v1/top?policy=api", 403, 200),
    ("POST", "/v1/reset", 403, 200),
    ("POST", "/v1/refund", 403, 200),
    ("GET", "/v1/nope", 403, 404),
];

/// Without a token, 401 missing_token; with a wrong one, 401 invalid_token.
async fn assert_refused_without_a_good_token(app: &TestApp, method: &str, path: &str) {
    let what = format!("{method} {path}");
    let (status, challenge, body) = call(app, method, path, None).await;
    assert_eq!(status, 401, "{what} without a token: {body}");
    assert_eq!(challenge.as_deref(), Some(r#"Bearer realm="ratekeeper""#));
    assert_eq!(code(&body), "missing_token", "{what}");

    let (status, challenge, body) = call(app, method, path, Some("wrong-token-0123456789")).await;
    assert_eq!(status, 401, "{what} with a wrong token: {body}");
    let invalid = r#"Bearer realm="ratekeeper", error="invalid_token""#;
    assert_eq!(challenge.as_deref(), Some(invalid));
    assert_eq!(code(&body), "invalid_token", "{what}");
}

/// Each check token gets `as_check` (a 403 with its challenge on admin
/// routes), the admin token `as_admin`.
async fn assert_scopes(app: &TestApp, (method, path, as_check, as_admin): (&str, &str, u16, u16)) {
    let what = format!("{method} {path}");
    for token in [CHECK, CHECK_NGINX] {
        let (status, challenge, body) = call(app, method, path, Some(token)).await;
        assert_eq!(status, as_check, "{what} with a check token: {body}");
        if status == 403 {
            assert_eq!(code(&body), "insufficient_scope", "{what}");
            let scope = r#"Bearer realm="ratekeeper", error="insufficient_scope", scope="admin""#;
            assert_eq!(challenge.as_deref(), Some(scope));
        } else {
            assert_eq!(challenge, None);
        }
    }
    let (status, _, body) = call(app, method, path, Some(ADMIN)).await;
    assert_eq!(status, as_admin, "{what} with the admin token: {body}");
}

#[tokio::test]
async fn each_route_by_scope() {
    let app = spawn(&example(), false).await;
    for &(method, path, as_check, as_admin) in ROUTES {
        assert_refused_without_a_good_token(&app, method, path).await;
        assert_scopes(&app, (method, path, as_check, as_admin)).await;
    }
    // A bad body is refused after authentication, not instead of it.
    let bad = app
        .http
        .post(app.url("/v1/refund"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(json!({"key": "k", "limit": 0, "window": "1m"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    // The open endpoints need nothing, and ignore a wrong token.
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs/"] {
        for token in [None, Some("wrong-token-0123456789")] {
            let (status, challenge, body) = call(&app, "GET", path, token).await;
            assert_eq!(status, 200, "{path}: {body}");
            assert_eq!(challenge, None, "{path}");
        }
    }
    // Another scheme is no bearer credentials at all.
    let basic = app
        .http
        .get(app.url("/v1/policies"))
        .basic_auth("admin", Some(ADMIN))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 401);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        r#"ratekeeper_auth_failures_total{reason="missing"} 13"#,
        r#"ratekeeper_auth_failures_total{reason="invalid"} 12"#,
        r#"ratekeeper_auth_failures_total{reason="scope"} 10"#,
        r#"ratekeeper_auth_failures_total{reason="malformed"} 0"#,
        r#"ratekeeper_auth_tokens{scope="check"} 2"#,
        r#"ratekeeper_auth_tokens{scope="admin"} 1"#,
        r#"ratekeeper_reloads_total{file="tokens",result="ok"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    app.stop().await;
}

/// A token that authenticated is taken off the request: a policy keyed
/// by `Authorization` never sees it (and so never stores it as a key).
#[tokio::test]
async fn the_token_goes_no_further_than_authentication() {
    let app = spawn(&example(), false).await;
    let (status, _, body) = call(&app, "GET", "/v1/auth/by_authorization", Some(CHECK)).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(code(&body), "missing_key", "{body}");
    app.stop().await;
}

#[tokio::test]
async fn protect_metrics_takes_either_scope() {
    let app = spawn(&example(), true).await;
    let (status, challenge, _) = call(&app, "GET", "/metrics", None).await;
    assert_eq!(status, 401);
    assert!(challenge.is_some());
    for token in [CHECK, ADMIN] {
        let (status, _, body) = call(&app, "GET", "/metrics", Some(token)).await;
        assert_eq!(status, 200);
        assert!(body.contains("ratekeeper_auth_failures_total"));
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(call(&app, "GET", path, None).await.0, 200, "{path}");
    }
    app.stop().await;
}

/// Polls until `token` gets `want` on POST /v1/check; panics after 2 s.
async fn wait_for(app: &TestApp, token: &str, want: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let (status, _, _) = call(app, "POST", "/v1/check", Some(token)).await;
        if status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {status} after 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn reload_adds_and_revokes_and_keeps_a_bad_file_out() {
    let dir = fresh_dir("auth-reload");
    let file = dir.join("tokens");
    let old = "old-token-0123456789abcdef";
    let new = "new-token-0123456789abcdef";
    std::fs::write(&file, format!("check {old}\n")).unwrap();
    let app = spawn(&file, false).await;
    assert_eq!(call(&app, "POST", "/v1/check", Some(old)).await.0, 200);
    assert_eq!(call(&app, "POST", "/v1/check", Some(new)).await.0, 401);

    // Added: an edit in place.
    std::fs::write(&file, format!("check {old}\ncheck {new}\n")).unwrap();
    wait_for(&app, new, 200, "the added token").await;

    // Revoked: a new file renamed over the old one.
    let staged = dir.join("tokens.new");
    std::fs::write(&staged, format!("check {new}\n")).unwrap();
    std::fs::rename(&staged, &file).unwrap();
    wait_for(&app, old, 401, "the revoked token").await;
    assert_eq!(call(&app, "POST", "/v1/check", Some(new)).await.0, 200);

    // A bad file (and an empty one, which would turn authentication off)
    // is kept out: the tokens in force stay, and each is counted.
    for (n, bad) in ["check short\n", "", "write new-token-0123456789abcdef\n"]
        .iter()
        .enumerate()
    {
        std::fs::write(&file, bad).unwrap();
        let want = format!(
            r#"ratekeeper_reloads_total{{file="tokens",result="error"}} {}"#,
            n + 1
        );
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let metrics = app.get("/metrics").await.text().await.unwrap();
            if metrics.contains(&want) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{want} not within 2 s:\n{metrics}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(call(&app, "POST", "/v1/check", Some(new)).await.0, 200);
        assert_eq!(call(&app, "POST", "/v1/check", Some(old)).await.0, 401);
    }
    app.stop().await;
}

/// The right token among many is found wherever it sits, and tokens that
/// differ from one only in their last byte or length are not.
#[tokio::test]
async fn many_tokens_and_near_misses() {
    let dir = fresh_dir("auth-many");
    let file = dir.join("tokens");
    let tokens: Vec<String> = (0..64)
        .map(|i| format!("token-{i:04}-0123456789abcdef"))
        .collect();
    let text: String = tokens.iter().map(|t| format!("check {t}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let app = spawn(&file, false).await;
    for token in [&tokens[0], &tokens[31], &tokens[63]] {
        assert_eq!(call(&app, "POST", "/v1/check", Some(token)).await.0, 200);
    }
    let last = &tokens[63];
    let near = [
        format!("{}g", &last[..last.len() - 1]),
        last[..last.len() - 1].to_string(),
        format!("{last}0"),
        last.to_uppercase(),
    ];
    for token in &near {
        assert_eq!(
            call(&app, "POST", "/v1/check", Some(token)).await.0,
            401,
            "{token}"
        );
    }
    app.stop().await;
}

/// RFC 6750 §3.1: a malformed `Authorization` header is a 400
/// `invalid_request`, counted apart from missing and invalid tokens; another
/// scheme is no bearer credentials at all (401 with no error code).
#[tokio::test]
async fn a_malformed_authorization_header_is_400_invalid_request() {
    let app = spawn(&example(), false).await;
    let send = |values: &[&str]| {
        let mut request = app
            .http
            .post(app.url("/v1/check"))
            .header("content-type", "application/json")
            .body(json!({"key": "k", "limit": 10, "window": "1m"}).to_string());
        for value in values {
            request = request.header("authorization", *value);
        }
        request.send()
    };
    let bearer = format!("Bearer {CHECK}");
    let malformed: &[&[&str]] = &[
        &["Bearer"],
        &["Bearer "],
        &["bearer a b"],
        &["Bearer \"quoted-token-0123456789\""],
        &[&bearer, &bearer],
    ];
    for values in malformed {
        let response = send(values).await.unwrap();
        assert_eq!(response.status(), 400, "{values:?}");
        let challenge = response.headers()["www-authenticate"].to_str().unwrap();
        assert_eq!(
            challenge,
            r#"Bearer realm="ratekeeper", error="invalid_request""#
        );
        let body = response.text().await.unwrap();
        assert_eq!(code(&body), "invalid_request", "{body}");
        assert!(!body.contains(CHECK), "{body}");
    }
    let basic = send(&["Basic dXNlcjpwYXNz"]).await.unwrap();
    assert_eq!(basic.status(), 401);
    assert_eq!(
        basic.headers()["www-authenticate"],
        r#"Bearer realm="ratekeeper""#
    );
    assert_eq!(send(&[&bearer]).await.unwrap().status(), 200);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let line = r#"ratekeeper_auth_failures_total{reason="malformed"} 5"#;
    assert!(metrics.contains(line), "{line} not in\n{metrics}");
    app.stop().await;
}
