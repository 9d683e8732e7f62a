//! Issue 16, part 5: `GET /v1/top`, who is being limited right now, black
//! box on both stores: exact counts while every key fits the sketch, the
//! denied and checked views, the errors, and that a client key never
//! becomes a metric label.

use crate::policy_checks;
use crate::support;

use policy_checks::{install, limit, policy};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{TestApp, settings, unique_key};

for_each_store!(app:
    the_heaviest_keys_come_first_with_exact_counts,
    a_client_key_is_never_a_metric_label,
);

async fn top(app: &TestApp, query: &str) -> (u16, Value) {
    let response = app.get(&format!("/v1/top?{query}")).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn keys(body: &Value) -> Vec<(String, u64, u64)> {
    body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let n = |f: &str| k[f].as_u64().unwrap();
            (
                k["key"].as_str().unwrap().to_string(),
                n("count"),
                n("error"),
            )
        })
        .collect()
}

async fn the_heaviest_keys_come_first_with_exact_counts(app: &TestApp) {
    install(
        app,
        vec![policy(
            "api",
            // A day: the counts below run across requests on the wall
            // clock, and the window's end is epoch-aligned.
            vec![limit("daily", Algorithm::FixedWindow, 6, "1d", None)],
        )],
    );
    let (heavy, light) = (unique_key("heavy"), unique_key("light"));
    for (key, times, cost) in [(&heavy, 10, 1), (&light, 2, 1), (&light, 1, 5)] {
        for _ in 0..times {
            let (status, body) = app
                .check(json!({"policy": "api", "key": key, "cost": cost}))
                .await;
            assert_eq!(status, 200, "{body}");
        }
    }
    // heavy: 6 allowed, 4 denied; light: 2 allowed, then a cost of 5 denied.
    let (status, denied) = top(app, "policy=api").await;
    assert_eq!(status, 200, "{denied}");
    assert_eq!(
        keys(&denied),
        [(light.clone(), 5, 0), (heavy.clone(), 4, 0)]
    );
    assert_eq!(
        (denied["by"].as_str(), denied["period"].as_str()),
        (Some("denied"), Some("1m"))
    );
    assert_eq!(denied["total"], 9);
    // At most 70 s back, and no further back than the instance's start.
    let window = denied["window_ms"].as_u64().unwrap();
    assert!((1..=70_000).contains(&window), "{window}");

    let (_, checked) = top(app, "policy=api&by=checked&period=10m&limit=1").await;
    assert_eq!(keys(&checked), [(heavy.clone(), 10, 0)]);
    assert_eq!(
        (checked["total"].as_u64(), checked["unlisted_max"].as_u64()),
        (Some(17), Some(7))
    );

    // Inline checks have a sketch of their own.
    let inline = unique_key("inline");
    app.check(json!({"key": inline, "limit": 5, "window": "1m", "cost": 4}))
        .await;
    let (_, body) = top(app, "policy=inline&by=checked").await;
    assert_eq!(keys(&body), [(inline, 4, 0)]);
}

async fn a_client_key_is_never_a_metric_label(app: &TestApp) {
    install(
        app,
        vec![policy(
            "api",
            vec![limit("burst", Algorithm::TokenBucket, 1, "1m", None)],
        )],
    );
    let key = unique_key("label-probe-7f3a");
    for body in [
        json!({"policy": "api", "key": key}),
        json!({"policy": "api", "key": key}),
        json!({"key": key, "limit": 1, "window": "1m"}),
        json!({"key": key, "limits": [{"name": "x", "limit": 1, "window": "1s"}]}),
    ] {
        app.check(body).await;
    }
    let (_, body) = top(app, "policy=api").await;
    assert_eq!(keys(&body)[0].0, key, "the sketch has it");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        !metrics.contains("label-probe"),
        "a key in /metrics:\n{metrics}"
    );
    assert!(
        metrics.contains("ratekeeper_top_memory_bytes "),
        "{metrics}"
    );
    let memory = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ratekeeper_top_memory_bytes "))
        .unwrap();
    assert!(memory.parse::<u64>().unwrap() > 0, "{memory}");
}

#[tokio::test]
async fn bad_parameters_and_unknown_policies_get_json_errors() {
    let app = TestApp::spawn(settings(None)).await;
    install(
        &app,
        vec![policy(
            "api",
            vec![limit("m", Algorithm::FixedWindow, 1, "1m", None)],
        )],
    );
    for (query, status, code) in [
        ("", 422, "invalid_request"),
        ("policy=api&by=allowed", 422, "invalid_request"),
        ("policy=api&period=1h", 422, "invalid_request"),
        ("policy=api&limit=0", 422, "invalid_request"),
        ("policy=api&limit=1001", 422, "invalid_request"),
        ("policy=api&limit=x", 422, "invalid_request"),
        ("policy=api&color=red", 422, "invalid_request"),
        ("policy=nope", 422, "unknown_policy"),
    ] {
        let (got, body) = top(&app, query).await;
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{query}: {body}"
        );
    }
    // A policy in force but not checked yet: nothing to report, no error.
    let (status, body) = top(&app, "policy=api").await;
    assert_eq!((status, body["total"].as_u64()), (200, Some(0)), "{body}");
    app.stop().await;
}

/// Issue 27 D7: a policy that a reload removed is unknown, even while its
/// sketch still holds the counts of its last checks.
#[tokio::test]
async fn a_policy_removed_by_a_reload_is_unknown() {
    let app = TestApp::spawn(settings(None)).await;
    let named = |name| {
        policy(
            name,
            vec![limit("m", Algorithm::FixedWindow, 1, "1d", None)],
        )
    };
    install(&app, vec![named("api"), named("other")]);
    let key = unique_key("gone");
    for _ in 0..2 {
        app.check(json!({"policy": "api", "key": key})).await;
    }
    let (status, body) = top(&app, "policy=api").await;
    assert_eq!((status, body["total"].as_u64()), (200, Some(1)), "{body}");
    install(&app, vec![named("other")]);
    let (status, body) = top(&app, "policy=api").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("unknown_policy")),
        "{body}"
    );
    app.stop().await;
}

#[tokio::test]
async fn with_the_sketches_off_top_says_so() {
    let mut settings = settings(None);
    settings.top.capacity = 0;
    let app = TestApp::spawn(settings).await;
    let (status, body) = top(&app, "policy=inline").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("disabled")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("top.capacity")
    );
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("ratekeeper_top_memory_bytes 0"),
        "{metrics}"
    );
    app.stop().await;
}
