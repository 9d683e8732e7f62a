//! `/v1/auth/{policy}`, black box, on the embedded store and on a real
//! Redis: answers and headers, key sources and templates, trusted proxies
//! and spoofing through real requests (the peer is 127.0.0.1), the cost
//! header, missing keys, deny statuses, outages.

mod policy_checks;
mod support;

use std::time::Duration;

use policy_checks::{install, limit, policy};
use ratekeeper::domain::forward::{ForwardAuth, KeySpec};
use ratekeeper::domain::{Algorithm, FailureMode, Policy};
use reqwest::header::HeaderMap;
use serde_json::Value;
use support::{RedisServer, TestApp, settings, unique_key};

/// Runs a scenario on a fresh embedded store and on a fresh Redis, with
/// 127.0.0.1 a trusted proxy or not.
macro_rules! on_both_stores {
    ($trusted:expr => $($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                let app = super::spawn(None, $trusted).await;
                super::$name(&app).await;
            }

            #[tokio::test]
            async fn redis() {
                let redis = super::RedisServer::start();
                let app = super::spawn(Some(&redis.url()), $trusted).await;
                super::$name(&app).await;
            }
        }
    )*};
}

on_both_stores!(false =>
    allowed_then_denied_with_headers_and_problem_body,
    any_method_and_any_rest_path,
    key_sources_in_order_and_templates,
    forwarding_headers_from_an_untrusted_peer_are_ignored,
    the_cost_header,
    a_missing_key_and_a_key_too_long,
    deny_status_403_and_unknown_policy,
    shadow_policies_answer_200_with_the_real_headers,
);

on_both_stores!(true =>
    behind_a_trusted_proxy_the_rightmost_untrusted_hop_is_the_client,
);

async fn spawn(redis: Option<&str>, trusted: bool) -> TestApp {
    let mut config = settings(redis);
    if trusted {
        config.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    }
    TestApp::spawn(config).await
}

/// One limit `l` of `n` an hour, keyed by `key_from`, with an override
/// of 1000 for each of `marked` (so `X-RateLimit-Limit` shows which key
/// was used).
fn keyed(name: &str, n: u64, key_from: &[&str], marked: &[&str]) -> Policy {
    let mut p = policy(
        name,
        vec![limit("l", Algorithm::FixedWindow, n, "1h", None)],
    );
    if !key_from.is_empty() {
        p.forward = ForwardAuth {
            key_from_text: key_from.iter().map(|s| s.to_string()).collect(),
            key_from: key_from
                .iter()
                .map(|s| KeySpec::parse(s).unwrap())
                .collect(),
            ..ForwardAuth::default()
        };
    }
    for key in marked {
        let big = vec![limit("l", Algorithm::FixedWindow, 1000, "1h", None)];
        p.overrides.insert(key.to_string(), big.into());
    }
    p
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body))
    }
    fn limit(&self) -> u64 {
        self.header("x-ratelimit-limit").unwrap().parse().unwrap()
    }
    fn remaining(&self) -> u64 {
        self.header("x-ratelimit-remaining")
            .unwrap()
            .parse()
            .unwrap()
    }
}

async fn call(app: &TestApp, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = app.http.request(method.parse().unwrap(), app.url(path));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

async fn get(app: &TestApp, path: &str, headers: &[(&str, &str)]) -> Answer {
    call(app, "GET", path, headers).await
}

async fn allowed_then_denied_with_headers_and_problem_body(app: &TestApp) {
    let mut p = policy(
        "api",
        vec![
            limit("burst", Algorithm::FixedWindow, 3, "1h", None),
            limit("daily", Algorithm::FixedWindow, 10, "1d", None),
        ],
    );
    p.description = None;
    install(app, vec![p]);
    let key = unique_key("fa");
    let auth = [("x-api-key", key.as_str())];
    for left in (0..3).rev() {
        let a = get(app, "/v1/auth/api", &auth).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.body, "");
        assert_eq!(a.remaining(), left);
        assert_eq!(
            a.header("ratelimit-policy"),
            Some("\"burst\";q=3;w=3600, \"daily\";q=10;w=86400")
        );
        let ratelimit = a.header("ratelimit").unwrap();
        assert!(
            ratelimit.starts_with(&format!("\"burst\";r={left};t=")),
            "{ratelimit}"
        );
        assert!(a.header("retry-after").is_none());
        assert!(a.header("ratelimit-degraded").is_none());
    }
    let a = get(app, "/v1/auth/api", &auth).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.header("content-type"), Some("application/problem+json"));
    let retry: u64 = a.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    assert_eq!(a.remaining(), 0);
    assert!(a.header("ratelimit").unwrap().starts_with("\"burst\";r=0;"));
    let body = a.json();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    assert!(body["title"].as_str().unwrap().contains("quota"));
    assert_eq!(body["violated-policies"], serde_json::json!(["burst"]));
}

