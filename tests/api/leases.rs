//! Concurrency limits over HTTP, black box, on the embedded store and on a
//! real Redis: a job runner's flow (acquire, release, renew) in the three
//! forms, leases that free themselves at expiry, a waiter handed the slot
//! a release frees (on its own instance and, through the invalidation
//! channel, on another), the 422s naming their field, and forward-auth
//! refusing what it could never release.

use crate::policy_checks;
use crate::support;

use std::time::{Duration, Instant};

use policy_checks::{error, install, lease_limit, limit, policy};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

for_each_store!(app:
    a_job_runner_acquires_releases_and_renews,
    every_form_takes_one_slot_whatever_the_cost,
    leases_free_themselves_at_expiry,
    a_waiter_gets_the_slot_a_release_frees,
    bad_lease_requests_are_422_naming_the_field,
    forward_auth_refuses_a_policy_with_a_concurrency_limit,
    a_batch_takes_a_lease_per_allowed_item,
    a_new_lease_ttl_keeps_the_leases_held,
);

/// `body` with `fields` added.
fn with(body: &Value, fields: Value) -> Value {
    let mut body = body.clone();
    for (name, value) in fields.as_object().unwrap() {
        body[name] = value.clone();
    }
    body
}

/// `body` sent to `app` with `wait_ms`, on a task of its own: its answer
/// and how long it took.
fn spawn_waiting(
    app: &TestApp,
    body: &Value,
    wait_ms: u64,
) -> tokio::task::JoinHandle<(Value, Duration)> {
    let (url, http, body) = (app.url("/v1/check"), app.http.clone(), body.clone());
    tokio::spawn(async move {
        let started = Instant::now();
        let answer: Value = http
            .post(url)
            .json(&with(&body, json!({"wait_ms": wait_ms})))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (answer, started.elapsed())
    })
}

/// `POST path` (`/v1/release` or `/v1/renew`) of `lease` with the check `body`.
async fn leased(app: &TestApp, path: &str, body: &Value, lease: &str) -> (u16, Value) {
    app.post(path, &with(body, json!({"lease": lease}))).await
}

/// The lease id of an allowed answer.
fn lease_of(answer: &Value) -> String {
    let id = answer["lease"]["id"].as_str().unwrap_or_else(|| {
        panic!("no lease in {answer}");
    });
    assert_eq!(id.len(), 32, "{answer}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{answer}");
    id.to_string()
}

async fn a_job_runner_acquires_releases_and_renews(app: &TestApp) {
    let body = json!({"key": unique_key("jobs"), "algorithm": "concurrency", "limit": 2, "lease_ttl": "30s"});
    let (status, first) = app.check(body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (first["allowed"].as_bool(), first["remaining"].as_u64()),
        (Some(true), Some(1)),
        "{first}"
    );
    assert_eq!(first["lease"]["expires_in_ms"], 30_000, "{first}");
    let a = lease_of(&first);
    let (_, second) = app.check(body.clone()).await;
    let b = lease_of(&second);
    assert_ne!(a, b, "every lease has its own id");
    let (_, third) = app.check(body.clone()).await;
    assert_eq!(third["allowed"], false, "{third}");
    assert!(
        third.get("lease").is_none(),
        "a denial holds no lease: {third}"
    );
    let retry = third["retry_after_ms"].as_u64().unwrap();
    assert!(
        (25_000..=30_000).contains(&retry),
        "the earliest lease's expiry: {third}"
    );
    // A look takes nothing and is answered without a lease.
    let (_, look) = app.check(with(&body, json!({"cost": 0}))).await;
    assert_eq!((&look["allowed"], look.get("lease")), (&json!(false), None));

    // A wrong id changes nothing.
    let (status, wrong) = leased(app, "/v1/release", &body, &"0".repeat(32)).await;
    assert_eq!(status, 200, "{wrong}");
    assert_eq!(
        (&wrong["released"], &wrong["remaining"]),
        (&json!(false), &json!(0))
    );
    let (status, released) = leased(app, "/v1/release", &body, &a).await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(
        (
            &released["released"],
            &released["allowed"],
            &released["remaining"]
        ),
        (&json!(true), &json!(true), &json!(1)),
        "{released}"
    );
    // Idempotent.
    let (_, again) = leased(app, "/v1/release", &body, &a).await;
    assert_eq!(again["released"], false, "{again}");
    // The freed slot, and no more.
    let (_, taken) = app.check(body.clone()).await;
    let c = lease_of(&taken);
    assert_eq!(app.check(body.clone()).await.1["allowed"], false);

    let (status, renewed) = leased(app, "/v1/renew", &body, &b).await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["renewed"], true, "{renewed}");
    assert_eq!(renewed["lease"]["id"], json!(b), "{renewed}");
    assert_eq!(renewed["lease"]["expires_in_ms"], 30_000, "{renewed}");
    let (_, released) = leased(app, "/v1/release", &body, &b).await;
    assert_eq!(released["released"], true);
    let (_, gone) = leased(app, "/v1/renew", &body, &b).await;
    assert_eq!(
        (&gone["renewed"], gone.get("lease")),
        (&json!(false), None),
        "a released lease is not brought back: {gone}"
    );
    let (_, last) = leased(app, "/v1/release", &body, &c).await;
    assert_eq!(
        (&last["released"], &last["remaining"]),
        (&json!(true), &json!(2))
    );
}

