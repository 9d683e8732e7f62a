//! `POST /v1/check` in its policy and inline forms, black box, on the
//! embedded store and on a real Redis: all or nothing, the combined
//! decision and headers, shadow mode, overrides, metrics labels. Policies
//! are swapped in through `TestApp.policies`, as a reload would.
//! (`policies_api_errors.rs` has the 422s, the failure mode and the
//! single-rule form.)

use crate::policy_checks;
use crate::support;

use std::sync::Arc;

use policy_checks::{api_policy, install, limit, limits_field, policy};
use ratekeeper::domain::{Algorithm, Limit};
use serde_json::{Value, json};
use support::{TestApp, unique_key};

for_each_store!(app:
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
                // A day too: the windows' ends are epoch-aligned, and an
                // hour's between the checks would refill it.
                limit("burst", Algorithm::FixedWindow, 3, "1d", None),
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
        // Daily as it is: nothing was spent from it.
        assert_eq!(limits_field(&body, "remaining"), [json!(0), json!(7)]);
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
            {"name": "tight", "algorithm": "fixed_window", "limit": 2, "window": "1d"},
            {"algorithm": "sliding_window", "limit": 5, "window": "1d"},
        ]})
    };
    for _ in 0..2 {
        assert_eq!(app.check(body()).await.1["allowed"], true);
    }
    for _ in 0..3 {
        let (_, denied) = app.check(body()).await;
        assert_eq!(denied["allowed"], false);
        assert_eq!(limits_field(&denied, "name"), [json!("tight"), json!("1")]);
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
        headers["ratelimit-policy"], "\"burst\";q=20;w=1, \"daily\";q=10000;w=86400",
        "a bucket's quota is its burst"
    );
    let body: Value = response.json().await.unwrap();
    // burst: 20 - 5 = 15 left; daily: 9995. The fewest remaining answers.
    assert_eq!(limits_field(&body, "remaining"), [json!(15), json!(9995)]);
    assert_eq!(
        (body["limit"].as_u64(), body["remaining"].as_u64()),
        (Some(10), Some(15))
    );
    assert_eq!(headers["x-ratelimit-limit"], "20", "the burst, as q");
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
            limit("tight", Algorithm::FixedWindow, 1, "1d", None),
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