async fn any_method_and_any_rest_path(app: &TestApp) {
    install(
        app,
        vec![keyed("p", 100, &["header:x-api-key", "{path}"], &[])],
    );
    let key = unique_key("m");
    let mut left = 100;
    for (method, path) in [
        ("GET", "/v1/auth/p"),
        ("POST", "/v1/auth/p/orders/1?x=1"),
        ("DELETE", "/v1/auth/p/a/b/c"),
        ("PUT", "/v1/auth/p/"),
        ("PATCH", "/v1/auth/p"),
        ("OPTIONS", "/v1/auth/p"),
    ] {
        left -= 1;
        let a = call(app, method, path, &[("x-api-key", &key)]).await;
        assert_eq!(a.status, 200, "{method} {path}: {}", a.body);
        assert_eq!(
            (a.status, a.remaining()),
            (200, left),
            "{method} {path}: {}",
            a.body
        );
    }
    // `{path}` keys by the rest (without the query) when asked for.
    let a = get(app, "/v1/auth/p/orders/1", &[]).await;
    assert_eq!(a.remaining(), 99);
    let a = get(app, "/v1/auth/p/orders/1", &[]).await;
    assert_eq!(a.remaining(), 98);
    let a = get(app, "/v1/auth/p/orders/2", &[]).await;
    assert_eq!(a.remaining(), 99);
    let a = get(app, "/v1/auth/p/", &[]).await;
    assert_eq!(a.remaining(), 99);
    // Without a rest and without an API key, no source is present.
    assert_eq!(get(app, "/v1/auth/p", &[]).await.status, 401);
}

async fn key_sources_in_order_and_templates(app: &TestApp) {
    let key = unique_key("k");
    let tenant = unique_key("t");
    let templated = format!("{tenant}:127.0.0.1");
    install(
        app,
        vec![
            // The default: X-API-Key, else the peer's address.
            keyed("dflt", 5, &[], &[&key, "127.0.0.1"]),
            keyed(
                "tmpl",
                5,
                &["{header:x-tenant}:{ip}", "const:everyone"],
                &[&templated],
            ),
            keyed("net", 5, &["ip_prefix:24,64"], &["127.0.0.0/24"]),
        ],
    );
    assert_eq!(
        get(app, "/v1/auth/dflt", &[("x-api-key", &key)])
            .await
            .limit(),
        1000
    );
    assert_eq!(
        get(app, "/v1/auth/dflt", &[("x-api-key", "other")])
            .await
            .limit(),
        5
    );
    assert_eq!(get(app, "/v1/auth/dflt", &[]).await.limit(), 1000);
    assert_eq!(
        get(app, "/v1/auth/dflt", &[("x-api-key", "")])
            .await
            .limit(),
        1000
    );
    assert_eq!(
        get(app, "/v1/auth/tmpl", &[("x-tenant", &tenant)])
            .await
            .limit(),
        1000
    );
    // No tenant: the template is absent, the constant answers; one bucket.
    let first = get(app, "/v1/auth/tmpl", &[]).await;
    let second = get(app, "/v1/auth/tmpl", &[("x-other", "1")]).await;
    assert_eq!(
        (first.limit(), second.remaining()),
        (5, first.remaining() - 1)
    );
    assert_eq!(get(app, "/v1/auth/net", &[]).await.limit(), 1000);
}

