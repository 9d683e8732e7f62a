//! `POST /v1/check` with `levels`, black box, on the embedded store and on
//! a real Redis: the contract (an organisation's policy, a team's
//! policy and a user's inline rule, one cost for all), each level's
//! answer, a denial at one level spending nothing at the others, a
//! reservation settled on every level, batches, blocks, and the errors,
//! each naming its level.

use crate::policy_checks;
use crate::support;

use policy_checks::{error, install, limit, policy};
use ratekeeper::domain::Algorithm;
use serde_json::{Value, json};
use support::{TestApp, unique_key};

for_each_store!(app:
    a_hierarchy_spends_on_every_level_or_none,
    the_answer_holds_each_levels_own,
    a_reservation_settles_on_every_level,
    a_batch_item_may_be_levels,
    a_blocked_level_blocks_the_check,
    bad_levels_are_refused_naming_the_level,
);

/// The organisation's monthly tokens and the team's daily ones.
fn install_budgets(app: &TestApp) {
    install(
        app,
        vec![
            policy(
                "org_monthly",
                vec![limit("month", Algorithm::FixedWindow, 10_000, "30d", None)],
            ),
            policy(
                "team_daily",
                vec![limit("day", Algorithm::FixedWindow, 3_000, "1d", None)],
            ),
        ],
    );
}

/// The example, on fresh keys.
struct Keys {
    org: String,
    team: String,
    user: String,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            org: unique_key("org"),
            team: unique_key("team"),
            user: unique_key("user"),
        }
    }

    fn org(&self) -> Value {
        json!({"policy": "org_monthly", "key": self.org})
    }

    fn team(&self) -> Value {
        json!({"policy": "team_daily", "key": self.team})
    }

    /// 2 000 tokens a day for the user: a day, so no window ends mid-test.
    fn user(&self) -> Value {
        json!({"key": self.user, "limit": 2_000, "window": "1d", "algorithm": "sliding_window"})
    }

    fn body(&self, cost: u64) -> Value {
        json!({"levels": [self.org(), self.team(), self.user()], "cost": cost})
    }
}

/// What `level` alone has left (a look).
async fn left(app: &TestApp, level: Value) -> u64 {
    let mut look = level;
    look["cost"] = json!(0);
    let (status, body) = app.check(look).await;
    assert_eq!(status, 200, "{body}");
    body["remaining"].as_u64().unwrap()
}

async fn a_hierarchy_spends_on_every_level_or_none(app: &TestApp) {
    install_budgets(app);
    let keys = Keys::new();
    let (status, body) = app.check(keys.body(1_200)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["allowed"], true, "{body}");
    // The user's 2 000 hold one more 1 200 only partly: denied, and the
    // organisation and the team spend nothing for it.
    let (_, body) = app.check(keys.body(1_200)).await;
    assert_eq!(body["allowed"], false, "{body}");
    let levels = body["levels"].as_array().unwrap();
    let allowed: Vec<&Value> = levels.iter().map(|l| &l["allowed"]).collect();
    assert_eq!(allowed, [true, true, false], "{body}");
    assert_eq!(left(app, keys.org()).await, 10_000 - 1_200);
    assert_eq!(left(app, keys.team()).await, 3_000 - 1_200);
    assert_eq!(left(app, keys.user()).await, 2_000 - 1_200);
    // A level's counter is the one a check of it alone spends: the team
    // spent elsewhere leaves too little for the hierarchy.
    let (_, alone) = app
        .check(json!({"policy": "team_daily", "key": keys.team, "cost": 1_500}))
        .await;
    assert_eq!(alone["allowed"], true, "{alone}");
    let (_, body) = app.check(keys.body(400)).await;
    assert_eq!(body["allowed"], false, "{body}");
    assert_eq!(body["levels"][1]["allowed"], false, "{body}");
    assert_eq!(body["levels"][1]["remaining"], 300, "{body}");
    let (_, body) = app.check(keys.body(300)).await;
    assert_eq!(body["allowed"], true, "{body}");
    assert_eq!(left(app, keys.org()).await, 10_000 - 1_500);
    assert_eq!(left(app, keys.team()).await, 0);
    assert_eq!(left(app, keys.user()).await, 2_000 - 1_500);
}

