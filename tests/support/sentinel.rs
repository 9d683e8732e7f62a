//! A Sentinel-managed Redis: a primary, one replica and N sentinels, all
//! real processes on free loopback ports, each sentinel with its own config
//! file (Sentinel rewrites it) in a temp directory, all killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
}

impl SentinelGroup {
    /// Starts the primary, a replica in sync with it, then `sentinels`
    /// sentinels (quorum: a majority), and waits until every sentinel knows
    /// the replica and the others, so a failover can happen at once.
    pub fn start(sentinels: usize) -> SentinelGroup {
        let _ = redis_cli_binary(); // fail early and clearly if it is missing
        let primary = RedisServer::start();
        let of = format!("127.0.0.1 {}", primary.port);
        let replica = RedisServer::start_with(&["--replicaof", &of]);
        wait_until(Duration::from_secs(10), "replica in sync", || {
            replica
                .cli(&["info", "replication"])
                .contains("master_link_status:up")
        });
        let mut group = SentinelGroup {
            primary,
            replica,
            sentinels: Vec::new(),
            dir: fresh_dir("sentinel"),
        };
        let quorum = sentinels / 2 + 1;
        for _ in 0..sentinels {
            let sentinel = (0..5)
                .find_map(|_| group.spawn_sentinel(quorum))
                .expect("could not start a sentinel on a free port");
            group.sentinels.push(sentinel);
        }
        let replica = group.replica.port.to_string();
        for port in group.sentinel_ports() {
            wait_until(Duration::from_secs(15), "sentinels ready", || {
                redis_cli(port, &["sentinel", "replicas", SERVICE]).contains(&replica)
                    && redis_cli(port, &["sentinel", "ckquorum", SERVICE])
                        .contains(&format!("{sentinels} usable"))
            });
        }
        group
    }

    fn spawn_sentinel(&self, quorum: usize) -> Option<(u16, Child)> {
        spawn_sentinel(&self.dir, self.primary.port, quorum, DOWN_AFTER_MS)
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
            .find_map(|_| spawn_sentinel(&dir, primary, 1, 60_000))
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
             sentinel parallel-syncs {SERVICE} 1\n",
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