async fn forwarding_headers_from_an_untrusted_peer_are_ignored(app: &TestApp) {
    install(
        app,
        vec![keyed("ip", 5, &["ip"], &["127.0.0.1", "203.0.113.5"])],
    );
    for forged in [
        &[("x-forwarded-for", "203.0.113.5")][..],
        &[("x-real-ip", "203.0.113.5")],
        &[
            ("x-forwarded-for", "10.9.9.9, 203.0.113.5"),
            ("x-forwarded-for", "203.0.113.6"),
        ],
    ] {
        let a = get(app, "/v1/auth/ip", forged).await;
        assert_eq!(a.limit(), 1000, "keyed by the peer: {forged:?}");
    }
    install(app, vec![keyed("ip", 5, &["ip"], &["203.0.113.5"])]);
    let a = get(app, "/v1/auth/ip", &[("x-forwarded-for", "203.0.113.5")]).await;
    assert_eq!(a.limit(), 5, "a forged header must not reach the override");
}

async fn behind_a_trusted_proxy_the_rightmost_untrusted_hop_is_the_client(app: &TestApp) {
    let a5 = unique_ip();
    let a6 = unique_ip();
    install(
        app,
        vec![keyed("ip", 5, &["ip"], &[&a5, "127.0.0.1", "2001:db8::7"])],
    );
    let cases: Vec<(Vec<(&str, String)>, u64)> = vec![
        (vec![("x-forwarded-for", a5.clone())], 1000),
        // The client forged the left part; our proxy appended the right.
        (vec![("x-forwarded-for", format!("{a6}, {a5}"))], 1000),
        (vec![("x-forwarded-for", format!("{a5}, {a6}"))], 5),
        // Several headers are one list, in order; trusted hops are skipped.
        (
            vec![
                ("x-forwarded-for", a6.clone()),
                ("x-forwarded-for", format!("{a5}, 127.0.0.1")),
            ],
            1000,
        ),
        // Garbage: nothing left of it is believed; the peer is the client.
        (vec![("x-forwarded-for", format!("{a5}, not-an-ip"))], 1000),
        (vec![("x-forwarded-for", format!("{a6}, not-an-ip"))], 1000),
        (vec![("x-forwarded-for", "::ffff:127.0.0.1".into())], 1000),
        (vec![("x-forwarded-for", "[2001:db8::7]:443".into())], 1000),
        (vec![("x-forwarded-for", format!("::ffff:{a5}"))], 1000),
        (vec![("x-real-ip", a5.clone())], 1000),
        (vec![("x-real-ip", a6.clone())], 5),
    ];
    for (headers, want) in cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let a = get(app, "/v1/auth/ip", &headers).await;
        assert_eq!((a.status, a.limit()), (200, want), "{headers:?}");
    }
}

/// A documentation address (198.18.0.0/15) no other test uses.
fn unique_ip() -> String {
    let key = unique_key("");
    let n: u32 = key
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!(
        "198.{}.{}.{}",
        18 + (n % 2),
        (n >> 8) % 256,
        (n >> 16) % 254 + 1
    )
}

async fn the_cost_header(app: &TestApp) {
    install(app, vec![keyed("c", 10, &["header:x-api-key"], &[])]);
    let key = unique_key("c");
    let a = get(
        app,
        "/v1/auth/c",
        &[("x-api-key", &key), ("x-ratelimit-cost", "4")],
    )
    .await;
    assert_eq!((a.status, a.remaining()), (200, 6));
    let a = get(
        app,
        "/v1/auth/c",
        &[("x-api-key", &key), ("x-ratelimit-cost", "0")],
    )
    .await;
    assert_eq!((a.status, a.remaining()), (200, 6));
    let a = get(
        app,
        "/v1/auth/c",
        &[("x-api-key", &key), ("x-ratelimit-cost", "7")],
    )
    .await;
    assert_eq!((a.status, a.remaining()), (429, 6));
    for bad in ["-1", "two", "1.0", "11"] {
        let a = get(
            app,
            "/v1/auth/c",
            &[("x-api-key", &key), ("x-ratelimit-cost", bad)],
        )
        .await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        let body = a.json();
        assert_eq!(body["error"]["code"], "invalid_request");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("X-RateLimit-Cost: "),
            "{body}"
        );
    }
}

