//! `POST /v1/check` in its policy and inline forms, black box, on the
//! embedded store and on a real Redis: all or nothing, the combined
//! decision and headers, shadow mode, per-policy failure mode, overrides,
//! metrics labels, and every 422 of the new forms. Policies are swapped in
//! through `TestApp.policies`, as a reload would.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::domain::{
    Algorithm, Bounds, FailureMode, Limit, Policy, PolicySet, Rule, RuleInput, WindowInput,
};
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

fn limit(name: &str, algorithm: Algorithm, n: u64, window: &str, burst: Option<u64>) -> Limit {
    let input = RuleInput {
        limit: n,
        window: WindowInput::Text(window.into()),
        algorithm: Some(algorithm),
        burst,
    };
    Limit {
        name: name.into(),
        rule: Rule::new(&input, &Bounds::default()).expect("a valid rule"),
    }
}

fn policy(name: &str, limits: Vec<Limit>) -> Policy {
    Policy {
        name: name.into(),
        description: None,
        failure_mode: None,
        shadow: false,
        limits: limits.into(),
        overrides: HashMap::new(),
    }
}

fn install(app: &TestApp, policies: Vec<Policy>) {
    app.policies.store(Arc::new(PolicySet::from_policies(
        policies,
        "test".into(),
        None,
    )));
}

/// The issue's example policy: 10/s with a burst of 20, and 10 000 a day.
fn api_policy() -> Policy {
    policy(
        "api",
        vec![
            limit("burst", Algorithm::TokenBucket, 10, "1s", Some(20)),
            limit("daily", Algorithm::FixedWindow, 10_000, "1d", None),
        ],
    )
}

fn error(body: &Value) -> (&str, &str) {
    (
        body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error: {body}")),
        body["error"]["message"].as_str().unwrap(),
    )
}

fn limits_field(body: &Value, field: &str) -> Vec<Value> {
    body["limits"]
        .as_array()
        .unwrap_or_else(|| panic!("no limits in {body}"))
        .iter()
        .map(|l| l[field].clone())
        .collect()
}

/// Runs a scenario on a fresh embedded store and on a fresh Redis.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                let app = super::TestApp::spawn(super::settings(None)).await;
                super::$name(&app).await;
            }

            #[tokio::test]
            async fn redis() {
                let redis = super::RedisServer::start();
                let app = super::TestApp::spawn(super::settings(Some(&redis.url()))).await;
                super::$name(&app).await;
            }
        }
    )*};
}

on_both_stores!(
    a_denial_by_one_limit_spends_none,
    an_inline_denial_spends_none,
    retry_after_is_the_largest_of_the_denying_limits,
    the_most_restrictive_limit_answers_and_headers_list_every_limit,
    shadow_mode_allows_shows_and_counts,
    overrides_apply_to_their_key_only,
    metrics_carry_policy_and_limit_names,
);

/// envoyproxy/ratelimit #1060: a request the per-burst limit denies must
/// not use up the daily limit.
async fn a_denial_by_one_limit_spends_none(app: &TestApp) {
    install(
        app,
        vec![policy(
            "api",
            vec![
                limit("burst", Algorithm::FixedWindow, 3, "1h", None),
                limit("daily", Algorithm::FixedWindow, 10, "1d", None),
            ],
        )],
    );
    let key = unique_key("k1060");
    for spent in 1..=3 {
        let (status, body) = app.check(json!({"policy": "api", "key": key})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["allowed"], true);
        assert_eq!(
            limits_field(&body, "remaining"),
            [json!(3 - spent), json!(10 - spent)]
        );
    }
    for _ in 0..5 {
        let (_, body) = app.check(json!({"policy": "api", "key": key})).await;
        assert_eq!(body["allowed"], false, "{body}");
        assert_eq!(limits_field(&body, "allowed"), [json!(false), json!(true)]);
        // What daily alone would leave: nothing was spent from it.
        assert_eq!(limits_field(&body, "remaining"), [json!(0), json!(6)]);
    }
    // A later check of daily alone (its counter is kept by policy and
    // limit name): 7 were left, this one spends the 8th.
    install(
        app,
        vec![policy(
            "api",
            vec![limit("daily", Algorithm::FixedWindow, 10, "1d", None)],
        )],
    );
    let (_, later) = app.check(json!({"policy": "api", "key": key})).await;
    assert_eq!(later["allowed"], true, "{later}");
    assert_eq!(limits_field(&later, "remaining"), [json!(6)]);
    assert_eq!(later["policy"], "api");
}

