//! `POST /v1/check`: the answers of the new forms that are not decisions
//! (unknown policy, mixed forms, invalid inline limits), a policy's own
//! failure mode on an unreachable Redis, and the single-rule form
//! unchanged byte for byte.

use crate::policy_checks;
use crate::support;

use std::time::Duration;

use policy_checks::{api_policy, error, install, limit, policy};
use ratekeeper::domain::{Algorithm, FailureMode, Policy};
use serde_json::{Value, json};
use support::{TestApp, settings, unique_key};

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
