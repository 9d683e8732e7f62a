//! The client examples of examples/clients/, each run as it ships against
//! the real ratekeeper binary (embedded store, a policies file written
//! here): the Python ASGI middleware under uvicorn, the Node and Go
//! middlewares in their demo servers, and ratekeeper-acquire.sh.
//!
//! For each: the policy's units pass, then a 429 with Retry-After and
//! ratekeeper's RateLimit headers (the script: exit 75, and `wait_ms`
//! waits for a unit); with ratekeeper frozen (SIGSTOP) and then killed,
//! the documented fallback (open: the request passes; closed: 503, the
//! script exits 69) within the client's timeout plus a margin; with
//! tokens on, a client without its token is refused by ratekeeper (401),
//! which the client takes for ratekeeper being unusable, not for a
//! denial of the end user: it falls back and says so, loudly; with the
//! token, requests are limited as usual, and no log shows it.

use crate::clients_support;
use crate::support;

use std::time::Duration;

use clients_support::launch::{self, acquire};
use clients_support::{
    API_POLICY_HEADER, DemoApp, Fallback, LIMIT, Ratekeeper, TOKEN, Token, assert_fallback_time,
    client_env,
};
use support::{fresh_loopback, unique_key, wait_until};

/// Each client's configured timeout: not any client's default (200 ms), so
/// a client that ignored the setting fails the lower bound.
const TIMEOUT: Duration = Duration::from_millis(300);
/// What a loaded 2-core machine may add to a middleware's timeout: the
/// demo app's own handling and scheduling.
const MARGIN: Duration = Duration::from_millis(400);
/// The script starts bash, curl and jq twice over: a process costs tens
/// of milliseconds while other builds load the machine.
const SHELL_MARGIN: Duration = Duration::from_millis(800);

type Launch = fn(&[(String, String)]) -> DemoApp;

#[tokio::test]
async fn python_limits_then_falls_back() {
    limits_then_falls_back(launch::python).await;
}

#[tokio::test]
async fn python_with_tokens() {
    with_tokens(launch::python, Token::File).await;
}

#[tokio::test]
async fn node_limits_then_falls_back() {
    limits_then_falls_back(launch::node).await;
}

#[tokio::test]
async fn node_with_tokens() {
    with_tokens(launch::node, Token::Env).await;
}

#[tokio::test]
async fn go_limits_then_falls_back() {
    limits_then_falls_back(launch::go).await;
}

#[tokio::test]
async fn go_with_tokens() {
    with_tokens(launch::go, Token::Env).await;
}

/// `LIMIT` requests of `key` pass through `app`, with ratekeeper's
/// headers; the next is a 429 with Retry-After and the same headers.
async fn expect_limited(app: &DemoApp, key: &str) {
    for n in 1..=LIMIT {
        let reply = app.get(key).await;
        assert_eq!(reply.status, 200, "request {n} of {LIMIT}");
        assert_eq!(reply.header("ratelimit-policy"), API_POLICY_HEADER);
        let remaining = format!("\"burst\";r={};", LIMIT - n);
        assert!(
            reply.header("ratelimit").starts_with(&remaining),
            "{:?}",
            reply.headers
        );
    }
    let denied = app.get(key).await;
    assert_eq!(denied.status, 429, "{:?}", denied.headers);
    // A unit comes back every 20 minutes: 1200 s, rounded up, less the
    // seconds this test has taken since it spent the first one.
    let retry: u64 = denied.header("retry-after").parse().unwrap();
    assert!((1190..=1200).contains(&retry), "Retry-After: {retry}");
    assert_eq!(denied.header("ratelimit-policy"), API_POLICY_HEADER);
    assert!(
        denied.header("ratelimit").starts_with("\"burst\";r=0;t="),
        "{:?}",
        denied.headers
    );
}

