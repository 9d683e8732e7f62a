//! Policies that name their levels, black box, on the embedded store and
//! on a real Redis: a caller sends `{"policy", "ids"}` and the key
//! templates build the level keys. The check is the levels check of those
//! policies and keys (the same counters, all or nothing), in `/v1/check`,
//! batches, reservations and draws, and in forward-auth from `ids_from`;
//! and every error names its field.

use crate::forward_auth_support;
use crate::policy_checks;
use crate::support;

use forward_auth_support::get;
use policy_checks::error;
use ratekeeper::domain::{Bounds, PolicySet};
use serde_json::{Value, json};
use std::sync::Arc;
use support::{TestApp, unique_key};

for_each_store!(app:
    ids_make_the_levels_check_of_the_templates_keys,
    a_denial_at_one_level_spends_nothing_at_the_others,
    a_reservation_and_draws_go_through_the_hierarchy,
    a_batch_item_may_be_a_hierarchy,
    forward_auth_takes_the_ids_from_headers,
    runtime_overrides_and_blocks_apply_per_level,
    bad_ids_and_wrong_forms_are_refused_naming_the_field,
);

/// Days and months only: no window ends mid-test.
const FILE: &str = r#"
[policies.org_monthly]
limits = [ { name = "tokens", algorithm = "fixed_window", limit = 10000, window = "30d" } ]

[policies.team_daily]
limits = [ { name = "tokens", algorithm = "fixed_window", limit = 3000, window = "1d" } ]

[policies.user_daily]
limits = [ { name = "tokens", limit = 2000, window = "1d" } ]

[policies.llm]
levels = [
  { name = "org", policy = "org_monthly", key = "org:{org}" },
  { name = "team", policy = "team_daily", key = "team:{org}/{team}" },
  { name = "user", policy = "user_daily", key = "user:{user}" },
]
ids_from = { org = "header:x-org-id", team = "header:x-team-id", user = "header:x-user-id" }
deny_status = 403

[policies.no_forward]
levels = [ { policy = "user_daily", key = "u:{user}" } ]
"#;

fn install(app: &TestApp) {
    let set = PolicySet::parse(FILE, &Bounds::default(), None).expect("a valid file");
    app.policies.store(Arc::new(set));
}

/// Fresh ids for one test.
struct Ids {
    org: String,
    team: String,
    user: String,
}

impl Ids {
    fn new() -> Ids {
        Ids {
            org: unique_key("org"),
            team: unique_key("team"),
            user: unique_key("user"),
        }
    }

    fn ids(&self) -> Value {
        json!({"org": self.org, "team": self.team, "user": self.user})
    }

    fn body(&self, cost: u64) -> Value {
        json!({"policy": "llm", "ids": self.ids(), "cost": cost})
    }

    /// Each level as the policy form on the key its template builds.
    fn levels(&self) -> [Value; 3] {
        [
            json!({"policy": "org_monthly", "key": format!("org:{}", self.org)}),
            json!({"policy": "team_daily", "key": format!("team:{}/{}", self.org, self.team)}),
            json!({"policy": "user_daily", "key": format!("user:{}", self.user)}),
        ]
    }
}

/// What a check of `level` alone reports left (a look).
async fn left(app: &TestApp, level: &Value) -> u64 {
    let mut look = level.clone();
    look["cost"] = json!(0);
    let (status, body) = app.check(look).await;
    assert_eq!(status, 200, "{body}");
    body["remaining"].as_u64().unwrap()
}

async fn ids_make_the_levels_check_of_the_templates_keys(app: &TestApp) {
    install(app);
    let ids = Ids::new();
    let (status, body) = app.check(ids.body(500)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["allowed"], true, "{body}");
    let levels = body["levels"].as_array().unwrap();
    let names: Vec<&str> = levels.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["org", "team", "user"], "{body}");
    let [org, team, user] = ids.levels();
    for (level, sent) in levels.iter().zip([&org, &team, &user]) {
        assert_eq!(level["key"], sent["key"], "{body}");
        assert_eq!(level["policy"], sent["policy"], "{body}");
    }
    // The very counters a check of each policy and key alone spends.
    assert_eq!(left(app, &org).await, 10_000 - 500);
    assert_eq!(left(app, &team).await, 3_000 - 500);
    assert_eq!(left(app, &user).await, 2_000 - 500);
    // And the levels form of those keys is the same check.
    let (_, listed) = app
        .check(json!({"levels": ids.levels(), "cost": 500}))
        .await;
    assert_eq!(listed["allowed"], true, "{listed}");
    let (_, body) = app.check(ids.body(0)).await;
    assert_eq!(body["levels"][2]["remaining"], 1_000, "{body}");
    // The hierarchy is listed with its levels, ids and sources.
    let listed: Value = app.get("/v1/policies").await.json().await.unwrap();
    let llm = &listed["hierarchies"][0];
    assert_eq!(llm["name"], "llm", "{listed}");
    assert_eq!(llm["ids"], json!(["org", "team", "user"]), "{listed}");
    assert_eq!(llm["levels"][1]["key"], "team:{org}/{team}", "{listed}");
    assert_eq!(llm["ids_from"]["user"], "header:x-user-id", "{listed}");
}