/// A concurrency limit beside rate limits, in the inline and policy forms:
/// the check is all or nothing, the cost is spent on the rate limits while
/// the request takes one slot, and a release frees only the slot.
async fn every_form_takes_one_slot_whatever_the_cost(app: &TestApp) {
    install(
        app,
        vec![policy(
            "llm",
            vec![
                // A day: the counts run across requests on the wall clock,
                // and the window's end is epoch-aligned.
                limit("tokens", Algorithm::FixedWindow, 100, "1d", None),
                lease_limit("inflight", 1, "1m"),
            ],
        )],
    );
    let forms = [
        json!({"key": unique_key("inline"), "limits": [
            {"name": "tokens", "algorithm": "fixed_window", "limit": 100, "window": "1d"},
            {"name": "inflight", "algorithm": "concurrency", "limit": 1, "lease_ttl": "1m"}
        ]}),
        json!({"policy": "llm", "key": unique_key("policy")}),
    ];
    for body in forms {
        let (status, first) = app.check(with(&body, json!({"cost": 30}))).await;
        assert_eq!(status, 200, "{body}: {first}");
        assert_eq!(first["allowed"], true, "{first}");
        let lease = lease_of(&first);
        let limits = &first["limits"];
        assert_eq!(
            (&limits[0]["remaining"], &limits[1]["remaining"]),
            (&json!(70), &json!(0)),
            "{first}"
        );
        // In flight already: denied, and the tokens are not spent.
        let (_, second) = app.check(with(&body, json!({"cost": 30}))).await;
        assert_eq!(second["allowed"], false, "{second}");
        assert_eq!(second["limits"][0]["remaining"], 70, "{second}");
        let (status, released) = leased(app, "/v1/release", &body, &lease).await;
        assert_eq!(status, 200, "{released}");
        assert_eq!(released["released"], true, "{released}");
        assert_eq!(
            (
                &released["limits"][0]["remaining"],
                &released["limits"][1]["remaining"]
            ),
            (&json!(70), &json!(1)),
            "a release frees the slot only: {released}"
        );
        let (_, third) = app.check(with(&body, json!({"cost": 70}))).await;
        assert_eq!(third["allowed"], true, "{third}");
        lease_of(&third);
        // Out of tokens: denied by the rate limit with a slot free.
        let (_, fourth) = app.check(with(&body, json!({"cost": 1}))).await;
        assert_eq!(fourth["allowed"], false, "{fourth}");
    }
}

