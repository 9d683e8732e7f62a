//! Issue 15, part 3: a partition between hosts. Redis and ratekeeper run
//! in containers of their own on one network; while checks flow through
//! the published port, Redis's container is disconnected from the network
//! (`docker network disconnect`: its interface is gone, so packets to it
//! are dropped and its name no longer resolves), then connected again.
//!
//! For each failure mode, with the defaults (`redis.timeout` 100 ms):
//! - every answer comes within `redis.timeout` + 50 ms, and as the mode
//!   says (open: allowed; closed: denied; local: limited by the instance's
//!   own counters), marked degraded;
//! - `/readyz` says 503 during the partition;
//! - after reconnecting, 30 parallel callers on a fresh key of limit 10 get
//!   exactly 10, none degraded, within 2 s, and the load's answers stop
//!   being degraded within 2 s.
//!
//! Prints one `FAULTS partition mode=...` line per mode.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::containers::{
    REDIS_TIMEOUT, SLACK, assert_bounded, assert_exact_again, body, exact_again, ratekeeper, redis,
};
use support::docker::{Container, Network, docker_ok};
use support::{Load, Outage, TestApp, ms, unique_key};

/// The bound from the reconnect to exact answers. Measured: about
/// 0.3 s, and 1.1 to 1.4 s in about one run in ten. The slow ones do not
/// look like ratekeeper's doing: right after `docker network connect`
/// returns, the first SYN of a new connection is sometimes lost (a plain
/// `redis-cli ping` from a third container then takes 1.05 s, TCP's
/// initial retransmission timeout). In ratekeeper's log of such a run, a
/// trial check 0.9 s after the reconnect still timed out and Redis was
/// "back" at 1.3 s: one reconnect attempt lost, probably to that (its
/// connect timeout is 500 ms, the backoff up to 500 ms more).
const EXACT_AGAIN_WITHIN: Duration = Duration::from_secs(2);
/// How long the partition lasts: long enough for the breaker to open
/// (5 timeouts) and for a silent connection to be replaced.
const PARTITION: Duration = Duration::from_secs(3);
/// Load keys, and a limit they never reach.
const KEYS: usize = 8;
const LOAD_LIMIT: u64 = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_fail_open() {
    partition("open").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_fail_closed() {
    partition("closed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_fail_local() {
    partition("local").await;
}

/// What the partition showed, for the printed line.
struct During {
    readyz_503_after: Duration,
}

/// Redis and ratekeeper (failing `mode`) in containers on a new network,
/// ratekeeper ready and exact.
async fn deploy(mode: &str) -> (Network, Container, Container, Arc<TestApp>) {
    let network = Network::create();
    let redis = redis("redis", &network, &[]);
    // By name, through Docker's DNS: a reconnected container may get
    // another address.
    let env = [
        format!("RATEKEEPER_REDIS__URL=redis://{}:6379", redis.name),
        format!("RATEKEEPER_FAILURE__MODE={mode}"),
    ];
    let (rk, app) = ratekeeper(&network, &env).await;
    exact_again(&app, Instant::now(), Duration::ZERO)
        .await
        .expect("exact before the partition");
    (network, redis, rk, app)
}

async fn partition(mode: &str) {
    let _one = support::docker::one_test_at_a_time();
    let (network, redis, rk, app) = deploy(mode).await;
    let bodies: Vec<Value> = (0..KEYS)
        .map(|_| body(&unique_key("part"), LOAD_LIMIT))
        .collect();
    let load = Load::start(app.clone(), bodies, 8, Duration::from_millis(5), 10_000);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let cut_at = Instant::now();
    let took = network_op(&["network", "disconnect", "-f", &network.name, &redis.name]).await;
    let during = while_partitioned(mode, &app, cut_at).await;

    let rejoined_at = Instant::now();
    let rejoin_took = network_op(&["network", "connect", &network.name, &redis.name]).await;
    let exact = exact_again(
        &app,
        rejoined_at,
        EXACT_AGAIN_WITHIN + Duration::from_secs(3),
    )
    .await;
    // Keep the load on a little longer, to see that it stays recovered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = load.finish().await;
    let outage = Outage::measure(&samples, cut_at, |_| true);
    let after = Outage::measure(&samples, rejoined_at, |_| true);
    let partitioned: Vec<_> = samples
        .iter()
        .filter(|s| s.sent >= cut_at + Duration::from_secs(1) && s.answered < rejoined_at)
        .collect();
    let slowest = samples.iter().map(|s| s.latency()).max().unwrap();
    println!(
        "FAULTS partition mode={mode} disconnect_ms={} readyz_503_ms={} connect_ms={} exact_ms={} last_degraded_after_reconnect_ms={} max_latency_ms={} checks={} degraded={} partitioned_checks={}",
        took.as_millis(),
        during.readyz_503_after.as_millis(),
        rejoin_took.as_millis(),
        ms(exact.as_ref().ok().copied()),
        ms(after.last_degraded_after),
        slowest.as_millis(),
        outage.checks,
        outage.degraded,
        partitioned.len(),
    );
    assert_bounded(&samples, cut_at);
    // The partition was felt, and every answer during it was the policy's.
    assert!(
        partitioned.len() > 100,
        "the load ran on: {}",
        partitioned.len()
    );
    assert!(
        partitioned.iter().all(|s| s.degraded),
        "answered by the failure mode throughout"
    );
    assert_exact_again(exact, &after, EXACT_AGAIN_WITHIN, "the reconnect", &rk);
    wait_ready(&app, EXACT_AGAIN_WITHIN).await;
}

/// Runs a `docker network` command off the runtime; how long it took.
async fn network_op(args: &[&str]) -> Duration {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let started = Instant::now();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        docker_ok(&args)
    })
    .await
    .unwrap();
    started.elapsed()
}