async fn limits_then_falls_back(launch: Launch) {
    let mut rk = Ratekeeper::start(false);
    let open = launch(&client_env(&rk, Fallback::Open, Token::None, TIMEOUT));
    let closed = launch(&client_env(&rk, Fallback::Closed, Token::None, TIMEOUT));
    let key = unique_key("clients");
    expect_limited(&open, &key).await;
    // Without an API key the client address is the key: a fresh one has
    // its whole budget, whatever `key` spent.
    assert_eq!(closed.get_from(fresh_loopback()).await.status, 200);

    rk.freeze();
    for round in 0..2 {
        // The exhausted key passes too: failing open is no limit at all.
        let reply = open.get(&key).await;
        assert_eq!(reply.status, 200, "frozen, open, round {round}");
        assert_fallback_time("frozen, open", reply.elapsed, TIMEOUT, MARGIN, true);
        let reply = closed.get(&unique_key("clients")).await;
        assert_eq!(reply.status, 503, "frozen, closed, round {round}");
        assert_eq!(reply.header("retry-after"), "1");
        assert_fallback_time("frozen, closed", reply.elapsed, TIMEOUT, MARGIN, true);
    }
    rk.kill();
    for round in 0..2 {
        let reply = open.get(&key).await;
        assert_eq!(reply.status, 200, "killed, open, round {round}");
        assert_fallback_time("killed, open", reply.elapsed, TIMEOUT, MARGIN, false);
        let reply = closed.get(&key).await;
        assert_eq!(reply.status, 503, "killed, closed, round {round}");
        assert_fallback_time("killed, closed", reply.elapsed, TIMEOUT, MARGIN, false);
    }
    // An outage is logged, and says which way the client failed.
    assert!(open.output().contains("failing open"), "{}", open.output());
    assert!(
        closed.output().contains("failing closed"),
        "{}",
        closed.output()
    );
}

async fn with_tokens(launch: Launch, token: Token) {
    let rk = Ratekeeper::start(true);
    let with = launch(&client_env(&rk, Fallback::Open, token, TIMEOUT));
    let without = launch(&client_env(&rk, Fallback::Open, Token::None, TIMEOUT));
    let key = unique_key("clients-tokens");
    // ratekeeper refuses the token-less client (401): a fault of the
    // client's configuration, not a denial of the end user, so it fails
    // open and nothing is limited (nor spent)...
    for n in 0..=LIMIT {
        assert_eq!(
            without.get(&key).await.status,
            200,
            "request {n} without a token"
        );
    }
    // ...and says why, loudly. `missing_token`, not `invalid_token`: it
    // sent no Authorization header at all.
    wait_until(Duration::from_secs(2), "the refusal in the log", || {
        without.output().contains("401 (missing_token)")
    });
    // With the token the same key has its whole budget, and is limited.
    expect_limited(&with, &key).await;
    for app in [&with, &without] {
        assert!(
            !app.output().contains(TOKEN),
            "the token in a log:\n{}",
            app.output()
        );
    }
}

/// The script's configuration, with `RATEKEEPER_POLICY` left to `-p`.
fn shell_env(rk: &Ratekeeper, fallback: Fallback, token: Token) -> Vec<(String, String)> {
    let mut env = client_env(rk, fallback, token, TIMEOUT);
    env.retain(|(name, _)| name != "RATEKEEPER_POLICY");
    env
}