/// A lease never released frees its slot at expiry, with no traffic.
async fn leases_free_themselves_at_expiry(app: &TestApp) {
    let body = json!({"key": unique_key("expiry"), "algorithm": "concurrency", "limit": 1, "lease_ttl": "400ms"});
    let (_, first) = app.check(body.clone()).await;
    let lease = lease_of(&first);
    assert_eq!(first["lease"]["expires_in_ms"], 400);
    let taken = Instant::now();
    let (_, denied) = app.check(body.clone()).await;
    assert_eq!(denied["allowed"], false);
    assert!(
        denied["retry_after_ms"].as_u64().unwrap() <= 400,
        "{denied}"
    );
    tokio::time::sleep(Duration::from_millis(450)).await;
    let (_, later) = app.check(body.clone()).await;
    assert_eq!(
        later["allowed"],
        true,
        "expired after {:?}",
        taken.elapsed()
    );
    // The expired lease is gone: neither released nor renewed.
    let (_, renewed) = leased(app, "/v1/renew", &body, &lease).await;
    assert_eq!(renewed["renewed"], false);
    let (_, released) = leased(app, "/v1/release", &body, &lease).await;
    assert_eq!(released["released"], false);
    assert_eq!(released["remaining"], 0, "the live lease still holds");
}

/// A check waiting on a full key is handed the slot as soon as it is
/// released, long before the held lease's expiry (its retry_after).
async fn a_waiter_gets_the_slot_a_release_frees(app: &TestApp) {
    let body = json!({"key": unique_key("wait"), "algorithm": "concurrency", "limit": 1, "lease_ttl": "1m"});
    let held = lease_of(&app.check(body.clone()).await.1);
    let waiting = spawn_waiting(app, &body, 5000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "waits although the expiry is 1 min away"
    );
    let (_, released) = leased(app, "/v1/release", &body, &held).await;
    assert_eq!(released["released"], true);
    let (answer, took) = waiting.await.unwrap();
    assert_eq!(answer["allowed"], true, "{answer}");
    lease_of(&answer);
    assert!(
        took < Duration::from_secs(2),
        "woken by the release: {took:?}"
    );
    assert!(answer["waited_ms"].as_u64().unwrap() >= 250, "{answer}");
    // Nobody waiting: a deadline far below the expiry is a denial at
    // the deadline, not at once and not at the expiry.
    let started = Instant::now();
    let (_, late) = app.check(with(&body, json!({"wait_ms": 300}))).await;
    assert_eq!(late["allowed"], false, "{late}");
    let took = started.elapsed();
    assert!(
        (Duration::from_millis(250)..Duration::from_secs(2)).contains(&took),
        "{took:?}"
    );
}

