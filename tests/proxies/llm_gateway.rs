//! examples/llm-gateway/ as it ships: the Python gateway (under uvicorn)
//! in front of its fake OpenAI-compatible upstream, spending each
//! completion on an organisation's, a team's and a user's budgets through
//! the real binary, on the embedded store and on Redis. A completion that
//! fits is streamed whole and settled at its usage; one that runs out of
//! budget mid-stream is cut with a `budget_exhausted` event and settled at
//! what it received; a gateway killed mid-stream leaves its reservation to
//! lapse at its TTL with what it drew spent and nothing else held. As it
//! ships, the gateway checks the example's policy with levels by its ids.

use crate::clients_support::{DemoApp, launch};
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::domain::{Bounds, PolicySet};

use serde_json::{Value, json};
use support::{RedisServer, TestApp, settings, unique_key};

/// The prompt: 9 characters, 3 tokens as the gateway and the fake count.
const PROMPT: &str = "Say hello";
const PROMPT_TOKENS: u64 = 3;

/// The levels, inline: the organisation's budget `org` a day; the team's
/// and the user's loose.
fn levels(org: u64) -> String {
    json!([
        {"key": "org:{org}", "limit": org, "window": "1d", "algorithm": "fixed_window"},
        {"key": "team:{team}", "limit": 100_000, "window": "1d", "algorithm": "fixed_window"},
        {"key": "user:{user}", "limit": 100_000, "window": "1d", "algorithm": "sliding_window"}
    ])
    .to_string()
}

/// The fake upstream, `delay_ms` between tokens, and the gateway in front
/// of it and of `ratekeeper`, with the levels inline (`org`'s budget) or,
/// for `None`, the example's policy with levels.
fn start(ratekeeper: &TestApp, org: Option<u64>, delay_ms: u64, ttl: &str) -> (DemoApp, DemoApp) {
    let env = |pairs: &[(&str, String)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let upstream =
        launch::llm_gateway("fake_upstream", &env(&[("DELAY_MS", delay_ms.to_string())]));
    let mut vars = env(&[
        ("RATEKEEPER_URL", ratekeeper.base.clone()),
        ("UPSTREAM_URL", upstream.base.clone()),
        ("RESERVATION_TTL", ttl.to_owned()),
        ("DRAW_TOKENS", "10".to_owned()),
    ]);
    vars.extend(org.map(|org| ("LEVELS".to_owned(), levels(org))));
    let gateway = launch::llm_gateway("gateway", &vars);
    (upstream, gateway)
}

/// A streamed completion of `tokens` tokens for `org`'s user: the
/// response, to read event by event.
async fn complete(gateway: &DemoApp, org: &str, tokens: u64) -> reqwest::Response {
    let body = json!({"model": "m", "stream": true, "max_tokens": tokens,
        "messages": [{"role": "user", "content": PROMPT}]});
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gateway.base))
        .header("x-org", org)
        .header("x-team", "4")
        .header("x-user", "7")
        .json(&body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap()
}

/// Every `data:` event of a stream, until it ends or `until` of them.
async fn events(response: &mut reqwest::Response, until: usize) -> Vec<String> {
    let (mut text, mut events) = (String::new(), Vec::new());
    while events.len() < until {
        let Some(chunk) = response.chunk().await.unwrap() else {
            break;
        };
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let line: String = text.drain(..end + 2).collect();
            if let Some(data) = line.trim().strip_prefix("data:") {
                events.push(data.trim().to_owned());
            }
        }
    }
    events
}

/// What the organisation `org` has left (a look at its level alone).
async fn org_left(ratekeeper: &TestApp, org: &str, budget: u64) -> u64 {
    let look = json!({"key": format!("org:{org}"), "limit": budget, "window": "1d",
        "algorithm": "fixed_window", "cost": 0});
    let (status, body) = ratekeeper.check(look).await;
    assert_eq!(status, 200, "{body}");
    body["remaining"].as_u64().unwrap()
}

/// Waits (up to 5 s) until the organisation has `want` left: the gateway
/// settles after its last event is sent.
async fn settled_to(ratekeeper: &TestApp, org: &str, budget: u64, want: u64) {
    for _ in 0..100 {
        if org_left(ratekeeper, org, budget).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        org_left(ratekeeper, org, budget).await,
        want,
        "never settled"
    );
}

