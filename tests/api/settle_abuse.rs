//! Issue 27's reproductions, each now refused: a `check` token (tokens
//! on, on the embedded store and on a real Redis) that settled checks
//! which never happened minted capacity, 42 of 50 checks allowed on a
//! policy of 5 an hour and 100 of 100 on inline limits of 10 a minute, and
//! four settles of `actual` 1 000 locked a token bucket of 10 an hour for
//! about 100 hours. The old body is now a 422, and a real reservation
//! settles once: replaying it changes nothing.

use crate::policy_checks;
use crate::settle::{untimed, with};
use crate::support;

use serde_json::{Value, json};

use policy_checks::{install, limit, policy};
use ratekeeper::domain::Algorithm;
use support::{RedisServer, TestApp, fresh_dir, settings, unique_key};

const TOKEN: &str = "app-check-token-0123456789abcdef";

/// The service with one `check` token, on Redis at `redis_url` or embedded.
async fn spawn(redis_url: Option<&str>) -> TestApp {
    let tokens = fresh_dir("settle-abuse").join("tokens");
    std::fs::write(&tokens, format!("check {TOKEN}\n")).unwrap();
    let mut settings = settings(redis_url);
    settings.auth.tokens_file = Some(tokens);
    TestApp::spawn(settings).await
}

/// POSTs `body` to `path` with the check token.
async fn post(app: &TestApp, path: &str, body: &Value) -> (u16, Value) {
    let response = app
        .http
        .post(app.url(path))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Whether a check of `body` was allowed.
async fn allowed(app: &TestApp, body: &Value) -> bool {
    let (status, answer) = post(app, "/v1/check", body).await;
    assert_eq!(status, 200, "{answer}");
    answer["allowed"] == true
}

/// The old body: 422, naming `reservation`.
fn refused(status: u16, answer: &Value) {
    assert_eq!(status, 422, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("reservation"), "{message}");
}

/// Both stores, one after the other.
async fn on_both(scenario: impl AsyncFn(&TestApp)) {
    let memory = spawn(None).await;
    scenario(&memory).await;
    let server = RedisServer::start();
    let redis = spawn(Some(&server.url())).await;
    scenario(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_no_real_check_mints_nothing_on_a_policy() {
    on_both(async |app: &TestApp| {
        install(
            app,
            vec![policy(
                "strict",
                vec![limit("hour", Algorithm::SlidingWindow, 5, "1h", None)],
            )],
        );
        let key = unique_key("strict");
        let check = json!({"policy": "strict", "key": key});
        // One real reservation of the whole capacity, settled at 0: the
        // attacker's best, replayed every round.
        let (_, first) = post(
            app,
            "/v1/check",
            &with(&check, json!({"cost": 5, "reservation_ttl": "1h"})),
        )
        .await;
        let id = first["reservation"]["id"].as_str().unwrap().to_owned();
        let mut admitted = 0;
        for round in 0..10 {
            for _ in 0..5 {
                admitted += u32::from(allowed(app, &check).await);
            }
            let old = json!({"policy": "strict", "key": key, "reserved": 5, "actual": 0});
            let (status, answer) = post(app, "/v1/settle", &old).await;
            refused(status, &answer);
            let (status, answer) =
                post(app, "/v1/settle", &json!({"reservation": id, "actual": 0})).await;
            assert_eq!(status, 200, "round {round}: {answer}");
        }
        // The first settle gave back the 5 the reservation's check spent:
        // exactly the 5 of the policy, however often it is replayed.
        assert_eq!(admitted, 5, "of 50");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_no_real_check_mints_nothing_inline() {
    on_both(async |app: &TestApp| {
        for algorithm in [
            "fixed_window",
            "sliding_window",
            "sliding_log",
            "token_bucket",
            "gcra",
        ] {
            let check = json!({"key": unique_key(algorithm), "limits": [
                {"name": "day", "algorithm": algorithm, "limit": 10, "window": "1d"}
            ]});
            let (_, first) = post(
                app,
                "/v1/check",
                &with(&check, json!({"cost": 10, "reservation_ttl": "1h"})),
            )
            .await;
            let id = first["reservation"]["id"].as_str().unwrap().to_owned();
            let mut admitted = 0;
            for _ in 0..10 {
                let (status, answer) =
                    post(app, "/v1/settle", &json!({"reservation": id, "actual": 0})).await;
                assert_eq!(status, 200, "{answer}");
                for _ in 0..10 {
                    admitted += u32::from(allowed(app, &check).await);
                }
                let old = with(&check, json!({"reserved": 10, "actual": 0}));
                let (status, answer) = post(app, "/v1/settle", &old).await;
                refused(status, &answer);
            }
            assert_eq!(admitted, 10, "{algorithm}: of 100");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_locked_at_most_once_per_check() {
    on_both(async |app: &TestApp| {
        let check = json!({"key": unique_key("lock"), "limit": 10, "window": "1h", "algorithm": "token_bucket"});
        for _ in 0..4 {
            let old = with(&check, json!({"reserved": 0, "actual": 1000}));
            let (status, answer) = post(app, "/v1/settle", &old).await;
            refused(status, &answer);
        }
        assert!(allowed(app, &with(&check, json!({"cost": 0}))).await, "nothing owed");
        // A real check of cost 0 with a reservation: its settle may raise
        // by at most 100 capacities, once.
        let (_, look) = post(app, "/v1/check", &with(&check, json!({"cost": 0, "reservation_ttl": "1h"}))).await;
        let id = look["reservation"]["id"].as_str().unwrap().to_owned();
        let (status, first) = post(app, "/v1/settle", &json!({"reservation": id, "actual": 1000})).await;
        assert_eq!(status, 200, "{first}");
        for _ in 0..3 {
            let (status, again) =
                post(app, "/v1/settle", &json!({"reservation": id, "actual": 1000})).await;
            assert_eq!(status, 200, "{again}");
            assert_eq!(untimed(again.clone()), untimed(first.clone()));
            let retry = again["retry_after_ms"].as_u64().unwrap();
            assert!(retry <= first["retry_after_ms"].as_u64().unwrap(), "{again}");
        }
        let (status, _) = post(app, "/v1/settle", &json!({"reservation": id, "actual": 999})).await;
        assert_eq!(status, 409);
        // 1 000 tokens owed at 10 an hour: about 100 hours, not 400.
        let hours = first["retry_after_ms"].as_u64().unwrap() as f64 / 3_600_000.0;
        assert!((99.0..=101.0).contains(&hours), "{hours} h");
    })
    .await;
}
