//! Against a real Sentinel deployment (a primary, a replica, 3 sentinels):
//! ratekeeper follows a failover by itself. The primary is SIGKILLed under
//! load; every check is answered within the Redis timeout (plus slack for a
//! loaded test machine) throughout, and once the sentinels have promoted
//! the replica, checks reach it with no restart of ratekeeper, with the
//! scripts reloaded there (the script cache is not replicated).
//!
//! Prints one `FAILOVER sentinel ...` line with the measured times, which
//! `bench/failover.sh` collects.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    Load, Outage, SentinelGroup, TestApp, assert_answered_throughout, cached_scripts,
    failover_reconnect_max_delay, ms, sentinel_primary, settings, unique_key, wait_for,
};

/// A limit never reached, so every answer carries the count in `remaining`.
const LIMIT: u64 = 1_000_000;
/// Allowed on top of the Redis timeout for an answer: the test machine is
/// shared with compilers, and a debug build is slow.
const SLACK: Duration = Duration::from_millis(900);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failover_under_load() {
    let mut group = SentinelGroup::start(3);
    let mut config = settings(Some(&group.url()));
    let redis = config.redis.as_mut().unwrap();
    redis.reconnect_max_delay = failover_reconnect_max_delay();
    let reconnect = redis.reconnect_max_delay;
    let timeout = redis.timeout;
    let app = Arc::new(TestApp::spawn(config).await);

    let key = unique_key("sentinel");
    let body = json!({"key": key, "limit": LIMIT, "window": "1h", "algorithm": "fixed_window"});
    let (status, answer) = app.check(body.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["degraded"], false,
        "healthy before the kill: {answer}"
    );
    // SCRIPT LOAD and EVAL are not replicated: the replica has no scripts,
    // so after the promotion ratekeeper must load them again.
    assert_eq!(cached_scripts(group.replica.port), 0);

    let load = Load::start(
        app.clone(),
        vec![body.clone()],
        8,
        Duration::from_millis(2),
        20_000,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    group.primary.kill();

    let new_primary = group.replica.port;
    let ports = group.sentinel_ports();
    let promoted = wait_for(Duration::from_secs(20), move || {
        ports
            .iter()
            .all(|&p| sentinel_primary(p) == Some(new_primary))
    })
    .await
    .expect("the sentinels promoted the replica within 20 s")
        - killed;
    let recovered = wait_for(Duration::from_secs(20), {
        let samples = load.samples_handle();
        move || {
            Outage::measure(&samples(), killed, |_| true)
                .recovered_after
                .is_some()
        }
    })
    .await;
    // Keep the load on a little longer, to see that it stays recovered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = load.finish().await;
    let outage = Outage::measure(&samples, killed, |_| true);
    let max_latency = samples.iter().map(|s| s.latency()).max().unwrap();
    println!(
        "FAILOVER sentinel reconnect_max_delay_ms={} recovered_ms={} last_degraded_ms={} promoted_ms={} max_latency_ms={} checks={} degraded={}",
        reconnect.as_millis(),
        ms(outage.recovered_after),
        ms(outage.last_degraded_after),
        promoted.as_millis(),
        max_latency.as_millis(),
        outage.checks,
        outage.degraded
    );
    assert!(
        recovered.is_some(),
        "no check reached the new primary within 20 s of the kill: {outage:?}"
    );
    assert_answered_throughout(&samples, timeout, SLACK);

    // The key's state lives on the new primary, and its scripts are there.
    let (status, answer) = app.check(body).await;
    assert_eq!(
        (status, &answer["degraded"]),
        (200, &json!(false)),
        "{answer}"
    );
    let count = LIMIT - answer["remaining"].as_u64().unwrap();
    let stored = group
        .replica
        .cli(&["--scan", "--pattern", &format!("*{{{key}}}*")]);
    let field = group.replica.cli(&["hget", stored.trim(), "c"]);
    assert_eq!(
        field,
        count.to_string(),
        "the count of {stored} on the new primary"
    );
    // The function library came with replication (a script would have
    // been loaded again on NOSCRIPT).
    assert!(
        cached_scripts(group.replica.port) > 0
            || group
                .replica
                .cli(&["FUNCTION", "LIST"])
                .contains("ratekeeper_"),
        "scripts reloaded on the new primary"
    );
}
