//! The ratekeeper executable as a child process, for tests that need the
//! real binary: exit codes, signals, a server on its own port.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A spawned service that a failing test must not leave running.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary, with none of the operator's configuration inherited.
pub fn ratekeeper() -> Command {
    without_config(Command::new(env!("CARGO_BIN_EXE_ratekeeper")))
}

/// `command` with the operator's `RATEKEEPER_*` and `RUST_LOG` removed.
fn without_config(mut command: Command) -> Command {
    for (name, _) in std::env::vars() {
        if name.starts_with("RATEKEEPER_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    command
}

/// `ratekeeper serve` on a free loopback port with `env` added; returns it
/// and its address once it has logged that it listens. Its log keeps being
/// drained, so it never blocks on a full pipe.
pub fn serve(env: &[(&str, &str)]) -> (KillOnDrop, String) {
    let served = start(ratekeeper(), env);
    (served.child, served.http)
}

/// A `ratekeeper serve` child whose log lines are kept for the test, and
/// the addresses it logged.
pub struct Served {
    pub child: KillOnDrop,
    /// `host:port` of the HTTP API.
    pub http: String,
    /// `host:port` of the gRPC listener, when `grpc.listen` is set.
    pub grpc: Option<String>,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Served {
    /// Every log line so far (JSON), the startup lines included.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// `ratekeeper serve` on free loopback ports with `env` added, its log
/// lines kept; returns once it has logged that it listens.
pub fn serve_logged(env: &[(&str, &str)]) -> Served {
    start(ratekeeper(), env)
}

/// `ratekeeper serve` on free loopback ports under an open-files limit of
/// `nofile` (soft and hard, so the service cannot raise it), with `env`
/// added; returns once it has logged that it listens.
pub fn serve_with_nofile(nofile: u32, env: &[(&str, &str)]) -> Served {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_ratekeeper"));
    start(without_config(command), env)
}

/// Runs `command serve` with `env` and JSON logs until it logs that it
/// listens; its later lines keep being read (and kept), so it never blocks
/// on a full pipe.
fn start(mut command: Command, env: &[(&str, &str)]) -> Served {
    let child = command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_LOG__FORMAT", "json")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut grpc = None;
    // Not the gRPC listener's line, which comes first when grpc.listen is set.
    let http = loop {
        let line = lines.next().expect("a startup line").unwrap();
        log.lock().unwrap().push(line.clone());
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        if let Some(addr) = json["grpc_addr"].as_str() {
            grpc = Some(addr.to_string());
        }
        if line.contains("ratekeeper listening") {
            break json["addr"].as_str().unwrap().to_string();
        }
    };
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            kept.lock().unwrap().push(line);
        }
    });
    Served {
        child,
        http,
        grpc,
        log,
    }
}

/// Runs `command` to completion within 10 s; returns (exit code, stdout, stderr).
pub fn run(command: &mut Command) -> (i32, String, String) {
    let mut child = KillOnDrop(
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "did not exit within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), out, err)
}