#[test]
fn shell_limits_waits_then_falls_back() {
    let mut rk = Ratekeeper::start(false);
    let closed = shell_env(&rk, Fallback::Closed, Token::None);
    let open = shell_env(&rk, Fallback::Open, Token::None);
    let key = unique_key("clients-shell");
    let wrapped = ["-p", "api", "-k", &key, "-w", "0", "--", "echo", "ran"];
    for n in 1..=LIMIT {
        acquire(&closed, &wrapped).expect(0, true, &format!("run {n}"));
    }
    let denied = acquire(&closed, &wrapped);
    denied.expect(75, false, "denied");
    // As the middlewares' Retry-After: 1200 s rounded up, less this test's.
    let retry: u64 = denied
        .stderr
        .split("retry after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `retry after N s` in {:?}", denied.stderr));
    assert!((1190..=1200).contains(&retry), "{}", denied.stderr);

    shell_waits(&closed);

    rk.freeze();
    let run = acquire(&closed, &wrapped);
    run.expect(69, false, "frozen, closed");
    assert_fallback_time(
        "shell, frozen, closed",
        run.elapsed,
        TIMEOUT,
        SHELL_MARGIN,
        true,
    );
    let run = acquire(&open, &wrapped);
    run.expect(0, true, "frozen, open");
    assert_fallback_time(
        "shell, frozen, open",
        run.elapsed,
        TIMEOUT,
        SHELL_MARGIN,
        true,
    );
    rk.kill();
    let run = acquire(&closed, &wrapped);
    run.expect(69, false, "killed, closed");
    assert!(run.stderr.contains("connection refused"), "{}", run.stderr);
    assert_fallback_time(
        "shell, killed, closed",
        run.elapsed,
        TIMEOUT,
        SHELL_MARGIN,
        false,
    );
    let run = acquire(&open, &wrapped);
    run.expect(0, true, "killed, open");
    assert_fallback_time(
        "shell, killed, open",
        run.elapsed,
        TIMEOUT,
        SHELL_MARGIN,
        false,
    );
}

/// `wait_ms`: policy `jobs` frees a unit every 2 s. A run that may wait
/// gets the next unit; one that may not wait long enough is denied at
/// once; a wait over the service's `limits.max_wait` is a refusal (422).
fn shell_waits(env: &[(String, String)]) {
    let key = unique_key("clients-shell-jobs");
    let first = acquire(env, &["-p", "jobs", "-k", &key, "-w", "0"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let waited = acquire(env, &["-p", "jobs", "-k", &key, "-w", "5000"]);
    assert_eq!(waited.code, 0, "{}", waited.stderr);
    // The unit came back about 2 s after the first, less that run's exit
    // and this one's start.
    assert!(
        waited.elapsed >= Duration::from_millis(1000),
        "did not wait: {:?}",
        waited.elapsed
    );
    let hurried = acquire(env, &["-p", "jobs", "-k", &key, "-w", "100"]);
    assert_eq!(hurried.code, 75, "{}", hurried.stderr);
    assert!(
        hurried.elapsed < Duration::from_millis(1500),
        "{:?}",
        hurried.elapsed
    );
    let too_long = acquire(env, &["-p", "jobs", "-k", &key, "-w", "20000"]);
    assert_eq!(too_long.code, 69, "{}", too_long.stderr);
    assert!(
        too_long.stderr.contains("422 (invalid_request)"),
        "{}",
        too_long.stderr
    );
}

#[test]
fn shell_with_tokens() {
    let rk = Ratekeeper::start(true);
    let key = unique_key("clients-shell-tokens");
    let wrapped = ["-p", "api", "-k", &key, "-w", "0", "--", "echo", "ran"];
    // Refused (401): closed by default, exit 69 and the command not run;
    // open, the command runs. Either way nothing is spent.
    let refused = acquire(&shell_env(&rk, Fallback::Closed, Token::None), &wrapped);
    refused.expect(69, false, "no token, closed");
    let loud = refused.stderr.contains("ERROR") && refused.stderr.contains("401 (missing_token)");
    assert!(loud, "{}", refused.stderr);
    acquire(&shell_env(&rk, Fallback::Open, Token::None), &wrapped).expect(
        0,
        true,
        "no token, open",
    );

    let with = shell_env(&rk, Fallback::Closed, Token::File);
    for n in 1..=LIMIT {
        acquire(&with, &wrapped).expect(0, true, &format!("with the token, run {n}"));
    }
    let denied = acquire(&with, &wrapped);
    denied.expect(75, false, "with the token, denied");
    assert!(!denied.stderr.contains(TOKEN), "{}", denied.stderr);
}
