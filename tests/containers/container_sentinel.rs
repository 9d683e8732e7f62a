//! Issue 15, part 3: Sentinel failover between hosts. A primary, a replica
//! and three sentinels, each in its own container on one network, and
//! ratekeeper in another, configured only through its environment (the
//! `redis-sentinel://` URL naming the sentinels by container name). Under
//! load, the primary's container is killed (`docker kill`: its host is gone,
//! so its address answers nothing, not even a reset):
//! - no answer is slower than `redis.timeout` + 50 ms;
//! - within 5 s of the kill, 30 parallel callers on a fresh key of limit 10
//!   get exactly 10, none degraded, and the load's answers are no longer
//!   degraded.
//!
//! Defaults throughout, `redis.reconnect_max_delay` included. Prints one
//! `FAULTS sentinel ...` line.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::containers::{
    REDIS_IMAGE, assert_bounded, assert_exact_again, body, cli, exact_again, ratekeeper, redis,
    redis_at, wait, wait_answering,
};
use support::docker::{Container, Network};
use support::{Load, Outage, ms, unique_key, wait_for};

/// The bound from the kill to exact answers.
const EXACT_AGAIN_WITHIN: Duration = Duration::from_secs(5);
const SERVICE: &str = "mymaster";
const SENTINEL_PORT: u16 = 26379;
/// A silent primary is judged down after this; low so a failover fits
/// the 5 s, as an operator wanting quick failovers sets it.
const DOWN_AFTER_MS: u64 = 1000;
/// Also the pause before a failed failover is retried (twice this).
const FAILOVER_TIMEOUT_MS: u64 = 2000;
const LOAD_LIMIT: u64 = 1_000_000;

/// A primary, its replica in sync, and three sentinels that know both and
/// each other.
struct Group {
    primary: Container,
    primary_ip: String,
    replica_ip: String,
    sentinels: Vec<Container>,
    // Dropped last, after the containers on it.
    _replica: Container,
}

impl Group {
    fn start(network: &Network) -> Group {
        let primary = redis("primary", network, &[]);
        let primary_ip = primary.ip(network);
        let replica = redis("replica", network, &["--replicaof", &primary_ip, "6379"]);
        let replica_ip = replica.ip(network);
        wait(Duration::from_secs(20), "replica in sync", || {
            cli(&replica, 6379, &["info", "replication"]).contains("master_link_status:up")
        });
        let sentinels: Vec<Container> = (0..3).map(|_| sentinel(network, &primary_ip)).collect();
        for sentinel in &sentinels {
            wait(
                Duration::from_secs(20),
                "sentinels know the replica and each other",
                || {
                    cli(sentinel, SENTINEL_PORT, &["sentinel", "replicas", SERVICE])
                        .contains(&replica_ip)
                        && cli(sentinel, SENTINEL_PORT, &["sentinel", "ckquorum", SERVICE])
                            .contains("3 usable")
                },
            );
        }
        Group {
            primary,
            primary_ip,
            replica_ip,
            sentinels,
            _replica: replica,
        }
    }

    /// `redis-sentinel://` naming every sentinel by container name.
    fn url(&self) -> String {
        let others: String = self.sentinels[1..]
            .iter()
            .map(|s| format!("&node={}:{SENTINEL_PORT}", s.name))
            .collect();
        format!(
            "redis-sentinel://{}:{SENTINEL_PORT}/0?sentinelServiceName={SERVICE}{others}",
            self.sentinels[0].name
        )
    }
}

/// A sentinel watching `primary_ip` with a quorum of 2. Sentinel rewrites
/// its config file, so it is written inside the container.
fn sentinel(network: &Network, primary_ip: &str) -> Container {
    let conf = format!(
        "port {SENTINEL_PORT}\\nprotected-mode no\\n\
         sentinel monitor {SERVICE} {primary_ip} 6379 2\\n\
         sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\\n\
         sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\\n\
         sentinel parallel-syncs {SERVICE} 1\\n"
    );
    let script =
        format!("printf '{conf}' > /data/s.conf && exec redis-server /data/s.conf --sentinel");
    let container = Container::run(
        "sentinel",
        &["--network", &network.name, REDIS_IMAGE, "sh", "-c", &script],
    );
    wait_answering(&container, SENTINEL_PORT);
    container
}

/// The primary's address according to every sentinel (at `ips`), if
/// they agree; asked from the host, so it can be polled under load.
fn primary_by_sentinels(ips: &[String]) -> Option<String> {
    let answers: Vec<Option<String>> = ips
        .iter()
        .map(|ip| {
            let reply = redis_at(
                ip,
                SENTINEL_PORT,
                &["sentinel", "get-master-addr-by-name", SERVICE],
            );
            reply.first().cloned()
        })
        .collect();
    let first = answers.first()?.clone()?;
    answers
        .iter()
        .all(|a| a.as_deref() == Some(&first))
        .then_some(first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failover_between_containers() {
    let _turn = support::docker::one_test_at_a_time();
    let network = Network::create();
    // Blocking, before anything else runs on the runtime.
    let group = Group::start(&network);
    let env = [format!("RATEKEEPER_REDIS__URL={}", group.url())];
    let (rk, app) = ratekeeper(&network, &env).await;
    exact_again(&app, Instant::now(), Duration::ZERO)
        .await
        .expect("exact before the kill");

    let bodies: Vec<Value> = (0..8)
        .map(|_| body(&unique_key("sent"), LOAD_LIMIT))
        .collect();
    let load = Load::start(app.clone(), bodies, 8, Duration::from_millis(5), 20_000);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    let victim = group.primary.name.clone();
    tokio::task::spawn_blocking(move || support::docker::docker_ok(&["kill", &victim]))
        .await
        .unwrap();

    let ips: Vec<String> = group.sentinels.iter().map(|s| s.ip(&network)).collect();
    let replica_ip = group.replica_ip.clone();
    let promoted = wait_for(Duration::from_secs(20), move || {
        primary_by_sentinels(&ips).as_deref() == Some(replica_ip.as_str())
    });
    let exact = exact_again(&app, killed, EXACT_AGAIN_WITHIN + Duration::from_secs(5));
    let (promoted, exact) = tokio::join!(promoted, exact);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = load.finish().await;
    let outage = Outage::measure(&samples, killed, |_| true);
    let slowest = samples.iter().map(|s| s.latency()).max().unwrap();
    println!(
        "FAULTS sentinel promoted_ms={} exact_ms={} recovered_ms={} last_degraded_ms={} max_latency_ms={} checks={} degraded={}",
        ms(promoted.map(|p| p - killed)),
        ms(exact.as_ref().ok().copied()),
        ms(outage.recovered_after),
        ms(outage.last_degraded_after),
        slowest.as_millis(),
        outage.checks,
        outage.degraded,
    );
    assert!(
        promoted.is_some(),
        "the sentinels did not promote {} within 20 s",
        group.replica_ip
    );
    assert_ne!(group.primary_ip, group.replica_ip);
    assert!(outage.degraded > 0, "the kill was felt: {outage:?}");
    assert_bounded(&samples, killed);
    assert_exact_again(exact, &outage, EXACT_AGAIN_WITHIN, "the kill", &rk);
}