async fn an_inline_denial_spends_none(app: &TestApp) {
    let key = unique_key("inline1060");
    let body = || {
        json!({"key": key, "limits": [
            {"name": "per_hour", "algorithm": "fixed_window", "limit": 2, "window": "1h"},
            {"algorithm": "sliding_window", "limit": 5, "window": "1d"},
        ]})
    };
    for _ in 0..2 {
        assert_eq!(app.check(body()).await.1["allowed"], true);
    }
    for _ in 0..3 {
        let (_, denied) = app.check(body()).await;
        assert_eq!(denied["allowed"], false);
        assert_eq!(
            limits_field(&denied, "name"),
            [json!("per_hour"), json!("1")]
        );
        assert_eq!(
            limits_field(&denied, "allowed"),
            [json!(false), json!(true)]
        );
    }
    // The daily limit alone (inline state is kept by algorithm and
    // window): 2 spent, this is the 3rd.
    let (status, later) = app
        .check(json!({"key": key, "limits": [
            {"name": "day", "algorithm": "sliding_window", "limit": 5, "window": "1d"},
        ]}))
        .await;
    assert_eq!(status, 200, "{later}");
    assert_eq!(limits_field(&later, "remaining"), [json!(2)]);
    assert_eq!(later["policy"], Value::Null, "inline checks have no policy");
    assert_eq!(later["shadow"], false);
}

async fn retry_after_is_the_largest_of_the_denying_limits(app: &TestApp) {
    install(
        app,
        vec![policy(
            "twice",
            vec![
                limit("minute", Algorithm::TokenBucket, 1, "1m", None),
                limit("hour", Algorithm::TokenBucket, 1, "1h", None),
                limit("loose", Algorithm::FixedWindow, 100, "1d", None),
            ],
        )],
    );
    let key = unique_key("retry");
    assert_eq!(
        app.check(json!({"policy": "twice", "key": key})).await.1["allowed"],
        true
    );
    let response = app
        .http
        .post(app.url("/v1/check"))
        .json(&json!({"policy": "twice", "key": key}))
        .send()
        .await
        .unwrap();
    let retry_header: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["allowed"], false);
    assert_eq!(
        limits_field(&body, "allowed"),
        [json!(false), json!(false), json!(true)]
    );
    let retries: Vec<u64> = limits_field(&body, "retry_after_ms")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(retries[0] > 0 && retries[0] <= 60_000, "{body}");
    assert!(retries[1] > 60_000 && retries[1] <= 3_600_000, "{body}");
    assert_eq!(retries[2], 0, "an allowing limit has nothing to wait for");
    assert_eq!(
        body["retry_after_ms"].as_u64().unwrap(),
        retries[1],
        "the max"
    );
    assert_eq!(retry_header, retries[1].div_ceil(1000));
    let resets: Vec<u64> = limits_field(&body, "reset_after_ms")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        body["reset_after_ms"].as_u64(),
        resets.iter().max().copied()
    );
}