async fn fits_then_runs_out(ratekeeper: &TestApp) {
    const BUDGET: u64 = 70;
    let (_upstream, gateway) = start(ratekeeper, Some(BUDGET), 1, "1m");
    let org = unique_key("o");
    // 40 tokens and the prompt's 3 fit: streamed whole, settled at 43.
    let mut response = complete(&gateway, &org, 40).await;
    assert_eq!(response.status(), 200);
    let all = events(&mut response, usize::MAX).await;
    assert_eq!(all.last().map(String::as_str), Some("[DONE]"), "{all:?}");
    let tokens = all.iter().filter(|e| e.contains("\"content\"")).count();
    assert_eq!(tokens, 40, "{all:?}");
    assert!(
        all.iter().any(|e| e.contains("\"total_tokens\": 43")),
        "{all:?}"
    );
    settled_to(ratekeeper, &org, BUDGET, BUDGET - 43).await;
    // 27 left: the next completion of 40 is cut when a draw is denied,
    // having received 24 tokens (3 + 24 = 27 at most is drawn: 3 + 10 + 10).
    let mut response = complete(&gateway, &org, 40).await;
    assert_eq!(response.status(), 200);
    let all = events(&mut response, usize::MAX).await;
    let cut: Value = all
        .iter()
        .find(|e| e.contains("budget_exhausted"))
        .map(|e| serde_json::from_str(e).unwrap())
        .unwrap_or_else(|| panic!("not cut: {all:?}\n{}", gateway.output()));
    assert_eq!(all.last().map(String::as_str), Some("[DONE]"));
    let forwarded = all.iter().filter(|e| e.contains("\"content\"")).count() as u64;
    let used = cut["error"]["usage"]["total_tokens"].as_u64().unwrap();
    // Drawn 3 + 10 + 10 = 23: 20 forwarded, the 21st waited on a draw.
    assert_eq!((forwarded, used), (20, PROMPT_TOKENS + 21), "{cut}");
    settled_to(ratekeeper, &org, BUDGET, BUDGET - 43 - used).await;
    // With 3 left, a prompt of 3 passes and a completion of it is cut at once.
    let mut response = complete(&gateway, &org, 40).await;
    let all = events(&mut response, usize::MAX).await;
    assert!(
        all.iter().any(|e| e.contains("budget_exhausted")),
        "{all:?}"
    );
}

async fn a_killed_gateway_leaves_what_it_drew_spent(ratekeeper: &TestApp) {
    const BUDGET: u64 = 10_000;
    // A TTL well past the 1.4 s the 35 tokens take, so that it cannot
    // lapse mid-stream on a loaded machine (the draws would then be 404s).
    let (_upstream, gateway) = start(ratekeeper, Some(BUDGET), 40, "5s");
    let org = unique_key("o");
    let mut response = complete(&gateway, &org, 500).await;
    assert_eq!(response.status(), 200);
    // 35 tokens streamed: 3 + 4 draws of 10 held.
    let seen = events(&mut response, 35).await;
    assert_eq!(seen.len(), 35, "{seen:?}");
    drop(gateway);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let spent = BUDGET - org_left(ratekeeper, &org, BUDGET).await;
    assert!(
        (PROMPT_TOKENS + 30..=PROMPT_TOKENS + 50).contains(&spent),
        "spent {spent} when killed"
    );
    // Past the reservation's TTL: no settle came, and none will. What was
    // drawn stays spent (no refund), and nothing else is held.
    tokio::time::sleep(Duration::from_millis(5_200)).await;
    assert_eq!(BUDGET - org_left(ratekeeper, &org, BUDGET).await, spent);
    let rest = json!({"key": format!("org:{org}"), "limit": BUDGET, "window": "1d",
        "algorithm": "fixed_window", "cost": BUDGET - spent});
    let (_, body) = ratekeeper.check(rest).await;
    assert_eq!(body["allowed"], true, "the rest of the budget: {body}");
}

/// The gateway as it ships: `{"policy": "llm", "ids"}` on the example's
/// policies file, whose key templates put the team under its organisation.
async fn the_example_policy_with_levels(ratekeeper: &TestApp) {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/llm-gateway/policies.toml"
    );
    let text = std::fs::read_to_string(file).unwrap();
    let set = PolicySet::parse(&text, &Bounds::default(), None).expect("the example loads");
    ratekeeper.policies.store(Arc::new(set));
    let (_upstream, gateway) = start(ratekeeper, None, 1, "1m");
    let org = unique_key("o");
    let mut response = complete(&gateway, &org, 40).await;
    assert_eq!(response.status(), 200);
    let all = events(&mut response, usize::MAX).await;
    assert_eq!(all.last().map(String::as_str), Some("[DONE]"), "{all:?}");
    // Settled at 43 on each level, under the keys the templates build.
    let level = |policy: &str, key: String| json!({"policy": policy, "key": key, "cost": 0});
    let looks = [
        (level("org_monthly", format!("org:{org}")), 10_000_000),
        (level("team_daily", format!("team:{org}/4")), 1_000_000),
    ];
    for (look, budget) in looks {
        let mut left = 0;
        for _ in 0..100 {
            left = ratekeeper.check(look.clone()).await.1["remaining"]
                .as_u64()
                .unwrap();
            if left == budget - 43 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(left, budget - 43, "{look}\n{}", gateway.output());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_checks_the_example_policy_with_levels() {
    let redis = RedisServer::start();
    let ratekeeper = TestApp::spawn(settings(Some(&redis.url()))).await;
    the_example_policy_with_levels(&ratekeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_streams_and_cuts_on_the_embedded_store() {
    let ratekeeper = TestApp::spawn(settings(None)).await;
    fits_then_runs_out(&ratekeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_streams_and_cuts_on_redis() {
    let redis = RedisServer::start();
    let ratekeeper = TestApp::spawn(settings(Some(&redis.url()))).await;
    fits_then_runs_out(&ratekeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_on_the_embedded_store() {
    let ratekeeper = TestApp::spawn(settings(None)).await;
    a_killed_gateway_leaves_what_it_drew_spent(&ratekeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_on_redis() {
    let redis = RedisServer::start();
    let ratekeeper = TestApp::spawn(settings(Some(&redis.url()))).await;
    a_killed_gateway_leaves_what_it_drew_spent(&ratekeeper).await;
}
