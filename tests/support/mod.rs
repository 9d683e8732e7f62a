//! Test harness: real `redis-server` processes on free loopback ports, and
//! the service itself on port 0. Nothing is mocked and nothing is shared:
//! each test starts its own servers and they die with it. Which server
//! (Redis 7.0, Valkey 8.1 or Redis 8.2) is `RATEKEEPER_TEST_SERVER`'s
//! choice: see [`server`].
#![allow(dead_code, unused_imports)] // each test binary uses a different part of this module

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod app;
pub mod binary;
pub mod blackhole;
mod cluster;
pub mod compose;
pub mod containers;
pub mod docker;
pub mod invalidation;
pub mod limiter_ext;
mod load;
mod net;
pub mod ops;
pub mod otlp;
mod sentinel;
pub mod server;
pub mod store_ext;
pub mod stores;
pub mod tls;
pub mod venv;

pub use app::{TestApp, settings};
pub use limiter_ext::LimiterExt;
pub use store_ext::StoreExt;

/// One test per store for each scenario, as limitador's
/// `test_with_all_storage_impls!`: a failure names its store (`memory` or
/// `redis` after the scenario's name), and one store failing does not hide
/// the other.
///
/// - `for_each_store!(a, b)`: each `async fn a(store: Arc<dyn Store>,
///   clock: ManualClock)` gets a fresh embedded store, then a fresh
///   redis-server's store, each deciding on its own manual clock (at 0:
///   the scenario sets it).
/// - `for_each_store!(app: a, b)`: each `async fn a(app: &TestApp)` gets
///   the service on a fresh embedded store, then on a fresh redis-server.
#[macro_export]
macro_rules! for_each_store {
    (app: $($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                let app = $crate::support::TestApp::spawn($crate::support::settings(None)).await;
                super::$name(&app).await;
            }

            #[tokio::test]
            async fn redis() {
                let server = $crate::support::RedisServer::start();
                let settings = $crate::support::settings(Some(&server.url()));
                let app = $crate::support::TestApp::spawn(settings).await;
                super::$name(&app).await;
            }
        }
    )*};
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                let clock = ratekeeper::domain::ManualClock::new(0);
                super::$name($crate::support::stores::memory(&clock), clock).await;
            }

            #[tokio::test]
            async fn redis() {
                let server = $crate::support::RedisServer::start();
                let clock = ratekeeper::domain::ManualClock::new(0);
                let store = $crate::support::stores::redis(&server, &clock).await;
                super::$name(store, clock).await;
            }
        }
    )*};
}
pub use cluster::{NodeInfo, RedisCluster, parse_nodes};
pub use load::{
    Load, Outage, Sample, assert_answered_throughout, cached_scripts, failover_reconnect_max_delay,
    ms, wait_for,
};
pub use net::{early_in_a_minute, fresh_loopback, raw_http};
pub use nix::sys::signal::Signal;
pub use sentinel::{LoneSentinel, SentinelGroup, sentinel_primary};
pub use server::{redis_cli_binary, redis_server_binary, test_server};

/// A `redis-server` child process on its own port and directory.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// Extra `redis-server` arguments (`--replicaof ...`), kept for restarts.
    extra: Vec<String>,
}

/// Runs `redis-cli -p PORT ARGS...` and returns its trimmed stdout ("" when
/// the server is unreachable: callers poll).
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = Command::new(redis_cli_binary())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Polls `done` every 50 ms until it holds; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Numbers the temp directories of one test process.
pub static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// A server started with extra arguments, e.g. `["--replicaof",
    /// "127.0.0.1 6379"]`.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "ratekeeper-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // Another process may grab the port between free_port() and the bind;
        // retry on a fresh port rather than fail the test.
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer {
                child: None,
                port,
                dir: dir.clone(),
                extra: extra.iter().map(|a| a.to_string()).collect(),
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port");
    }

    fn spawn(&mut self) -> bool {
        let child = Command::new(redis_server_binary())
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--dir", path_str(&self.dir)])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("failed to run redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.ping() {
                test_server().verify(self.port);
                return true;
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether the server answers PING right now.
    pub fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args)
    }

    /// SIGKILL: the server is gone, connections are reset.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            send_signal(child.id(), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the server keeps its connections but answers nothing.
    pub fn freeze(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Starts a fresh server (empty data, empty script cache) on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "could not restart redis-server on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn signal(&self, signal: Signal) {
        let pid = self.child.as_ref().expect("server is running").id();
        assert!(send_signal(pid, signal), "{signal} to {pid} failed");
    }
}

/// Sends `signal` to `pid`; false if it is gone.
pub fn send_signal(pid: u32, signal: Signal) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).is_ok()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp dir path is UTF-8")
}

/// `(port, child)` once the server `child` started answers PING on
/// `port`; otherwise it is killed and `None` (the caller tries another
/// port).
pub fn answering(mut child: Child, port: u16) -> Option<(u16, Child)> {
    if wait_for_ping(&mut child, port) {
        test_server().verify(port);
        Some((port, child))
    } else {
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

/// A fresh key name per call, so tests sharing a server never collide.
pub fn unique_key(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh, empty temp directory named after `kind`, this process and a counter.
pub fn fresh_dir(kind: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ratekeeper-{kind}-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits up to 5 s for a just-spawned server on `port` to answer PING.
/// False if it exited first (most likely its port was taken meanwhile).
pub fn wait_for_ping(child: &mut Child, port: u16) -> bool {
    let probe = RedisServer {
        child: None,
        port,
        dir: PathBuf::new(),
        extra: Vec::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let up = loop {
        if probe.ping() {
            break true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::mem::forget(probe); // owns no process or directory
    up
}

/// A validated check for the store tests: `limit` per `window` ("1s", ...).
pub fn check(
    key: &str,
    algorithm: ratekeeper::domain::Algorithm,
    limit: u64,
    window: &str,
    cost: u64,
) -> ratekeeper::domain::Check {
    use ratekeeper::domain::{Check, CheckInput, RuleInput, WindowInput};
    Check::new(
        CheckInput {
            key: key.into(),
            rule: RuleInput {
                limit,
                window: Some(WindowInput::Text(window.into())),
                algorithm: Some(algorithm),
                burst: None,
                ..Default::default()
            },
            cost: Some(cost),
        },
        &Default::default(),
    )
    .unwrap()
}

/// FCALL, EVALSHA and EVAL calls Redis has served (commandstats also counts
/// the commands scripts run inside, so only the entry points are summed).
pub async fn script_calls(redis: &RedisServer) -> u64 {
    use fred::prelude::*;
    let client = Builder::from_config(Config::from_url(&redis.url()).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    let info: String = client
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .filter(|l| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