async fn a_missing_key_and_a_key_too_long(app: &TestApp) {
    let mut strict = keyed(
        "strict",
        5,
        &["header:x-api-key", "header:authorization"],
        &[],
    );
    let mut custom = strict.clone();
    custom.name = "custom".into();
    custom.forward.missing_key_status = 403;
    strict.description = None;
    install(app, vec![strict, custom]);
    let a = get(app, "/v1/auth/strict", &[]).await;
    assert_eq!(a.status, 401, "{}", a.body);
    let body = a.json();
    assert_eq!(body["error"]["code"], "missing_key");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("header:x-api-key") && message.contains("header:authorization"),
        "{message}"
    );
    assert_eq!(get(app, "/v1/auth/custom", &[]).await.status, 403);
    let long = "k".repeat(513);
    let a = get(app, "/v1/auth/strict", &[("x-api-key", &long)]).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("key_from")
    );
}

async fn deny_status_403_and_unknown_policy(app: &TestApp) {
    let mut p = keyed("nginx", 1, &["header:x-api-key"], &[]);
    p.forward.deny_status = 403;
    install(app, vec![p]);
    let key = unique_key("n");
    assert_eq!(
        get(app, "/v1/auth/nginx", &[("x-api-key", &key)])
            .await
            .status,
        200
    );
    let a = get(app, "/v1/auth/nginx", &[("x-api-key", &key)]).await;
    assert_eq!(a.status, 403);
    assert_eq!(a.json()["status"], 403);
    assert!(a.header("retry-after").is_some());
    let a = get(app, "/v1/auth/nope/x", &[("x-api-key", &key)]).await;
    assert_eq!(a.status, 404);
    let body = a.json();
    assert_eq!(body["error"]["code"], "unknown_policy");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"nginx\""),
        "{body}"
    );
}

async fn shadow_policies_answer_200_with_the_real_headers(app: &TestApp) {
    let mut p = keyed("shadow", 1, &["header:x-api-key"], &[]);
    p.shadow = true;
    install(app, vec![p]);
    let key = unique_key("s");
    for _ in 0..3 {
        let a = get(app, "/v1/auth/shadow", &[("x-api-key", &key)]).await;
        assert_eq!((a.status, a.body.as_str(), a.remaining()), (200, "", 0));
    }
}

/// Redis unreachable: each policy's failure mode, marked degraded.
#[tokio::test]
async fn an_outage_answers_by_the_failure_mode_marked_degraded() {
    let nowhere = format!("redis://127.0.0.1:{}", support::free_port());
    let mut config = settings(Some(&nowhere));
    let redis = config.redis.as_mut().unwrap();
    redis.timeout = Duration::from_millis(100);
    redis.probe_interval = Duration::from_millis(50);
    config.failure.mode = FailureMode::Open;
    let app = TestApp::spawn(config).await;
    let mut strict = keyed("strict", 100, &["const:all"], &[]);
    strict.failure_mode = Some(FailureMode::Closed);
    let lax = keyed("lax", 100, &["const:all"], &[]);
    install(&app, vec![strict, lax]);
    let a = get(&app, "/v1/auth/lax", &[]).await;
    assert_eq!(
        (a.status, a.header("ratelimit-degraded")),
        (200, Some("?1")),
        "{}",
        a.body
    );
    let a = get(&app, "/v1/auth/strict", &[]).await;
    assert_eq!(
        (a.status, a.header("ratelimit-degraded")),
        (429, Some("?1")),
        "{}",
        a.body
    );
    assert!(a.header("retry-after").is_some());
    assert_eq!(
        a.json()["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
}