/// Until `PARTITION` after `cut_at`: `/readyz` turns 503 and stays so, and
/// fresh keys are answered as `mode` says, degraded and within the bound.
async fn while_partitioned(mode: &str, app: &Arc<TestApp>, cut_at: Instant) -> During {
    let readyz_503_after = loop {
        let status = app.get("/readyz").await.status();
        if status == 503 {
            break cut_at.elapsed();
        }
        assert!(
            cut_at.elapsed() < PARTITION,
            "/readyz still {status} {PARTITION:?} into the partition"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Past the breaker's opening and any connection's replacement.
    tokio::time::sleep_until((cut_at + Duration::from_millis(1500)).into()).await;
    answers_by_mode(mode, app).await;
    tokio::time::sleep_until((cut_at + PARTITION).into()).await;
    let readyz = app.get("/readyz").await;
    assert_eq!(
        readyz.status(),
        503,
        "still unready at the end of the partition"
    );
    let reason: Value = readyz.json().await.unwrap();
    assert!(reason["reason"]["kind"].is_string(), "a reason: {reason}");
    During { readyz_503_after }
}

/// Five checks of a fresh key of limit 3: under `open` all allowed, under
/// `closed` all denied with `failure.closed_retry_after` (1 s), under
/// `local` 3 allowed then denied by the instance's own counter. All
/// degraded, each within the bound.
async fn answers_by_mode(mode: &str, app: &Arc<TestApp>) {
    let key = unique_key(mode);
    let mut allowed = Vec::new();
    for _ in 0..5 {
        let sent = Instant::now();
        let (status, answer) = app.check(body(&key, 3)).await;
        let took = sent.elapsed();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["degraded"], true, "{mode}: {answer}");
        assert!(
            took <= REDIS_TIMEOUT + SLACK,
            "{mode}: answered after {took:?}"
        );
        if mode == "closed" {
            assert_eq!(answer["retry_after_ms"], json!(1000), "{answer}");
        }
        allowed.push(answer["allowed"] == true);
    }
    let expected = match mode {
        "open" => [true; 5],
        "closed" => [false; 5],
        _ => [true, true, true, false, false],
    };
    assert_eq!(allowed, expected, "{mode}: allowed, in order");
}

async fn wait_ready(app: &Arc<TestApp>, limit: Duration) {
    let deadline = Instant::now() + limit;
    while app.get("/readyz").await.status() != 200 {
        assert!(Instant::now() < deadline, "/readyz not 200 again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
