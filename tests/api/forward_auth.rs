//! `/v1/auth/{policy}`, black box, on the embedded store and on a real
//! Redis: answers and headers, any method and path, the cost header,
//! missing keys, deny statuses, shadow policies. (`forward_auth_keys.rs`
//! has key sources, trusted proxies and spoofing, and outages.)

use crate::forward_auth_support;
use crate::policy_checks;
use crate::support;

use forward_auth_support::{call, get, keyed};
use policy_checks::{install, limit, policy};
use ratekeeper::domain::Algorithm;
use support::{TestApp, unique_key};

on_both_stores!(false =>
    allowed_then_denied_with_headers_and_problem_body,
    any_method_and_any_rest_path,
    the_cost_header_of_an_untrusted_peer_is_ignored,
    a_missing_key_and_a_key_too_long,
    deny_status_403_and_unknown_policy,
    shadow_policies_answer_200_with_the_real_headers,
);

// The peer (127.0.0.1) is a trusted proxy: its X-RateLimit-Cost counts.
on_both_stores!(true => the_cost_header);

async fn allowed_then_denied_with_headers_and_problem_body(app: &TestApp) {
    let mut p = policy(
        "api",
        vec![
            // A day too: the windows' ends are epoch-aligned, and an
            // hour's between the requests would refill it.
            limit("burst", Algorithm::FixedWindow, 3, "1d", None),
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
            Some("\"burst\";q=3;w=86400, \"daily\";q=10;w=86400")
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
    assert!((1..=86_400).contains(&retry), "{retry}");
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
    // The path as upstreams serve it: a doubled slash is the same path
    // (dot segments too: unit tests, as HTTP clients resolve those).
    let a = get(app, "/v1/auth/p/orders//1", &[]).await;
    assert_eq!(a.remaining(), 97);
    let a = get(app, "/v1/auth/p/orders/2", &[]).await;
    assert_eq!(a.remaining(), 99);
    let a = get(app, "/v1/auth/p/", &[]).await;
    assert_eq!(a.remaining(), 99);
    // Without a rest and without an API key, no source is present.
    assert_eq!(get(app, "/v1/auth/p", &[]).await.status, 401);
}

/// A client talking to us directly (or through a proxy we do not trust)
/// cannot set its own cost: 0 would never spend, a huge one would empty
/// a shared bucket.
async fn the_cost_header_of_an_untrusted_peer_is_ignored(app: &TestApp) {
    install(app, vec![keyed("c", 10, &["header:x-api-key"], &[])]);
    let key = unique_key("c");
    for (cost, remaining) in [("0", 9), ("5", 8), ("junk", 7), ("1000", 6)] {
        let a = get(
            app,
            "/v1/auth/c",
            &[("x-api-key", &key), ("x-ratelimit-cost", cost)],
        )
        .await;
        assert_eq!((a.status, a.remaining()), (200, remaining), "{cost}");
    }
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
        &[("x-api-key", &key), ("x-ratelimit-cost", "7")],
    )
    .await;
    assert_eq!((a.status, a.remaining()), (429, 6));
    // 0 would let a request through without spending: refused.
    for bad in ["0", "-1", "two", "1.0", "11"] {
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
    // GET /v1/policies shows the forward-auth settings.
    let listed: serde_json::Value = app.get("/v1/policies").await.json().await.unwrap();
    let shown = &listed["policies"][0];
    assert_eq!(
        (
            &shown["key_from"],
            &shown["deny_status"],
            &shown["missing_key_status"]
        ),
        (
            &serde_json::json!(["header:x-api-key"]),
            &serde_json::json!(403),
            &serde_json::json!(401)
        ),
        "{listed}"
    );
    let a = get(app, "/v1/auth/%FF", &[]).await;
    assert_eq!(
        (a.status, &a.json()["error"]["code"]),
        (400, &serde_json::json!("invalid_request"))
    );
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
