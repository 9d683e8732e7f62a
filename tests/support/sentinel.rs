//! A Sentinel-managed Redis: a primary, one replica and N sentinels, all
//! real processes on free loopback ports, each sentinel with its own config
//! file (Sentinel rewrites it) in a temp directory, all killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::tls::Certs;
use super::{RedisServer, free_port, fresh_dir, path_str, redis_cli, redis_server_binary};
use super::{answering, redis_cli_binary, wait_until};

/// The monitored service's name, as it appears in the URL.
pub const SERVICE: &str = "mymaster";
/// How long a silent primary takes to be judged down. Low so the failover
/// test is quick; promotion follows within about a second.
pub const DOWN_AFTER_MS: u64 = 500;
/// Also the pause before a failed failover is retried (twice this).
const FAILOVER_TIMEOUT_MS: u64 = 2000;

pub struct SentinelGroup {
    pub primary: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    dir: PathBuf,
    /// With TLS: each sentinel's TLS port (its plaintext one stays for the
    /// test), and the data nodes' TLS ports (primary, replica).
    tls_sentinels: Vec<u16>,
    pub tls_nodes: Option<(u16, u16)>,
    tls: Option<Certs>,
}

impl SentinelGroup {
    /// Starts the primary, a replica in sync with it, then `sentinels`
    /// sentinels (quorum: a majority), and waits until every sentinel knows
    /// the replica and the others, so a failover can happen at once.
    pub fn start(sentinels: usize) -> SentinelGroup {
        Self::start_all(sentinels, None)
    }

    /// The same with every link over TLS (`certs`' server certificate):
    /// clients to the sentinels and to the data nodes, the replica to the
    /// primary and the sentinels to both (`tls-replication yes`).
    pub fn start_tls(sentinels: usize, certs: &Certs) -> SentinelGroup {
        Self::start_all(sentinels, Some(certs.clone()))
    }

    fn start_all(sentinels: usize, tls: Option<Certs>) -> SentinelGroup {
        let _ = redis_cli_binary(); // fail early and clearly if it is missing
        let node_args = |port: u16| -> Vec<String> {
            let Some(certs) = &tls else { return Vec::new() };
            let mut args = certs.server_args("server", port, false);
            args.extend(["--tls-replication".into(), "yes".into()]);
            args
        };
        let (primary_tls, replica_tls) = (free_port(), free_port());
        let args = node_args(primary_tls);
        let primary = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let primary_at = if tls.is_some() {
            primary_tls
        } else {
            primary.port
        };
        let of = format!("127.0.0.1 {primary_at}");
        let mut args = node_args(replica_tls);
        args.extend(["--replicaof".into(), of]);
        let replica = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
        wait_until(Duration::from_secs(10), "replica in sync", || {
            replica
                .cli(&["info", "replication"])
                .contains("master_link_status:up")
        });
        let tls_nodes = tls.is_some().then_some((primary_tls, replica_tls));
        let mut group = SentinelGroup {
            primary,
            replica,
            sentinels: Vec::new(),
            dir: fresh_dir("sentinel"),
            tls_sentinels: Vec::new(),
            tls_nodes,
            tls,
        };
        let quorum = sentinels / 2 + 1;
        for _ in 0..sentinels {
            let tls_port = free_port();
            let conf = group
                .tls
                .as_ref()
                .map_or(String::new(), |certs| tls_conf(certs, tls_port));
            let sentinel = (0..5)
                .find_map(|_| spawn_sentinel(&group.dir, primary_at, quorum, DOWN_AFTER_MS, &conf))
                .expect("could not start a sentinel on a free port");
            group.sentinels.push(sentinel);
            group
                .tls_sentinels
                .extend(group.tls.is_some().then_some(tls_port));
        }
        let replica = tls_nodes.map_or(group.replica.port, |(_, r)| r).to_string();
        for port in group.sentinel_ports() {
            wait_until(Duration::from_secs(15), "sentinels ready", || {
                redis_cli(port, &["sentinel", "replicas", SERVICE]).contains(&replica)
                    && redis_cli(port, &["sentinel", "ckquorum", SERVICE])
                        .contains(&format!("{sentinels} usable"))
            });
        }
        group
    }

    /// `rediss-sentinel://` naming every sentinel's TLS port.
    pub fn tls_url(&self) -> String {
        let ports = &self.tls_sentinels;
        let others: String = ports[1..]
            .iter()
            .map(|p| format!("&node=127.0.0.1:{p}"))
            .collect();
        format!(
            "rediss-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE}{others}",
            ports[0]
        )
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(port, _)| *port).collect()
    }

    /// `redis-sentinel://` URL naming every sentinel, as an operator writes it.
    pub fn url(&self) -> String {
        let ports = self.sentinel_ports();
        let others: String = ports[1..]
            .iter()
            .map(|p| format!("&node=127.0.0.1:{p}"))
            .collect();
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE}{others}",
            ports[0]
        )
    }
}

/// One sentinel watching the primary at `127.0.0.1:primary` with no
/// replica to promote, so it never fails over: for tests where what
/// Sentinel names must stay put (a proxy in front of the primary).
pub struct LoneSentinel {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl LoneSentinel {
    pub fn start(primary: u16) -> LoneSentinel {
        let _ = redis_cli_binary();
        let dir = fresh_dir("sentinel");
        // Long: the sentinel's own link through a cut proxy must not make
        // it judge the primary down while the test runs.
        let (port, child) = (0..5)
            .find_map(|_| spawn_sentinel(&dir, primary, 1, 60_000, ""))
            .expect("could not start a sentinel on a free port");
        let sentinel = LoneSentinel { port, child, dir };
        wait_until(
            Duration::from_secs(10),
            "sentinel knows the primary",
            || sentinel_primary(port) == Some(primary),
        );
        sentinel
    }

    pub fn url(&self) -> String {
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE}",
            self.port
        )
    }
}

impl Drop for LoneSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A sentinel on a free port with its config in a directory of its own
/// under `dir`, watching `127.0.0.1:primary`; `None` if it did not start.
fn spawn_sentinel(
    dir: &std::path::Path,
    primary: u16,
    quorum: usize,
    down_after_ms: u64,
    extra_conf: &str,
) -> Option<(u16, Child)> {
    let port = free_port();
    let dir = dir.join(port.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {SERVICE} 127.0.0.1 {primary} {quorum}\n\
             sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n\
             sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {SERVICE} 1\n{extra_conf}",
            dir = path_str(&dir),
        ),
    )
    .unwrap();
    // `redis-server FILE --sentinel` needs no package beyond redis-server.
    let child = Command::new(redis_server_binary())
        .arg(&conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("failed to run redis-server --sentinel");
    answering(child, port)
}

/// A sentinel's TLS lines: its TLS port, and TLS to the data nodes and
/// the other sentinels.
fn tls_conf(certs: &Certs, port: u16) -> String {
    let path = |p: PathBuf| path_str(&p).to_string();
    format!(
        "tls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
         tls-replication yes\ntls-auth-clients no\n",
        path(certs.crt("server")),
        path(certs.key("server")),
        path(certs.crt("ca")),
    )
}

/// The primary's port according to the sentinel on `port`.
pub fn sentinel_primary(port: u16) -> Option<u16> {
    let reply = redis_cli(port, &["sentinel", "get-master-addr-by-name", SERVICE]);
    reply.lines().nth(1).and_then(|p| p.trim().parse().ok())
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