async fn the_answer_holds_each_levels_own(app: &TestApp) {
    install_budgets(app);
    let keys = Keys::new();
    let (status, body) = app.check(keys.body(1_000)).await;
    assert_eq!(status, 200, "{body}");
    // The combined decision: the most restrictive limit of any level.
    assert_eq!(
        (body["limit"].as_u64(), body["remaining"].as_u64()),
        (Some(2_000), Some(1_000))
    );
    assert_eq!(body["retry_after_ms"], 0);
    let levels = body["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3);
    assert_eq!(levels[0]["policy"], "org_monthly");
    assert_eq!(levels[0]["remaining"], 9_000);
    assert_eq!(levels[0]["limits"][0]["name"], "month");
    assert_eq!(levels[1]["policy"], "team_daily");
    assert_eq!(levels[1]["remaining"], 2_000);
    assert_eq!(levels[2]["policy"], Value::Null);
    assert_eq!(levels[2]["remaining"], 1_000);
    // One inline rule is its own answer: no list.
    assert!(levels[2].get("limits").is_none(), "{body}");
    // Denied by two levels (the team spent 1 500 alone meanwhile):
    // retry_after_ms is the largest of the denying levels' waits, after
    // which every level would pass if nothing else arrives.
    let (_, alone) = app
        .check(json!({"policy": "team_daily", "key": keys.team, "cost": 1_500}))
        .await;
    assert_eq!(alone["allowed"], true, "{alone}");
    let (_, body) = app.check(keys.body(1_200)).await;
    assert_eq!(body["allowed"], false, "{body}");
    let waits: Vec<u64> = body["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["retry_after_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(waits[0], 0, "the organisation allows: {body}");
    assert!(waits[1] > 0 && waits[2] > 0, "{body}");
    assert_eq!(body["retry_after_ms"].as_u64(), waits.iter().max().copied());
    assert_eq!(body["levels"][2]["allowed"], false);
    assert_eq!(body["levels"][1]["limits"][0]["allowed"], false);
}

async fn a_reservation_settles_on_every_level(app: &TestApp) {
    install_budgets(app);
    let keys = Keys::new();
    let mut body = keys.body(1_000);
    body["reservation_ttl"] = json!("10m");
    let (status, answer) = app.check(body).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
    // The stream used 250: 750 come back on every level, once.
    let (status, settled) = app
        .post("/v1/settle", &json!({"reservation": id, "actual": 250}))
        .await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(settled["levels"][0]["remaining"], 10_000 - 250, "{settled}");
    for _ in 0..2 {
        let (status, again) = app
            .post("/v1/settle", &json!({"reservation": id, "actual": 250}))
            .await;
        assert_eq!(status, 200, "{again}");
    }
    let (status, other) = app
        .post("/v1/settle", &json!({"reservation": id, "actual": 0}))
        .await;
    assert_eq!(status, 409, "{other}");
    assert_eq!(left(app, keys.org()).await, 10_000 - 250);
    assert_eq!(left(app, keys.team()).await, 3_000 - 250);
    assert_eq!(left(app, keys.user()).await, 2_000 - 250);
    // A denied levels check gets no reservation.
    let mut body = keys.body(1_900);
    body["reservation_ttl"] = json!("10m");
    let (_, denied) = app.check(body).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    assert!(denied.get("reservation").is_none(), "{denied}");
}

async fn a_batch_item_may_be_levels(app: &TestApp) {
    install_budgets(app);
    let keys = Keys::new();
    let batch = json!({"checks": [keys.body(1_500), keys.body(1_500), keys.user()]});
    let (status, body) = app.post("/v1/checks", &batch).await;
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results[0]["allowed"], true, "{body}");
    assert_eq!(results[1]["allowed"], false, "{body}");
    assert_eq!(results[1]["levels"][2]["allowed"], false, "{body}");
    assert_eq!(results[2]["remaining"], 2_000 - 1_500 - 1, "{body}");
}

async fn a_blocked_level_blocks_the_check(app: &TestApp) {
    install_budgets(app);
    let keys = Keys::new();
    let path = format!("/v1/blocks/{}", keys.team);
    let (status, body) = crate::tenants::put(app, &path, json!({"reason": "unpaid"})).await;
    assert_eq!(status, 201, "{body}");
    let (_, body) = app.check(keys.body(10)).await;
    assert_eq!(body["allowed"], false, "{body}");
    assert_eq!(body["blocked"]["reason"], "unpaid", "{body}");
    assert_eq!(left(app, keys.org()).await, 10_000, "nothing spent");
}

async fn bad_levels_are_refused_naming_the_level(app: &TestApp) {
    install_budgets(app);
    let keys = Keys::new();
    let refused = |body: Value| async move {
        let (status, answer) = app.check(body).await;
        assert_eq!(status, 422, "{answer}");
        let (code, message) = error(&answer);
        (code.to_owned(), message.to_owned())
    };
    let (code, message) = refused(
        json!({"levels": [keys.org(), {"key": "u", "limit": 5, "window": "1m", "cost": 2}]}),
    )
    .await;
    assert_eq!(code, "invalid_request");
    assert!(message.starts_with("levels[1].cost:"), "{message}");
    let (code, message) =
        refused(json!({"levels": [keys.org(), {"policy": "nope", "key": "k"}]})).await;
    assert_eq!(code, "unknown_policy");
    assert!(message.starts_with("levels[1].policy:"), "{message}");
    let (code, message) = refused(json!({"levels": [keys.org(), {"key": "k", "limit": 5}]})).await;
    assert_eq!(code, "invalid_request");
    assert!(message.starts_with("levels[1]."), "{message}");
    let (code, message) = refused(json!({"levels": [keys.org(), keys.org()]})).await;
    assert_eq!(code, "invalid_request");
    assert!(
        message.contains("levels[1]: keeps the same counter as levels[0]"),
        "{message}"
    );
    let nine: Vec<Value> = (0..9)
        .map(|i| json!({"key": format!("k{i}"), "limit": 5, "window": "1m"}))
        .collect();
    let (_, message) = refused(json!({"levels": nine})).await;
    assert!(
        message.contains("must hold 1 to 8 levels, got 9"),
        "{message}"
    );
    let (_, message) = refused(json!({"levels": [{"levels": [keys.org()]}]})).await;
    assert!(message.starts_with("levels[0].levels:"), "{message}");
    let (_, message) = refused(json!({"levels": []})).await;
    assert!(message.contains("got 0"), "{message}");
    let (code, message) = refused(json!({"levels": [keys.org()], "key": "x"})).await;
    assert_eq!(code, "mixed_forms");
    assert!(
        message.contains("`levels` cannot be combined with `key`"),
        "{message}"
    );
    let (_, message) = refused(json!({"levels": [keys.org(), keys.team()], "cost": 3_001})).await;
    assert!(
        message.contains("levels[1] limit \"day\" (3000), got 3001"),
        "{message}"
    );
    let (_, message) = refused(json!({"levels": [{"key": "c", "limit": 2, "lease_ttl": "1m", "algorithm": "concurrency"}]})).await;
    assert!(message.contains("no concurrency limit"), "{message}");
    // Nothing of any refused check was spent.
    assert_eq!(left(app, keys.org()).await, 10_000);
}
