//! `POST /v1/draw`, black box, on the embedded store and on a real Redis
//! (and 50 concurrent streams through two instances sharing one Redis):
//! a stream reserves its estimate, draws more as it grows (each draw
//! decided on every level like a check), and settles with its usage; a
//! retried draw spends nothing twice; a stream past the budget is cut; a
//! gateway that dies leaves its reservation to lapse at its TTL with what
//! it drew spent and nothing else held.

use crate::policy_checks;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use policy_checks::error;
use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

for_each_store!(app:
    a_stream_draws_then_settles_and_the_units_add_up,
    draws_are_idempotent_by_seq_and_end_with_the_settle,
    a_draw_is_denied_on_any_level_and_spends_nothing,
    a_reservation_lapses_at_its_ttl_with_what_was_drawn_spent,
    bad_draws_are_refused,
    a_blocked_key_cannot_draw,
);

/// An organisation's budget and a user's, inline, a day long (no window
/// ends mid-test).
fn levels(org: &str, org_limit: u64, user: &str) -> Value {
    json!([
        {"key": org, "limit": org_limit, "window": "1d", "algorithm": "fixed_window"},
        {"key": user, "limit": 100_000, "window": "1d", "algorithm": "sliding_window"}
    ])
}

/// A levels check of `estimate` asking for a reservation: its answer and id.
async fn reserve(
    app: &TestApp,
    levels: &Value,
    estimate: u64,
    ttl: &str,
) -> (Value, Option<String>) {
    let body = json!({"levels": levels, "cost": estimate, "reservation_ttl": ttl});
    let (status, answer) = app.check(body).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["reservation"]["id"].as_str().map(str::to_owned);
    (answer, id)
}

async fn draw(app: &TestApp, id: &str, cost: u64, seq: u64) -> (u16, Value) {
    app.post(
        "/v1/draw",
        &json!({"reservation": id, "cost": cost, "seq": seq}),
    )
    .await
}

async fn settle(app: &TestApp, id: &str, actual: u64) -> (u16, Value) {
    app.post("/v1/settle", &json!({"reservation": id, "actual": actual}))
        .await
}

/// What level `n` of `levels` has left (a look at it alone).
async fn left(app: &TestApp, levels: &Value, n: usize) -> u64 {
    let mut look = levels[n].clone();
    look["cost"] = json!(0);
    let (status, body) = app.check(look).await;
    assert_eq!(status, 200, "{body}");
    body["remaining"].as_u64().unwrap()
}

async fn a_stream_draws_then_settles_and_the_units_add_up(app: &TestApp) {
    let levels = levels(&unique_key("org"), 10_000, &unique_key("user"));
    let (_, id) = reserve(app, &levels, 1_000, "10m").await;
    let id = id.unwrap();
    for seq in 1..=3 {
        let (status, answer) = draw(app, &id, 500, seq).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["allowed"], true, "{answer}");
        assert_eq!(answer["drawn"], 1_000 + 500 * seq, "{answer}");
        assert_eq!(answer["levels"][0]["remaining"], 10_000 - 1_000 - 500 * seq);
    }
    // Drawn 2 500; the stream used 2 200: 300 come back on every level.
    let (status, answer) = settle(app, &id, 2_200).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(left(app, &levels, 0).await, 10_000 - 2_200);
    assert_eq!(left(app, &levels, 1).await, 100_000 - 2_200);
    // Used 2 400 of another 1 000 reserved and 1 000 drawn: 400 more spent.
    let (_, id) = reserve(app, &levels, 1_000, "10m").await;
    let id = id.unwrap();
    let (_, answer) = draw(app, &id, 1_000, 1).await;
    assert_eq!(answer["drawn"], 2_000, "{answer}");
    let (status, _) = settle(app, &id, 2_400).await;
    assert_eq!(status, 200);
    assert_eq!(left(app, &levels, 0).await, 10_000 - 2_200 - 2_400);
}

async fn draws_are_idempotent_by_seq_and_end_with_the_settle(app: &TestApp) {
    let levels = levels(&unique_key("org"), 1_000, &unique_key("user"));
    let (_, id) = reserve(app, &levels, 100, "10m").await;
    let id = id.unwrap();
    let (_, first) = draw(app, &id, 50, 1).await;
    assert_eq!(
        (first["allowed"].as_bool(), first["drawn"].as_u64()),
        (Some(true), Some(150))
    );
    // A retry (its answer was lost): allowed, nothing spent again.
    for _ in 0..3 {
        let (status, again) = draw(app, &id, 50, 1).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(
            (again["allowed"].as_bool(), again["drawn"].as_u64()),
            (Some(true), Some(150))
        );
    }
    assert_eq!(left(app, &levels, 0).await, 1_000 - 150);
    // Numbers may skip; one below the last allowed draw is refused.
    let (_, next) = draw(app, &id, 50, 5).await;
    assert_eq!(next["drawn"], 200, "{next}");
    let (status, stale) = draw(app, &id, 50, 4).await;
    assert_eq!(status, 409, "{stale}");
    assert_eq!(error(&stale).0, "draw_out_of_order");
    let (status, _) = settle(app, &id, 120).await;
    assert_eq!(status, 200);
    let (status, after) = draw(app, &id, 50, 6).await;
    assert_eq!(status, 409, "{after}");
    assert_eq!(error(&after).0, "reservation_settled");
    // The settle, retried, changes nothing; another actual is refused.
    let (status, _) = settle(app, &id, 120).await;
    assert_eq!(status, 200);
    let (status, _) = settle(app, &id, 121).await;
    assert_eq!(status, 409);
    assert_eq!(left(app, &levels, 0).await, 1_000 - 120);
}