async fn bad_lease_requests_are_422_naming_the_field(app: &TestApp) {
    let key = unique_key("bad");
    let cases = [
        (
            json!({"key": key, "algorithm": "concurrency", "limit": 2}),
            "lease_ttl",
        ),
        (
            json!({"key": key, "algorithm": "concurrency", "limit": 2, "window": "1m"}),
            "window",
        ),
        (
            json!({"key": key, "algorithm": "concurrency", "limit": 2, "lease_ttl": "2h"}),
            "lease_ttl",
        ),
        (
            json!({"key": key, "algorithm": "concurrency", "limit": 2, "lease_ttl": "1.5s"}),
            "lease_ttl",
        ),
        (
            json!({"key": key, "algorithm": "concurrency", "limit": 10001, "lease_ttl": "1m"}),
            "limit",
        ),
        (
            json!({"key": key, "algorithm": "concurrency", "limit": 2, "lease_ttl": "1m", "burst": 3}),
            "burst",
        ),
        (
            json!({"key": key, "algorithm": "fixed_window", "limit": 2, "window": "1m", "lease_ttl": "1m"}),
            "lease_ttl",
        ),
        (
            json!({"key": key, "algorithm": "concurrency", "limit": 5, "lease_ttl": "1m", "cost": 2}),
            "cost",
        ),
        (
            json!({"key": key, "limits": [
                {"algorithm": "concurrency", "limit": 5, "lease_ttl": "1m"},
                {"algorithm": "concurrency", "limit": 3, "lease_ttl": "2m"}
            ]}),
            "limits[1].algorithm",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = app.check(body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
        let (code, message) = error(&answer);
        assert_eq!(code, "invalid_request", "{body}");
        assert!(message.starts_with(field), "{body}: {message}");
    }
    let body = json!({"key": key, "algorithm": "concurrency", "limit": 2, "lease_ttl": "1m"});
    let rate = json!({"key": key, "limit": 2, "window": "1m"});
    let lease = "0".repeat(32);
    let releases = [
        (body.clone(), "lease"),
        (with(&body, json!({"lease": ""})), "lease"),
        (with(&body, json!({"lease": "x".repeat(65)})), "lease"),
        (with(&body, json!({"lease": 7})), "lease"),
        (with(&rate, json!({"lease": lease})), "lease"),
        (with(&body, json!({"lease": lease, "cost": 1})), "cost"),
        (
            with(&body, json!({"lease": lease, "wait_ms": 10})),
            "wait_ms",
        ),
    ];
    for path in ["/v1/release", "/v1/renew"] {
        for (body, field) in &releases {
            let (status, answer) = app.post(path, body).await;
            assert_eq!(status, 422, "{path} {body}: {answer}");
            let (code, message) = error(&answer);
            assert_eq!(code, "invalid_request", "{path} {body}");
            assert!(
                message.starts_with(field) || message.contains(&format!("`{field}`")),
                "{path} {body}: {message}"
            );
        }
    }
}

/// Forward-auth has no hook at the end of the proxied request, so it could
/// take a lease but never release it: refused before any store call.
async fn forward_auth_refuses_a_policy_with_a_concurrency_limit(app: &TestApp) {
    install(
        app,
        vec![policy(
            "jobs",
            vec![
                limit("minute", Algorithm::FixedWindow, 100, "1m", None),
                lease_limit("inflight", 5, "30s"),
            ],
        )],
    );
    let response = app.get("/v1/auth/jobs").await;
    assert_eq!(response.status().as_u16(), 501);
    let answer: Value = response.json().await.unwrap();
    let (code, message) = error(&answer);
    assert_eq!(code, "unsupported_policy", "{answer}");
    assert!(
        message.contains("\"inflight\"") && message.contains("/v1/release"),
        "{message}"
    );
    // Nothing was spent: the policy's own check still has every unit.
    let (_, look) = app
        .check(json!({"policy": "jobs", "key": "127.0.0.1", "cost": 0}))
        .await;
    assert_eq!(look["limits"][0]["remaining"], 100, "{look}");
    assert_eq!(look["limits"][1]["remaining"], 5, "{look}");
}

/// Two instances on one Redis: a check waiting on B is handed the slot a
/// release through A frees, woken by the script's invalidation message,
/// and the two instances never hold more than the limit between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_through_one_instance_wakes_a_waiter_on_the_other() {
    let server = RedisServer::start();
    let a = TestApp::spawn(settings(Some(&server.url()))).await;
    let b = TestApp::spawn(settings(Some(&server.url()))).await;
    let body = json!({"key": unique_key("two"), "algorithm": "concurrency", "limit": 1, "lease_ttl": "1m"});
    let held = lease_of(&a.check(body.clone()).await.1);
    assert_eq!(b.check(body.clone()).await.1["allowed"], false);
    let waiting = spawn_waiting(&b, &body, 5000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, released) = leased(&a, "/v1/release", &body, &held).await;
    assert_eq!(released["released"], true);
    let (answer, took) = waiting.await.unwrap();
    assert_eq!(answer["allowed"], true, "{answer}");
    let lease = lease_of(&answer);
    assert!(took < Duration::from_secs(2), "{took:?}");
    // B's lease holds the slot on A too, and A can release it.
    assert_eq!(a.check(body.clone()).await.1["allowed"], false);
    let (_, released) = leased(&a, "/v1/release", &body, &lease).await;
    assert_eq!(released["released"], true, "{released}");
}

/// `POST /v1/checks`: each allowed item of a concurrency limit holds a
/// lease of its own, in order, and each can be released.
async fn a_batch_takes_a_lease_per_allowed_item(app: &TestApp) {
    let body = json!({"key": unique_key("batch"), "algorithm": "concurrency", "limit": 2, "lease_ttl": "1m"});
    let look = with(&body, json!({"cost": 0}));
    let checks = json!({"checks": [body, body, body, look]});
    let (status, answer) = app.post("/v1/checks", &checks).await;
    assert_eq!(status, 200, "{answer}");
    let results = answer["results"].as_array().unwrap();
    let allowed: Vec<bool> = results.iter().map(|r| r["allowed"] == true).collect();
    assert_eq!(allowed, [true, true, false, false], "{answer}");
    let a = lease_of(&results[0]);
    let b = lease_of(&results[1]);
    assert_ne!(a, b);
    assert!(results[2].get("lease").is_none() && results[3].get("lease").is_none());
    for lease in [a, b] {
        let (_, released) = leased(app, "/v1/release", &body, &lease).await;
        assert_eq!(released["released"], true, "{released}");
    }
    assert_eq!(app.check(look).await.1["remaining"], 2);
}

/// The lease TTL is not part of the key's state: leases taken under the
/// old `lease_ttl` still count under a new one, and can still be released.
async fn a_new_lease_ttl_keeps_the_leases_held(app: &TestApp) {
    let key = unique_key("ttl");
    let old = json!({"key": key, "algorithm": "concurrency", "limit": 1, "lease_ttl": "30s"});
    let new = json!({"key": key, "algorithm": "concurrency", "limit": 1, "lease_ttl": "2m"});
    let lease = lease_of(&app.check(old).await.1);
    let (_, denied) = app.check(new.clone()).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    let (_, released) = leased(app, "/v1/release", &new, &lease).await;
    assert_eq!(released["released"], true, "{released}");
    let (_, taken) = app.check(new).await;
    assert_eq!(taken["lease"]["expires_in_ms"], 120_000, "{taken}");
}

/// The test over HTTP: two instances on one Redis, limit 10. 400
/// acquires at once get exactly 10 leases; then each release lets exactly
/// one of 20 more acquires in. A sampler reading the sorted set in Redis
/// never sees more than 10 leases held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_hundred_acquires_on_two_instances_hold_exactly_the_limit() {
    const LIMIT: usize = 10;
    let server = RedisServer::start();
    // 400 requests at once on a busy 2-core box: a store timeout would be
    // answered by the failure policy, which is not what this measures.
    let spawn = || async {
        let mut config = settings(Some(&server.url()));
        config.redis.as_mut().unwrap().timeout = Duration::from_secs(5);
        config.failure.mode = ratekeeper::domain::FailureMode::Closed;
        std::sync::Arc::new(TestApp::spawn(config).await)
    };
    let apps = [spawn().await, spawn().await];
    let key = unique_key("four-hundred");
    let body = json!({"key": key, "algorithm": "concurrency", "limit": LIMIT, "lease_ttl": "1m"});
    let zset = format!("rk:{{{key}}}:cc:0");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, port, zset) = (stop.clone(), server.port, zset.clone());
        std::thread::spawn(move || {
            let mut most = 0usize;
            let mut samples = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Unreadable only once the test is over (it failed).
                let Ok(held) = support::redis_cli(port, &["ZCARD", &zset])
                    .trim()
                    .parse::<usize>()
                else {
                    break;
                };
                most = most.max(held);
                samples += 1;
            }
            (most, samples)
        })
    };
    // n acquires at once, alternating instances: the leases granted.
    let acquire = |n: usize| {
        let (apps, body) = (apps.clone(), body.clone());
        async move {
            let tasks: Vec<_> = (0..n)
                .map(|i| {
                    let (app, body) = (apps[i % 2].clone(), body.clone());
                    tokio::spawn(async move { app.check(body).await.1 })
                })
                .collect();
            let mut leases = Vec::new();
            for task in tasks {
                let answer = task.await.unwrap();
                assert_eq!(answer["degraded"], false, "the store answered: {answer}");
                if answer["allowed"] == true {
                    leases.push(lease_of(&answer));
                }
            }
            leases
        }
    };
    let mut held = acquire(400).await;
    assert_eq!(held.len(), LIMIT, "400 at once on two instances");
    for round in 0..LIMIT {
        let lease = held.remove(0);
        let (_, released) = leased(&apps[round % 2], "/v1/release", &body, &lease).await;
        assert_eq!(released["released"], true, "{released}");
        let granted = acquire(20).await;
        assert_eq!(granted.len(), 1, "round {round}: one release, one more in");
        held.extend(granted);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (most, samples) = sampler.join().unwrap();
    assert!(samples > 10, "the sampler ran: {samples}");
    assert!(
        most <= LIMIT,
        "at most {LIMIT} held at any sample, saw {most}"
    );
    assert_eq!(most, LIMIT, "the sampler saw the key full");
}