async fn the_most_restrictive_limit_answers_and_headers_list_every_limit(app: &TestApp) {
    install(app, vec![api_policy()]);
    let key = unique_key("headers");
    let response = app
        .http
        .post(app.url("/v1/check"))
        .json(&json!({"policy": "api", "key": key, "cost": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(
        headers["ratelimit-policy"],
        "\"burst\";q=10;w=1, \"daily\";q=10000;w=86400"
    );
    let body: Value = response.json().await.unwrap();
    // burst: 20 - 5 = 15 left; daily: 9995. The fewest remaining answers.
    assert_eq!(limits_field(&body, "remaining"), [json!(15), json!(9995)]);
    assert_eq!(
        (body["limit"].as_u64(), body["remaining"].as_u64()),
        (Some(10), Some(15))
    );
    assert_eq!(headers["x-ratelimit-limit"], "10");
    assert_eq!(headers["x-ratelimit-remaining"], "15");
    assert!(
        headers["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"burst\";r=15;t="),
        "{headers:?}"
    );
    assert!(headers.get("retry-after").is_none());
    let expected_limits = json!([
        {"name": "burst", "algorithm": "token_bucket", "limit": 10, "burst": 20, "window_ms": 1000,
         "allowed": true, "remaining": 15, "retry_after_ms": 0,
         "reset_after_ms": body["limits"][0]["reset_after_ms"]},
        {"name": "daily", "algorithm": "fixed_window", "limit": 10000, "burst": 10000,
         "window_ms": 86_400_000, "allowed": true, "remaining": 9995, "retry_after_ms": 0,
         "reset_after_ms": body["limits"][1]["reset_after_ms"]},
    ]);
    assert_eq!(body["limits"], expected_limits);
    assert_eq!(body["reset_after_ms"], body["limits"][1]["reset_after_ms"]);
    assert_eq!(body["shadow"], false);
    assert_eq!(body["degraded"], false);
}

async fn shadow_mode_allows_shows_and_counts(app: &TestApp) {
    let mut shadowy = policy(
        "shadowy",
        vec![
            limit("tight", Algorithm::FixedWindow, 1, "1h", None),
            limit("loose", Algorithm::FixedWindow, 10, "1d", None),
        ],
    );
    shadowy.shadow = true;
    install(app, vec![shadowy]);
    let key = unique_key("shadow");
    let (_, first) = app.check(json!({"policy": "shadowy", "key": key})).await;
    assert_eq!(
        (first["allowed"].as_bool(), first["shadow"].as_bool()),
        (Some(true), Some(false))
    );
    for _ in 0..3 {
        let response = app
            .http
            .post(app.url("/v1/check"))
            .json(&json!({"policy": "shadowy", "key": key}))
            .send()
            .await
            .unwrap();
        assert!(
            response.headers().get("retry-after").is_none(),
            "allowed: no Retry-After"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["allowed"], true, "shadow always allows: {body}");
        assert_eq!(body["shadow"], true);
        assert_eq!(limits_field(&body, "allowed"), [json!(false), json!(true)]);
        assert!(body["limits"][0]["retry_after_ms"].as_u64().unwrap() > 0);
    }
    // Only the first check spent: loose alone has 9 left, this takes one.
    let mut loose = policy(
        "shadowy",
        vec![limit("loose", Algorithm::FixedWindow, 10, "1d", None)],
    );
    loose.shadow = true;
    install(app, vec![loose]);
    let (_, later) = app.check(json!({"policy": "shadowy", "key": key})).await;
    assert_eq!(limits_field(&later, "remaining"), [json!(8)]);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        "ratekeeper_checks_total{algorithm=\"fixed_window\",decision=\"shadow_denied\",limit=\"tight\",policy=\"shadowy\"} 3",
        "ratekeeper_checks_total{algorithm=\"fixed_window\",decision=\"allowed\",limit=\"tight\",policy=\"shadowy\"} 1",
        "ratekeeper_checks_total{algorithm=\"fixed_window\",decision=\"allowed\",limit=\"loose\",policy=\"shadowy\"} 1",
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
}

async fn overrides_apply_to_their_key_only(app: &TestApp) {
    let mut api = policy(
        "api",
        vec![
            limit("burst", Algorithm::TokenBucket, 100, "1s", None),
            limit("daily", Algorithm::FixedWindow, 2, "1d", None),
        ],
    );
    let acme = unique_key("k_acme");
    let merged: Arc<[Limit]> = vec![
        limit("burst", Algorithm::TokenBucket, 100, "1s", None),
        limit("daily", Algorithm::FixedWindow, 5, "1d", None),
    ]
    .into();
    api.overrides.insert(acme.clone(), merged);
    install(app, vec![api]);
    let allowed_of = |key: String| async move {
        let mut allowed = 0;
        for _ in 0..8 {
            let (_, body) = app.check(json!({"policy": "api", "key": key})).await;
            allowed += u64::from(body["allowed"] == true);
        }
        allowed
    };
    assert_eq!(
        allowed_of(acme.clone()).await,
        5,
        "the override's daily limit"
    );
    assert_eq!(
        allowed_of(unique_key("other")).await,
        2,
        "the policy's daily limit"
    );
    let (_, body) = app
        .check(json!({"policy": "api", "key": acme, "cost": 0}))
        .await;
    assert_eq!(body["limits"][1]["limit"], 5);
}

async fn metrics_carry_policy_and_limit_names(app: &TestApp) {
    install(app, vec![api_policy()]);
    app.check(json!({"policy": "api", "key": unique_key("m")}))
        .await;
    app.check(json!({"key": unique_key("m"), "limits": [
        {"algorithm": "gcra", "limit": 5, "window": "1s"},
        {"algorithm": "fixed_window", "limit": 50, "window": "1h"},
    ]}))
    .await;
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        // The most restrictive of an allowed check: burst (19 left of 20).
        "ratekeeper_checks_total{algorithm=\"token_bucket\",decision=\"allowed\",limit=\"burst\",policy=\"api\"} 1",
        "ratekeeper_checks_total{algorithm=\"gcra\",decision=\"allowed\",limit=\"0\",policy=\"inline\"} 1",
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
    assert!(!metrics.contains("key=\""), "never a client key");
}

/// Redis is unreachable, the service fails open, one policy fails closed.
#[tokio::test]
async fn a_policys_failure_mode_overrides_the_services() {
    let nowhere = format!("redis://127.0.0.1:{}", support::free_port());
    let mut config = settings(Some(&nowhere));
    let redis = config.redis.as_mut().unwrap();
    redis.timeout = Duration::from_millis(100);
    redis.probe_interval = Duration::from_millis(50);
    config.failure.mode = FailureMode::Open;
    let app = TestApp::spawn(config).await;
    let mut strict = policy(
        "strict",
        vec![limit("l", Algorithm::FixedWindow, 100, "1m", None)],
    );
    strict.failure_mode = Some(FailureMode::Closed);
    let lax = policy(
        "lax",
        vec![limit("l", Algorithm::FixedWindow, 100, "1m", None)],
    );
    install(&app, vec![strict, lax]);

    let (status, closed) = app.check(json!({"policy": "strict", "key": "k"})).await;
    assert_eq!(status, 200, "{closed}");
    assert_eq!(
        (closed["allowed"].as_bool(), closed["degraded"].as_bool()),
        (Some(false), Some(true))
    );
    assert!(closed["retry_after_ms"].as_u64().unwrap() > 0);
    let (_, open) = app.check(json!({"policy": "lax", "key": "k"})).await;
    assert_eq!(
        (open["allowed"].as_bool(), open["degraded"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(open["policy"], "lax");
    let (_, legacy) = app
        .check(json!({"key": "k", "limit": 5, "window": "1s"}))
        .await;
    assert_eq!(
        legacy["allowed"], true,
        "the service's mode for others: {legacy}"
    );
}

#[tokio::test]
async fn an_unknown_policy_is_422_listing_the_loaded_ones() {
    let app = TestApp::spawn(settings(None)).await;
    let (status, body) = app.check(json!({"policy": "api", "key": "k"})).await;
    assert_eq!(status, 422);
    let (code, message) = error(&body);
    assert_eq!(code, "unknown_policy");
    assert!(message.contains("no policies are loaded"), "{message}");

    install(
        &app,
        vec![
            api_policy(),
            policy("web", vec![limit("l", Algorithm::Gcra, 1, "1s", None)]),
        ],
    );
    let (status, body) = app.check(json!({"policy": "nope", "key": "k"})).await;
    assert_eq!(status, 422);
    let (code, message) = error(&body);
    assert_eq!(code, "unknown_policy");
    assert_eq!(
        message,
        "policy: unknown policy \"nope\"; loaded: \"api\", \"web\""
    );

    // Thousands of policies: the list is cut, and says how many it left out.
    let many: Vec<Policy> = (0..2_000)
        .map(|i| {
            policy(
                &format!("tenant_{i:05}"),
                vec![limit("l", Algorithm::Gcra, 1, "1s", None)],
            )
        })
        .collect();
    install(&app, many);
    let (_, body) = app.check(json!({"policy": "nope", "key": "k"})).await;
    let (_, message) = error(&body);
    let listed = message.matches("\"tenant_").count();
    assert!(
        message.len() <= 1100 && listed > 50,
        "{} bytes, {listed} names",
        message.len()
    );
    assert!(
        message.ends_with(&format!("(and {} more)", 2_000 - listed)),
        "{message}"
    );
    // A known one still works after all that.
    let (status, body) = app
        .check(json!({"policy": "tenant_00042", "key": "k"}))
        .await;
    assert_eq!(
        (status, body["policy"].as_str()),
        (200, Some("tenant_00042"))
    );
}

#[tokio::test]
async fn mixed_forms_are_422_naming_the_fields() {
    let app = TestApp::spawn(settings(None)).await;
    install(&app, vec![api_policy()]);
    let rule = json!({"limit": 1, "window": "1s"});
    let cases = [
        (
            json!({"policy": "api", "key": "k", "limit": 1}),
            vec!["policy", "limit"],
        ),
        (
            json!({"policy": "api", "key": "k", "limits": [rule]}),
            vec!["policy", "limits"],
        ),
        (
            json!({"policy": "api", "key": "k", "window": "1s", "algorithm": "gcra", "burst": 2}),
            vec!["policy", "window", "algorithm", "burst"],
        ),
        (
            json!({"key": "k", "limits": [rule], "limit": 1, "window": "1s"}),
            vec!["limits", "limit", "window"],
        ),
        (
            json!({"key": "k", "limits": [rule], "algorithm": null}),
            vec!["limits", "algorithm"],
        ),
        (
            json!({"key": "k", "limit": 1, "window": "1s", "policy": null}),
            vec!["policy", "limit", "window"],
        ),
    ];
    for (body, fields) in cases {
        let (status, response) = app.check(body.clone()).await;
        assert_eq!(status, 422, "{body} -> {response}");
        let (code, message) = error(&response);
        assert_eq!(code, "mixed_forms", "{body}");
        for field in fields {
            assert!(
                message.contains(&format!("`{field}`")),
                "{body}: {message} should name {field}"
            );
        }
    }
}

#[tokio::test]
async fn inline_limits_are_validated_like_rules() {
    let app = TestApp::spawn(settings(None)).await;
    let one =
        |i: u64| json!({"algorithm": "fixed_window", "limit": 10, "window": format!("{}s", i + 1)});
    let nine: Vec<Value> = (0..9).map(one).collect();
    let eight: Vec<Value> = (0..8).map(one).collect();
    let (status, body) = app.check(json!({"key": "k", "limits": eight})).await;
    assert_eq!(status, 200, "8 is the default maximum: {body}");
    assert_eq!(body["limits"].as_array().unwrap().len(), 8);
    let cases = [
        (
            json!({"key": "k", "limits": nine}),
            "limits: must hold 1 to 8 limits",
        ),
        (
            json!({"key": "k", "limits": []}),
            "limits: must hold 1 to 8 limits",
        ),
        (
            json!({"key": "k", "limits": [
                {"name": "a", "limit": 1, "window": "1s"},
                {"name": "a", "limit": 1, "window": "1m"},
            ]}),
            "limits[1].name",
        ),
        (
            json!({"key": "k", "limits": [
                {"name": "1", "limit": 1, "window": "1s"},
                {"limit": 1, "window": "1m"},
            ]}),
            "limits[1].name",
        ),
        (
            json!({"key": "k", "limits": [{"limit": 1, "window": "1s"}, {"limit": 5, "window": "1s"}]}),
            "limits[1]",
        ),
        (
            json!({"key": "k", "limits": [{"name": "Bad Name", "limit": 1, "window": "1s"}]}),
            "limits[0].name",
        ),
        (
            json!({"key": "k", "limits": [{"limit": 0, "window": "1s"}]}),
            "limits[0].limit",
        ),
        (
            json!({"key": "k", "limits": [{"limit": 1.5, "window": "1s"}]}),
            "limits[0].limit",
        ),
        (json!({"key": "k", "limits": [{"limit": 1}]}), "window"),
        (
            json!({"key": "k", "limits": [{"limit": 2, "window": "1s"}, {"limit": 5, "window": "1h"}], "cost": 3}),
            "cost",
        ),
        (
            json!({"key": "", "limits": [{"limit": 1, "window": "1s"}]}),
            "key",
        ),
        (json!({"key": "k", "limits": "many"}), "limits"),
        (json!({"policy": 7, "key": "k"}), "policy"),
        (json!({"policy": "api"}), "key"),
    ];
    for (body, expected) in cases {
        let (status, response) = app.check(body.clone()).await;
        assert_eq!(status, 422, "{body} -> {response}");
        let (code, message) = error(&response);
        assert_eq!(code, "invalid_request", "{body}");
        assert!(
            message.contains(expected),
            "{body}: {message} should contain {expected}"
        );
    }
    // Whole numbers written with a zero fraction pass, as in the single form.
    let (status, body) = app
        .check(json!({"key": "k", "limits": [{"limit": 10.0, "window": 60.0}], "cost": 2.0}))
        .await;
    assert_eq!(
        (status, body["limits"][0]["remaining"].as_u64()),
        (200, Some(8))
    );
}

/// The single-rule form answers exactly what it answered before policies:
/// the same six fields in the same order, the same headers.
#[tokio::test]
async fn the_single_rule_form_is_unchanged_byte_for_byte() {
    let app = TestApp::spawn(settings(None)).await;
    install(&app, vec![api_policy()]);
    let key = unique_key("legacy");
    // A token bucket's first answer is exact: one unit refills in 1h / 5.
    let response = app
        .http
        .post(app.url("/v1/check"))
        .json(&json!({"key": key, "limit": 5, "window": "1h", "algorithm": "token_bucket"}))
        .send()
        .await
        .unwrap();
    let headers = response.headers().clone();
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"allowed":true,"limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":720000,"degraded":false}"#
    );
    let expected = [
        ("ratelimit-policy", "\"default\";q=5;w=3600"),
        ("ratelimit", "\"default\";r=4;t=720"),
        ("x-ratelimit-limit", "5"),
        ("x-ratelimit-remaining", "4"),
        ("x-ratelimit-reset", "720"),
        ("content-type", "application/json"),
    ];
    for (name, value) in expected {
        assert_eq!(headers[name], value, "{name}");
    }
    assert!(headers.get("retry-after").is_none());
}