async fn a_draw_is_denied_on_any_level_and_spends_nothing(app: &TestApp) {
    let (org, user) = (unique_key("org"), unique_key("user"));
    let levels = json!([
        {"key": org, "limit": 10_000, "window": "1d", "algorithm": "fixed_window"},
        {"key": user, "limit": 300, "window": "1d", "algorithm": "gcra"}
    ]);
    let (_, id) = reserve(app, &levels, 200, "10m").await;
    let id = id.unwrap();
    let (_, denied) = draw(app, &id, 150, 1).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    assert_eq!(denied["drawn"], 200, "{denied}");
    assert_eq!(denied["levels"][0]["allowed"], true, "{denied}");
    assert_eq!(denied["levels"][1]["allowed"], false, "{denied}");
    assert!(denied["retry_after_ms"].as_u64().unwrap() > 0, "{denied}");
    assert_eq!(
        left(app, &levels, 0).await,
        10_000 - 200,
        "the organisation spent nothing"
    );
    // The same seq may try again, smaller.
    let (_, allowed) = draw(app, &id, 100, 1).await;
    assert_eq!(
        (allowed["allowed"].as_bool(), allowed["drawn"].as_u64()),
        (Some(true), Some(300))
    );
}

async fn a_reservation_lapses_at_its_ttl_with_what_was_drawn_spent(app: &TestApp) {
    // The gateway reserves 400, draws 300 more, and dies: no settle.
    let levels = levels(&unique_key("org"), 5_000, &unique_key("user"));
    // A TTL that a draw right after the check cannot miss on a loaded
    // machine, and that the wait below certainly outlasts.
    let (_, id) = reserve(app, &levels, 400, "3s").await;
    let id = id.unwrap();
    let (_, answer) = draw(app, &id, 300, 1).await;
    assert_eq!(answer["drawn"], 700, "{answer}");
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    // Lapsed: what was drawn stays spent, no refund, nothing else held.
    let (status, lapsed) = settle(app, &id, 0).await;
    assert_eq!(status, 404, "{lapsed}");
    let (status, lapsed) = draw(app, &id, 10, 2).await;
    assert_eq!(status, 404, "{lapsed}");
    assert_eq!(left(app, &levels, 0).await, 5_000 - 700);
    assert_eq!(left(app, &levels, 1).await, 100_000 - 700);
    // The rest of the budget is there for the next request.
    let (answer, _) = reserve(app, &levels, 4_300, "1m").await;
    assert_eq!(answer["allowed"], true, "{answer}");
}

async fn bad_draws_are_refused(app: &TestApp) {
    let levels = levels(&unique_key("org"), 1_000, &unique_key("user"));
    let (_, id) = reserve(app, &levels, 10, "10m").await;
    let id = id.unwrap();
    let refused = |body: Value| async move {
        let (status, answer) = app.post("/v1/draw", &body).await;
        (
            status,
            error(&answer).0.to_owned(),
            error(&answer).1.to_owned(),
        )
    };
    let (status, code, message) =
        refused(json!({"reservation": id, "cost": 1_001, "seq": 1})).await;
    assert_eq!(
        (status, code.as_str()),
        (422, "invalid_request"),
        "{message}"
    );
    assert!(message.starts_with("cost: at most 1000"), "{message}");
    let (status, _, message) = refused(json!({"reservation": id, "cost": 1, "seq": 0})).await;
    assert_eq!(status, 422, "{message}");
    assert!(message.starts_with("seq:"), "{message}");
    let (status, _, _) = refused(json!({"reservation": id, "cost": 1})).await;
    assert_eq!(status, 422);
    let (status, _, _) = refused(json!({"reservation": id, "cost": 1, "seq": 1, "key": "x"})).await;
    assert_eq!(status, 422);
    let (status, code, _) = refused(json!({"reservation": "AAAA", "cost": 1, "seq": 1})).await;
    assert_eq!((status, code.as_str()), (404, "unknown_reservation"));
    // A reservation with one character changed is another's, unknown.
    let mut edited = id.clone().into_bytes();
    let at = edited.len() / 2;
    edited[at] = if edited[at] == b'A' { b'B' } else { b'A' };
    let edited = String::from_utf8(edited).unwrap();
    let (status, code, _) = refused(json!({"reservation": edited, "cost": 1, "seq": 1})).await;
    assert_eq!((status, code.as_str()), (404, "unknown_reservation"));
    assert_eq!(left(app, &levels, 0).await, 1_000 - 10, "nothing drawn");
}

