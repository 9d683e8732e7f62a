//! Black-box HTTP tests on the embedded store: the happy path with its
//! headers for every algorithm, and every error case with its JSON body.

use crate::support;

use serde_json::{Value, json};
use support::{TestApp, settings, unique_key};

async fn app() -> TestApp {
    TestApp::spawn(settings(None)).await
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {body}"))
}

fn error_message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap()
}

#[tokio::test]
async fn allowed_then_denied_with_headers_for_every_algorithm() {
    let app = app().await;
    for algorithm in [
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "token_bucket",
        "gcra",
    ] {
        let key = unique_key(algorithm);
        // A day: the third check must find the first two in its window, and
        // the windows' ends are epoch-aligned (a minute's came between them
        // now and then).
        let body = json!({"key": key, "limit": 2, "window": "1d", "algorithm": algorithm});
        let response = app
            .http
            .post(app.url("/v1/check"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let headers = response.headers().clone();
        assert_eq!(headers["ratelimit-policy"], "\"default\";q=2;w=86400");
        assert!(
            headers["ratelimit"]
                .to_str()
                .unwrap()
                .starts_with("\"default\";r=1;t=")
        );
        assert_eq!(headers["x-ratelimit-limit"], "2");
        assert_eq!(headers["x-ratelimit-remaining"], "1");
        assert!(headers.get("retry-after").is_none());
        let first: Value = response.json().await.unwrap();
        assert_eq!(first["allowed"], true, "{algorithm}");
        assert_eq!(first["remaining"], 1);
        assert_eq!(first["degraded"], false);
        assert_eq!(first["retry_after_ms"], 0);
        assert!(first["reset_after_ms"].as_u64().unwrap() > 0);

        app.check(body.clone()).await;
        let response = app
            .http
            .post(app.url("/v1/check"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "denials are 200 too");
        let retry_header: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let denied: Value = response.json().await.unwrap();
        assert_eq!(denied["allowed"], false, "{algorithm}");
        assert_eq!(denied["remaining"], 0);
        let retry_ms = denied["retry_after_ms"].as_u64().unwrap();
        assert!(retry_ms > 0);
        assert_eq!(
            retry_header,
            retry_ms.div_ceil(1000),
            "Retry-After is whole seconds rounded up"
        );
    }
}

#[tokio::test]
async fn window_as_integer_seconds_cost_and_burst() {
    let app = app().await;
    let key = unique_key("opts");
    let (status, body) = app
        .check(json!({"key": key, "limit": 10, "window": 60, "algorithm": "token_bucket", "burst": 20, "cost": 15}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (body["allowed"].as_bool(), body["remaining"].as_u64()),
        (Some(true), Some(5))
    );
    let (_, probe) = app
        .check(json!({"key": key, "limit": 10, "window": 60, "algorithm": "token_bucket", "burst": 20, "cost": 0}))
        .await;
    assert_eq!(probe["remaining"], 5, "cost 0 reports without spending");
    // Unknown fields are ignored.
    let (status, _) = app
        .check(json!({"key": key, "limit": 1, "window": "1s", "extra": [1, 2]}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn invalid_values_are_422_and_name_the_field() {
    let app = app().await;
    let cases = [
        (json!({"limit": 1, "window": "1s"}), "key"),
        (json!({"key": "", "limit": 1, "window": "1s"}), "key"),
        (
            json!({"key": "x".repeat(513), "limit": 1, "window": "1s"}),
            "key",
        ),
        (json!({"key": "k", "window": "1s"}), "limit"),
        (json!({"key": "k", "limit": "10", "window": "1s"}), "limit"),
        (json!({"key": "k", "limit": 1.5, "window": "1s"}), "limit"),
        (json!({"key": "k", "limit": -1, "window": "1s"}), "limit"),
        (json!({"key": "k", "limit": 0, "window": "1s"}), "limit"),
        (
            json!({"key": "k", "limit": 1_000_000_000_001_u64, "window": "1s"}),
            "limit",
        ),
        (
            json!({"key": "k", "limit": 100_001, "window": "1s", "algorithm": "sliding_log"}),
            "limit",
        ),
        (json!({"key": "k", "limit": 1}), "window"),
        (json!({"key": "k", "limit": 1, "window": "10"}), "window"),
        (json!({"key": "k", "limit": 1, "window": "1.5s"}), "window"),
        (json!({"key": "k", "limit": 1, "window": " 1m"}), "window"),
        (json!({"key": "k", "limit": 1, "window": "1m "}), "window"),
        (json!({"key": "k", "limit": 1, "window": 1.5}), "window"),
        (json!({"key": "k", "limit": 1, "window": 0}), "window"),
        (json!({"key": "k", "limit": 1, "window": "367d"}), "window"),
        (
            json!({"key": "k", "limit": 1, "window": "1s", "cost": 2}),
            "cost",
        ),
        (
            json!({"key": "k", "limit": 1, "window": "1s", "cost": -1}),
            "cost",
        ),
        (
            json!({"key": "k", "limit": 1, "window": "1s", "burst": 5}),
            "burst",
        ),
        (
            json!({"key": "k", "limit": 1, "window": "1s", "algorithm": "gcra", "burst": 0}),
            "burst",
        ),
        (
            json!({"key": "k", "limit": 1, "window": "1s", "algorithm": "leaky"}),
            "algorithm",
        ),
        (json!(["not", "an", "object"]), "invalid type"),
    ];
    for (body, field) in cases {
        let (status, response) = app.check(body.clone()).await;
        assert_eq!(status, 422, "{body} -> {response}");
        assert_eq!(error_code(&response), "invalid_request");
        assert!(
            error_message(&response).contains(field),
            "{body}: message should name {field}: {response}"
        );
    }
    let (_, response) = app
        .check(json!({"key": "k", "limit": 1, "window": "1s", "algorithm": "leaky"}))
        .await;
    for name in [
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "token_bucket",
        "gcra",
    ] {
        assert!(
            error_message(&response).contains(name),
            "lists {name}: {response}"
        );
    }
}

#[tokio::test]
async fn transport_errors_are_json_with_the_right_status() {
    let app = app().await;
    let post = |body: &'static str, content_type: Option<&'static str>| {
        let mut request = app.http.post(app.url("/v1/check")).body(body);
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        request.send()
    };
    let cases = [
        (
            post("{\"key\": ", Some("application/json")).await.unwrap(),
            400,
            "invalid_json",
        ),
        (
            post("{} {}", Some("application/json")).await.unwrap(),
            400,
            "invalid_json",
        ),
        (
            post("{\"key\":\"k\"}", None).await.unwrap(),
            415,
            "unsupported_media_type",
        ),
        (
            post("{\"key\":\"k\"}", Some("text/plain")).await.unwrap(),
            415,
            "unsupported_media_type",
        ),
        (
            app.http.get(app.url("/v1/check")).send().await.unwrap(),
            405,
            "method_not_allowed",
        ),
        (
            app.http.post(app.url("/healthz")).send().await.unwrap(),
            405,
            "method_not_allowed",
        ),
        (
            app.http.get(app.url("/nope")).send().await.unwrap(),
            404,
            "not_found",
        ),
        // Answered by the Swagger UI route, below our handlers.
        (
            app.http
                .get(app.url("/docs/no-such-file.js"))
                .send()
                .await
                .unwrap(),
            404,
            "not_found",
        ),
    ];
    for (response, status, code) in cases {
        assert_eq!(response.status().as_u16(), status, "{code}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(error_code(&body), code);
    }

    let huge = format!(
        "{{\"key\": \"{}\", \"limit\": 1, \"window\": \"1s\"}}",
        "x".repeat(70 * 1024)
    );
    let response = app
        .http
        .post(app.url("/v1/check"))
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(
        error_code(&response.json().await.unwrap()),
        "payload_too_large"
    );

    // ...and the service keeps serving.
    let (status, _) = app
        .check(json!({"key": "after", "limit": 1, "window": "1s"}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_dot_dot_path_under_docs_is_a_json_404() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = app().await;
    let host = app.base.trim_start_matches("http://").to_string();
    // Raw, because HTTP clients resolve `..` before sending.
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let request = format!("GET /docs/../x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    assert!(
        response.contains("content-type: application/json"),
        "{response}"
    );
    let body: Value = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(error_code(&body), "not_found");
}

#[tokio::test]
async fn health_readiness_metrics_and_docs() {
    let app = app().await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap()["store"], "memory");

    app.check(json!({"key": "m", "limit": 1, "window": "1s", "algorithm": "gcra"}))
        .await;
    app.check(json!({"key": "m", "limit": 1, "window": "1s", "algorithm": "gcra"}))
        .await;
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        "ratekeeper_checks_total{algorithm=\"gcra\",decision=\"allowed\",limit=\"0\",policy=\"inline\"} 1",
        "ratekeeper_checks_total{algorithm=\"gcra\",decision=\"denied\",limit=\"0\",policy=\"inline\"} 1",
        "ratekeeper_degraded_total{failure_mode=\"open\"} 0",
        "ratekeeper_check_duration_seconds_count 2",
        "ratekeeper_store_duration_seconds_count 2",
        "ratekeeper_store_up 1",
        "process_resident_memory_bytes",
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
    assert!(
        !metrics.contains("key=\""),
        "metrics never carry client keys"
    );

    let doc: Value = app.get("/openapi.json").await.json().await.unwrap();
    assert!(doc["paths"]["/v1/check"]["post"].is_object());
    let docs = app.get("/docs/").await;
    assert_eq!(docs.status(), 200);
    assert!(
        docs.text().await.unwrap().contains("swagger"),
        "Swagger UI is served offline"
    );
}

#[tokio::test]
async fn a_full_embedded_store_still_limits_every_new_client() {
    let mut config = settings(None);
    config.memory.max_keys = 64;
    config.deny_cache.capacity = 0;
    let app = TestApp::spawn(config).await;
    for i in 0..2_000 {
        let (status, body) = app
            .check(json!({"key": format!("k{i}"), "limit": 5, "window": "1d"}))
            .await;
        assert_eq!(status, 200);
        assert_eq!(body["degraded"], false, "a full store is not a down store");
    }
    // A brand-new key with limit 1: allowed once, then denied, every time.
    let answers: Vec<bool> = newcomer_answers(&app).await;
    assert_eq!(answers, [true, false, false, false, false]);
    assert_eq!(app.get("/readyz").await.status(), 200);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} missing from:\n{metrics}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(value("ratekeeper_store_keys ") <= 64, "bounded");
    assert!(
        value("ratekeeper_store_evictions_total ") >= 2_000 - 64,
        "every key beyond the cap evicted another"
    );
}

async fn newcomer_answers(app: &TestApp) -> Vec<bool> {
    let mut answers = Vec::new();
    for _ in 0..5 {
        let (_, body) = app
            .check(json!({"key": "newcomer", "limit": 1, "window": "1d"}))
            .await;
        answers.push(body["allowed"] == true);
    }
    answers
}