async fn a_denial_at_one_level_spends_nothing_at_the_others(app: &TestApp) {
    install(app);
    let ids = Ids::new();
    let [org, team, user] = ids.levels();
    // The user spends 1 800 alone; the hierarchy's 500 then fits the
    // organisation and the team but not the user.
    let mut alone = user.clone();
    alone["cost"] = json!(1_800);
    assert_eq!(app.check(alone).await.1["allowed"], true);
    let (_, body) = app.check(ids.body(500)).await;
    assert_eq!(body["allowed"], false, "{body}");
    let allowed: Vec<&Value> = body["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["allowed"])
        .collect();
    assert_eq!(allowed, [true, true, false], "{body}");
    assert_eq!(left(app, &org).await, 10_000);
    assert_eq!(left(app, &team).await, 3_000);
    assert_eq!(left(app, &user).await, 200);
}

async fn a_reservation_and_draws_go_through_the_hierarchy(app: &TestApp) {
    install(app);
    let ids = Ids::new();
    let mut body = ids.body(300);
    body["reservation_ttl"] = json!("1h");
    let (status, reserved) = app.check(body).await;
    assert_eq!(status, 200, "{reserved}");
    let id = reserved["reservation"]["id"].as_str().unwrap().to_string();
    let (status, drawn) = app
        .post(
            "/v1/draw",
            &json!({"reservation": id, "cost": 200, "seq": 1}),
        )
        .await;
    assert_eq!(status, 200, "{drawn}");
    // `drawn` is the reservation's total: the 300 reserved and the 200 drawn.
    assert_eq!(
        (drawn["allowed"].clone(), drawn["drawn"].clone()),
        (json!(true), json!(500))
    );
    // A reload that keys the team by its id alone: the reservation keeps
    // the keys its check spent on, so the settle gives back there, not on
    // `team:<team>`, which was never charged.
    let moved = FILE.replace("team:{org}/{team}", "team:{team}");
    let set = PolicySet::parse(&moved, &Bounds::default(), None).expect("a valid file");
    app.policies.store(Arc::new(set));
    // Settled at 350 of the 500 held: 150 come back on every level.
    let (status, settled) = app
        .post("/v1/settle", &json!({"reservation": id, "actual": 350}))
        .await;
    assert_eq!(status, 200, "{settled}");
    let [org, team, user] = ids.levels();
    assert_eq!(settled["levels"][1]["key"], team["key"], "{settled}");
    assert_eq!(left(app, &org).await, 10_000 - 350);
    assert_eq!(left(app, &team).await, 3_000 - 350);
    assert_eq!(left(app, &user).await, 2_000 - 350);
    let elsewhere = json!({"policy": "team_daily", "key": format!("team:{}", ids.team)});
    assert_eq!(
        left(app, &elsewhere).await,
        3_000,
        "nothing given back there"
    );
}

async fn a_batch_item_may_be_a_hierarchy(app: &TestApp) {
    install(app);
    let ids = Ids::new();
    let (status, body) = app
        .post(
            "/v1/checks",
            &json!({"checks": [ids.body(100), {"policy": "llm", "ids": {"org": "x"}}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results[0]["allowed"], true, "{body}");
    assert_eq!(results[0]["levels"][1]["name"], "team", "{body}");
    assert_eq!(results[1]["error"]["code"], "invalid_request", "{body}");
    assert_eq!(left(app, &ids.levels()[1]).await, 3_000 - 100);
}

async fn forward_auth_takes_the_ids_from_headers(app: &TestApp) {
    install(app);
    let ids = Ids::new();
    let headers = [
        ("x-org-id", ids.org.as_str()),
        ("x-team-id", ids.team.as_str()),
        ("x-user-id", ids.user.as_str()),
    ];
    let a = get(app, "/v1/auth/llm", &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    // The same counters as the JSON form with the same ids.
    let [org, team, user] = ids.levels();
    assert_eq!(left(app, &org).await, 10_000 - 1);
    assert_eq!(left(app, &team).await, 3_000 - 1);
    let mut rest = user.clone();
    rest["cost"] = json!(1_999);
    assert_eq!(app.check(rest).await.1["allowed"], true);
    let a = get(app, "/v1/auth/llm", &headers).await;
    assert_eq!(a.status, 403, "the hierarchy's deny_status: {}", a.body);
    assert_eq!(a.json()["violated-policies"], json!(["user/tokens"]));
    assert_eq!(left(app, &org).await, 10_000 - 1, "a denial spends nothing");
    let a = get(app, "/v1/auth/llm", &headers[..2]).await;
    assert_eq!(a.status, 401, "{}", a.body);
    assert_eq!(error(&a.json()).0, "missing_key");
    let a = get(app, "/v1/auth/no_forward", &headers).await;
    assert_eq!(a.status, 501, "{}", a.body);
    assert!(error(&a.json()).1.contains("ids_from"), "{}", a.body);
}

async fn bad_ids_and_wrong_forms_are_refused_naming_the_field(app: &TestApp) {
    install(app);
    let cases = [
        (
            json!({"policy": "llm", "ids": {"org": "1", "team": "2"}}),
            "invalid_request",
            "ids.user",
        ),
        (
            json!({"policy": "llm", "ids": {"org": "1", "team": "2", "user": "3", "zone": "4"}}),
            "invalid_request",
            "ids.zone",
        ),
        (
            json!({"policy": "llm", "ids": {"org": "1", "team": "2", "user": ""}}),
            "invalid_request",
            "ids.user",
        ),
        (
            json!({"policy": "llm", "ids": {"org": 1}}),
            "invalid_request",
            "ids",
        ),
        (
            json!({"policy": "llm", "key": "k"}),
            "invalid_request",
            "send `ids`",
        ),
        (
            json!({"policy": "user_daily", "ids": {"user": "1"}}),
            "invalid_request",
            "has no levels",
        ),
        (
            json!({"policy": "nope", "ids": {"user": "1"}}),
            "unknown_policy",
            "\"llm\"",
        ),
        (
            json!({"policy": "llm", "ids": {}, "key": "k"}),
            "mixed_forms",
            "`key`",
        ),
        (
            json!({"levels": [{"policy": "llm", "ids": {"user": "1"}}]}),
            "invalid_request",
            "levels[0].ids",
        ),
        (
            json!({"policy": "llm", "ids": {"org": "1", "team": "2", "user": "3"}, "cost": 2_001}),
            "invalid_request",
            "cost",
        ),
    ];
    for (body, code, says) in cases {
        let (status, answer) = app.check(body.clone()).await;
        assert_eq!(status, 422, "{body} -> {answer}");
        let (got, message) = error(&answer);
        assert_eq!(got, code, "{body} -> {answer}");
        assert!(message.contains(says), "{body} -> {message}");
    }
}

async fn runtime_overrides_and_blocks_apply_per_level(app: &TestApp) {
    install(app);
    let ids = Ids::new();
    // The user's policy raised for its built key, at runtime: that level
    // takes 5 000, as a check of that policy and key alone would.
    let user_key = format!("user:{}", ids.user);
    let path = format!("/v1/overrides/user_daily/{user_key}");
    let body = json!({"limits": [{"name": "tokens", "limit": 5_000}], "ttl": "1h"});
    let (status, set) = crate::tenants::put(app, &path, body).await;
    assert_eq!(status, 201, "{set}");
    let (_, body) = app.check(ids.body(2_500)).await;
    assert_eq!(body["allowed"], true, "{body}");
    assert_eq!(body["levels"][2]["limit"], 5_000, "{body}");
    // A block on the team's built key blocks the hierarchy.
    let team_key = format!("team:{}/{}", ids.org, ids.team);
    // The `/` of the key percent-encoded in the path.
    let path = format!("/v1/blocks/{}", team_key.replace('/', "%2F"));
    let (status, set) = crate::tenants::put(app, &path, json!({})).await;
    assert_eq!(status, 201, "{set}");
    let (_, body) = app.check(ids.body(1)).await;
    assert_eq!(body["allowed"], false, "{body}");
    // An entry names a level's policy, not the hierarchy.
    let path = format!("/v1/overrides/llm/{user_key}");
    let body = json!({"limits": [{"name": "tokens", "limit": 5}], "ttl": "1h"});
    let (status, refused) = crate::tenants::put(app, &path, body).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        error(&refused).1.contains("a policy with levels"),
        "{refused}"
    );
}