/// 50 streams at once on `apps`, each reserving 100 and drawing 50 more
/// before each chunk it streams (a gateway that draws ahead), until it
/// has streamed 600 or a draw is denied (the stream is cut); then it
/// settles with what it streamed. The organisation's budget is 12 000,
/// half of what they want.
async fn fifty_streams(apps: &[Arc<TestApp>]) {
    const STREAMS: usize = 50;
    const BUDGET: u64 = 12_000;
    const ESTIMATE: u64 = 100;
    const CHUNK: u64 = 50;
    const WANTED: u64 = 600;
    let org = unique_key("org");
    let all = Arc::new(levels(&org, BUDGET, &unique_key("users")));
    let tasks: Vec<_> = (0..STREAMS)
        .map(|i| {
            let app = apps[i % apps.len()].clone();
            let all = all.clone();
            tokio::spawn(async move {
                let (answer, id) = reserve(&app, &all, ESTIMATE, "10m").await;
                let Some(id) = id else {
                    assert_eq!(answer["allowed"], false, "{answer}");
                    return (0, 0, true);
                };
                let (mut drawn, mut streamed, mut seq, mut cut) = (ESTIMATE, 0, 0, false);
                while streamed < WANTED {
                    if streamed + CHUNK > drawn {
                        seq += 1;
                        let (status, answer) = draw(&app, &id, CHUNK, seq).await;
                        assert_eq!(status, 200, "{answer}");
                        if answer["allowed"] != true {
                            cut = true;
                            break;
                        }
                        drawn = answer["drawn"].as_u64().unwrap();
                    }
                    streamed += CHUNK;
                    tokio::task::yield_now().await;
                }
                let (status, answer) = settle(&app, &id, streamed).await;
                assert_eq!(status, 200, "{answer}");
                (drawn, streamed, cut)
            })
        })
        .collect();
    let (mut drawn, mut streamed, mut cut) = (0, 0, 0);
    for task in tasks {
        let (d, s, c) = task.await.unwrap();
        // A stream that did not stream all it wanted was cut by a denied
        // draw, never left running past the budget.
        assert_eq!(c, s < WANTED, "streamed {s}, cut: {c}");
        drawn += d;
        streamed += s;
        cut += usize::from(c);
    }
    println!(
        "DRAWS {STREAMS} streams: drawn {drawn}, streamed {streamed} of a budget of {BUDGET}; {cut} cut"
    );
    assert!(drawn <= BUDGET, "drew {drawn} of {BUDGET}");
    assert!(cut > 0, "the budget ran out mid-stream");
    // Draws of 50 on a budget of 12 000: the streams used all of it.
    assert_eq!(drawn, BUDGET, "a budget left unused while streams were cut");
    // Every reservation settled: the budget holds exactly what streamed.
    assert_eq!(left(&apps[0], &all, 0).await, BUDGET - streamed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_streams_on_the_embedded_store() {
    fifty_streams(&[Arc::new(TestApp::spawn(settings(None)).await)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_streams_through_two_instances_sharing_redis() {
    let redis = RedisServer::start();
    let mut config = settings(Some(&redis.url()));
    config.redis.as_mut().unwrap().timeout = Duration::from_secs(5);
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    fifty_streams(&apps).await;
}

async fn a_blocked_key_cannot_draw(app: &TestApp) {
    let (org, user) = (unique_key("org"), unique_key("user"));
    let levels = levels(&org, 1_000, &user);
    let (_, id) = reserve(app, &levels, 100, "10m").await;
    let id = id.unwrap();
    let path = format!("/v1/blocks/{user}");
    let (status, body) = crate::tenants::put(app, &path, json!({"reason": "abuse"})).await;
    assert_eq!(status, 201, "{body}");
    // The stream is cut at its next draw, and nothing is spent.
    let (status, answer) = draw(app, &id, 50, 1).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["blocked"]["reason"], "abuse", "{answer}");
    assert_eq!(left(app, &levels, 0).await, 1_000 - 100);
    // A draw on a check holding a concurrency limit is refused: the lease
    // is the check's alone.
    let mixed = json!({"key": unique_key("c"), "limits": [
        {"name": "rate", "limit": 100, "window": "1d"},
        {"name": "slots", "algorithm": "concurrency", "limit": 2, "lease_ttl": "1m"}],
        "cost": 1, "reservation_ttl": "10m"});
    let (_, answer) = app.check(mixed).await;
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
    let (status, refused) = draw(app, &id, 1, 1).await;
    assert_eq!(status, 422, "{refused}");
    assert!(error(&refused).1.contains("concurrency"), "{refused}");
}
