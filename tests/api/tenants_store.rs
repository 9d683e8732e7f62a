//! Issue 30, where the runtime entries are kept and who may change them:
//! the embedded store's file across a restart and when corrupt, the admin
//! scope and the token's name in the audit trail, the caps, and a limit
//! lowered and raised while 400 callers flood one key.

use std::time::Duration;

use crate::support;
use crate::tenants::{install_api, put};

use crate::policy_checks::{install, limit, policy};
use ratekeeper::app::{Application, StartError};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{TestApp, fresh_dir, settings, unique_key};

#[tokio::test]
async fn the_embedded_stores_file_keeps_everything_across_a_restart() {
    let file = fresh_dir("tenants-file").join("tenants.json");
    let mut s = settings(None);
    s.tenants.file = Some(file.clone());
    let app = TestApp::spawn(s.clone()).await;
    install_api(&app);
    let key = unique_key("kept");
    let (status, _) = put(
        &app,
        &format!("/v1/overrides/api/{key}"),
        json!({"limits": [{"name": "daily", "limit": 7}]}),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = put(&app, &format!("/v1/blocks/{key}-b"), json!({"reason": "r"})).await;
    assert_eq!(status, 201);
    app.stop().await;
    let again = TestApp::spawn(s).await;
    install_api(&again);
    // The view is rebuilt under the installed policies at the next poll.
    crate::tenants::within_a_second(|| async {
        again.check(json!({"policy": "api", "key": key})).await.1["limit"] == 7
    })
    .await;
    let (_, answer) = again
        .check(json!({"key": format!("{key}-b"), "limit": 1, "window": "1d"}))
        .await;
    assert_eq!(answer["blocked"]["reason"], "r");
    let audit: Value = again.get("/v1/audit").await.json().await.unwrap();
    assert_eq!(audit["entries"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_corrupt_or_truncated_file_is_refused_and_left_as_it_is() {
    let dir = fresh_dir("tenants-corrupt");
    for (name, text) in [
        ("truncated.json", "{\"format\":1,\"version\":3,\"entr"),
        ("other.json", "[1, 2]"),
    ] {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        let mut s = settings(None);
        s.tenants.file = Some(file.clone());
        match Application::build(s).await {
            Err(StartError::Tenants(e)) => {
                let message = e.to_string();
                assert!(message.contains(&*file.to_string_lossy()), "{message}");
                assert!(message.contains("not a valid document"), "{message}");
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("started with a corrupt tenants file"),
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    }
}

#[tokio::test]
async fn only_an_admin_token_writes_and_the_audit_names_it() {
    let check = "check-token-0123456789abcdef";
    let admin = "admin-token-0123456789abcdef";
    let tokens = fresh_dir("tenants-tokens").join("tokens");
    std::fs::write(&tokens, format!("check {check}\nadmin alice {admin}\n")).unwrap();
    let mut s = settings(None);
    s.auth.tokens_file = Some(tokens);
    let app = TestApp::spawn(s).await;
    install_api(&app);
    let key = unique_key("authz");
    let call = |method: &str, path: String, token: &str| {
        app.http
            .request(method.parse().unwrap(), app.url(&path))
            .bearer_auth(token)
            .json(&json!({"reason": "by alice"}))
            .send()
    };
    for (method, path) in [
        ("PUT", format!("/v1/blocks/{key}")),
        ("DELETE", format!("/v1/blocks/{key}")),
        ("PUT", format!("/v1/exemptions/{key}")),
        ("GET", "/v1/blocks".to_string()),
        ("GET", "/v1/audit".to_string()),
    ] {
        let status = call(method, path.clone(), check).await.unwrap().status();
        assert_eq!(status, 403, "{method} {path}");
    }
    let status = call("PUT", format!("/v1/blocks/{key}"), admin)
        .await
        .unwrap()
        .status();
    assert_eq!(status, 201);
    let audit: Value = call("GET", "/v1/audit?limit=1".into(), admin)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let record = &audit["entries"][0];
    assert_eq!(
        (record["token"].as_str(), record["action"].as_str()),
        (Some("alice"), Some("block.set"))
    );
    assert_eq!(record["after"]["set_by"], "alice");
    assert!(
        !audit.to_string().contains(admin),
        "a token in the audit trail"
    );
}

#[tokio::test]
async fn the_caps_refuse_a_write_beyond_them_and_a_replacement_still_passes() {
    let mut s = settings(None);
    s.tenants.max_entries = 3;
    s.tenants.max_per_policy = 2;
    let app = TestApp::spawn(s).await;
    install_api(&app);
    let body = json!({"limits": [{"name": "daily", "limit": 5}]});
    for key in ["a", "b"] {
        assert_eq!(
            put(&app, &format!("/v1/overrides/api/{key}"), body.clone())
                .await
                .0,
            201
        );
    }
    let (status, error) = put(&app, "/v1/overrides/api/c", body.clone()).await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (409, Some("cap_reached"))
    );
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenants.max_per_policy")
    );
    assert_eq!(
        put(&app, "/v1/overrides/api/a", body.clone()).await.0,
        200,
        "a replacement"
    );
    assert_eq!(put(&app, "/v1/blocks/x", json!({})).await.0, 201);
    let (status, error) = put(&app, "/v1/blocks/y", json!({})).await;
    assert_eq!(status, 409, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenants.max_entries")
    );
    assert_eq!(
        app.metric("ratekeeper_tenant_entries{kind=\"override\"}")
            .await,
        2.0
    );
    assert_eq!(
        app.metric("ratekeeper_tenant_entries{kind=\"block\"}")
            .await,
        1.0
    );
    assert_eq!(app.metric("ratekeeper_tenant_entries_max").await, 3.0);
}

/// The default cap: the 10 001st entry is refused, and refused writes
/// keep nothing.
#[tokio::test]
async fn the_ten_thousand_and_first_override_is_refused() {
    let server = support::RedisServer::start();
    let app = TestApp::spawn(settings(Some(&server.url()))).await;
    install_api(&app);
    let body = json!({"limits": [{"name": "daily", "limit": 5}]});
    for n in 0..10_000 {
        let (status, answer) = put(&app, &format!("/v1/overrides/api/k{n}"), body.clone()).await;
        assert_eq!(status, 201, "{n}: {answer}");
    }
    for n in 10_000..10_010 {
        let (status, _) = put(&app, &format!("/v1/overrides/api/k{n}"), body.clone()).await;
        assert_eq!(status, 409);
    }
    assert_eq!(
        app.metric("ratekeeper_tenant_entries{kind=\"override\"}")
            .await,
        10_000.0
    );
    let count: i64 = server
        .cli(&["HLEN", "rk:{tenants}:entries"])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(count, 10_000);
}

/// 400 callers flood one key of each window and bucket algorithm; its
/// limit is lowered from 100 to 50 mid-flood. No check that started after
/// the change was admitted beyond 50; then a raise to 80 lets exactly the
/// difference through.
#[tokio::test]
async fn a_limit_changed_mid_flood_holds_for_every_algorithm() {
    let server = support::RedisServer::start();
    let mut s = settings(Some(&server.url()));
    // Decisions of the store only: on a loaded machine a check that timed
    // out would be answered by the failure policy (open: allowed, saying
    // nothing of the limit). Closed, with a timeout no load here reaches.
    s.failure.mode = ratekeeper::domain::FailureMode::Closed;
    s.redis.as_mut().unwrap().timeout = Duration::from_secs(5);
    let app = TestApp::spawn(s).await;
    let algorithms = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];
    // A day: a bucket refills one unit in 14 minutes, far beyond the test.
    let policies = algorithms
        .iter()
        .map(|&a| policy(a.as_str(), vec![limit("day", a, 100, "1d", None)]))
        .collect();
    install(&app, policies);
    for algorithm in algorithms {
        let name = algorithm.as_str();
        let key = unique_key("flood");
        let check = json!({"policy": name, "key": key});
        let admitted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let after_change = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let changed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut callers = Vec::new();
        for _ in 0..400 {
            let (http, url, check) = (app.http.clone(), app.url("/v1/check"), check.clone());
            let (admitted, after_change, changed) =
                (admitted.clone(), after_change.clone(), changed.clone());
            callers.push(tokio::spawn(async move {
                let started_after = changed.load(std::sync::atomic::Ordering::SeqCst);
                let answer: Value = http
                    .post(url)
                    .json(&check)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(answer["degraded"], false, "{answer}");
                if answer["allowed"] == true {
                    admitted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if started_after {
                        after_change.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }));
        }
        // Mid-flood: once about 30 are admitted.
        while admitted.load(std::sync::atomic::Ordering::SeqCst) < 30 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let lowered = json!({"limits": [{"name": "day", "limit": 50}]});
        assert_eq!(
            put(&app, &format!("/v1/overrides/{name}/{key}"), lowered)
                .await
                .0,
            201
        );
        let before = admitted.load(std::sync::atomic::Ordering::SeqCst);
        changed.store(true, std::sync::atomic::Ordering::SeqCst);
        for caller in callers {
            caller.await.unwrap();
        }
        let total = admitted.load(std::sync::atomic::Ordering::SeqCst);
        let late = after_change.load(std::sync::atomic::Ordering::SeqCst);
        assert!(total <= 100, "{name}: {total} admitted over the old limit");
        // Checks begun after the change: only up to the new limit.
        assert!(
            before + late <= before.max(50),
            "{name}: {before} before, {late} after the change"
        );
        let spent = total.max(50);
        let raised = json!({"limits": [{"name": "day", "limit": 80}]});
        assert_eq!(
            put(&app, &format!("/v1/overrides/{name}/{key}"), raised)
                .await
                .0,
            200
        );
        let mut more = 0;
        for _ in 0..60 {
            let (_, answer) = app.check(check.clone()).await;
            assert_eq!(answer["degraded"], false, "{answer}");
            more += usize::from(answer["allowed"] == true);
        }
        assert_eq!(
            more,
            80usize.saturating_sub(spent),
            "{name}: {total} admitted in the flood"
        );
    }
}
