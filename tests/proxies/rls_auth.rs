//! Bearer tokens on the Envoy RLS gRPC listener, through a real tonic
//! client: with `auth.tokens_file`, a call needs `authorization: Bearer
//! <token>` metadata of a `check` or `admin` token; anything else is
//! UNAUTHENTICATED, counted by reason, says what is wrong without
//! repeating what was sent, and spends nothing (on the embedded store and
//! on a real Redis). A reload that revokes a token counts within 2 s.
//! Without tokens, the listener is open as before.

use crate::rls_support;
use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use rls_support::{CONFIG, Rls, config_file, desc, request, rls_settings, start};
use support::{RedisServer, fresh_dir};

const CHECK: &str = "rls-check-token-0123456789abcdef";
const ADMIN: &str = "rls-admin-token-0123456789abcdef";

fn tokens_file(text: &str) -> PathBuf {
    let file = fresh_dir("rls-auth").join("tokens");
    std::fs::write(&file, text).unwrap();
    file
}

async fn start_with_tokens(redis: Option<&str>, tokens: &Path) -> Rls {
    let mut settings = rls_settings(redis, config_file(CONFIG));
    settings.auth.tokens_file = Some(tokens.to_path_buf());
    // Changes are seen through file events only.
    settings.policies.poll_interval = Duration::from_secs(3600);
    start(settings).await
}

/// A call on `client`'s 3-a-day limit.
fn on(client: &str) -> RateLimitRequest {
    request("edge", vec![desc(&[("client", client)])])
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The calls refused, each with what its status message must say (and
/// the part of what was sent it must not repeat).
fn refused_calls() -> Vec<(Vec<String>, &'static str, &'static str, &'static str)> {
    let one = |v: &str| vec![v.to_string()];
    vec![
        (vec![], "missing", "needs a bearer token", ""),
        (
            one("Basic dXNlcjpzZWNyZXQ="),
            "missing",
            "needs a bearer token",
            "dXNlcjpzZWNyZXQ",
        ),
        (
            one(&bearer("wrong-token-0123456789abcdef")),
            "invalid",
            "not valid",
            "wrong-token",
        ),
        (
            one(&bearer(&CHECK[..20])),
            "invalid",
            "not valid",
            &CHECK[..20],
        ),
        (one("Bearer"), "malformed", "`Bearer` with no token", ""),
        (
            one("Bearer secret-part,rest"),
            "malformed",
            "not made of",
            "secret-part",
        ),
        (
            vec![bearer(CHECK), bearer(CHECK)],
            "malformed",
            "more than one authorization value",
            CHECK,
        ),
    ]
}

/// The Prometheus value of `ratekeeper_auth_failures_total{reason}`.
async fn failures(rls: &Rls, reason: &str) -> u64 {
    let body = rls.metrics().await;
    let line = format!("ratekeeper_auth_failures_total{{reason=\"{reason}\"}} ");
    let value = body.lines().find_map(|l| l.strip_prefix(line.as_str()));
    value
        .unwrap_or_else(|| panic!("{line} not in {body}"))
        .parse()
        .unwrap()
}

async fn refusals_spend_nothing_and_both_scopes_pass(redis: Option<&str>) {
    let tokens = tokens_file(&format!("check {CHECK}\nadmin {ADMIN}\n"));
    let rls = start_with_tokens(redis, &tokens).await;
    let calls = refused_calls();
    for (values, _, says, hidden) in &calls {
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let status = rls.ask_with(on("a"), &values).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{values:?}");
        let message = status.message();
        assert!(message.contains(says), "{values:?}: {message}");
        assert!(hidden.is_empty() || !message.contains(hidden), "{message}");
    }
    for reason in ["missing", "invalid", "malformed"] {
        let want = calls.iter().filter(|c| c.1 == reason).count() as u64;
        assert_eq!(failures(&rls, reason).await, want, "{reason}");
    }
    assert_eq!(failures(&rls, "scope").await, 0);
    // None of the refused calls spent: the first good one leaves 2 of 3.
    // Either scope passes; the scheme is case-insensitive, as over HTTP.
    let admin = format!("bearer  {ADMIN} ");
    for (token, remaining) in [(bearer(CHECK), 2), (admin, 1)] {
        let answer = rls.ask_with(on("a"), &[&token]).await.unwrap();
        assert_eq!(answer.overall_code(), Code::Ok);
        assert_eq!(answer.statuses[0].limit_remaining, remaining);
    }
    let answer = rls.ask_with(on("a"), &[&bearer(CHECK)]).await.unwrap();
    assert_eq!(answer.statuses[0].limit_remaining, 0);
    let denied = rls.ask_with(on("a"), &[&bearer(CHECK)]).await.unwrap();
    assert_eq!(denied.overall_code(), Code::OverLimit);
}

#[tokio::test]
async fn refusals_spend_nothing_and_both_scopes_pass_embedded() {
    refusals_spend_nothing_and_both_scopes_pass(None).await;
}

#[tokio::test]
async fn refusals_spend_nothing_and_both_scopes_pass_redis() {
    let redis = RedisServer::start();
    refusals_spend_nothing_and_both_scopes_pass(Some(&redis.url())).await;
}

/// Polls until a call with `token` is refused (`want_refused`) or
/// answered; panics after 2 s.
async fn wait_for(rls: &Rls, token: &str, want_refused: bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let answer = rls.ask_with(on("reload"), &[&bearer(token)]).await;
        if answer.is_err() == want_refused {
            if let Err(status) = answer {
                assert_eq!(status.code(), tonic::Code::Unauthenticated);
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {answer:?} after 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The tokens are the HTTP listener's own: a reload that revokes one
/// closes both doors at once.
#[tokio::test]
async fn a_reload_that_revokes_a_token_counts_within_2_s() {
    let tokens = tokens_file(&format!("check {CHECK}\n"));
    let rls = start_with_tokens(None, &tokens).await;
    assert!(rls.ask_with(on("reload"), &[&bearer(CHECK)]).await.is_ok());
    assert!(rls.ask_with(on("reload"), &[&bearer(ADMIN)]).await.is_err());

    // Revoked: a new file renamed over the old one.
    let staged = tokens.with_file_name("tokens.new");
    std::fs::write(&staged, format!("admin {ADMIN}\n")).unwrap();
    std::fs::rename(&staged, &tokens).unwrap();
    wait_for(&rls, CHECK, true, "the revoked token").await;
    wait_for(&rls, ADMIN, false, "the added token").await;
    let http = reqwest::Client::new()
        .post(format!("{}/v1/check", rls.http))
        .header("authorization", bearer(CHECK))
        .json(&serde_json::json!({"key": "k", "limit": 1, "window": "1s"}))
        .send()
        .await
        .unwrap();
    assert_eq!(http.status(), 401, "HTTP sees the same tokens");
}

/// Without `auth.tokens_file` nothing changes: every call is answered,
/// whatever `authorization` it carries.
#[tokio::test]
async fn without_tokens_the_listener_is_open_as_before() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    let malformed = [bearer(CHECK), "Bearer".into()];
    let sent: [&[&str]; 3] = [&[], &["Bearer"], &[&malformed[0], &malformed[1]]];
    for (i, values) in sent.iter().enumerate() {
        let answer = rls.ask_with(on("open"), values).await.unwrap();
        assert_eq!(answer.statuses[0].limit_remaining, 2 - i as u32);
    }
    assert_eq!(failures(&rls, "missing").await, 0);
}
