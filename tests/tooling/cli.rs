//! The binary as an operator meets it: help, bad configuration, startup
//! logs, graceful shutdown on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use crate::support;

use support::binary::{KillOnDrop, ratekeeper};

#[test]
fn help_documents_every_serve_flag() {
    let out = ratekeeper().args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--config",
        "--listen",
        "--redis-url",
        "--failure-mode",
        "RATEKEEPER_",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let out = ratekeeper().arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("serve") && help.contains("openapi"));
}

#[test]
fn invalid_configuration_exits_64_naming_every_bad_key() {
    let dir = std::env::temp_dir().join(format!("ratekeeper-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "[redis]\ntimeout = \"soon\"\npool_size = 0\n[limits]\nmax_key_bytes = \"many\"\n",
    )
    .unwrap();
    let out = ratekeeper()
        .args([
            "serve",
            "--config",
            file.to_str().unwrap(),
            "--listen",
            "nowhere",
        ])
        .env("RATEKEEPER_FAILURE__MODE", "sometimes")
        .env("RATEKEEPER_REDIS__TIMEOUT_MS", "5")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8(out.stderr).unwrap();
    for key in [
        "redis.timeout:",
        "redis.pool_size:",
        "limits.max_key_bytes:",
        "server.listen:",
        "failure.mode:",
        "redis.timeout_ms: unknown key",
    ] {
        assert!(stderr.contains(key), "{key} missing from:\n{stderr}");
    }
    // A bad flag value is a usage error too, reported by clap.
    let out = ratekeeper()
        .args(["serve", "--failure-mode", "maybe"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn serve_logs_its_address_and_store_and_stops_gracefully_on_sigterm() {
    let child = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_LOG__FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let started = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.contains("listening"))
        .expect("a startup line");
    let log: serde_json::Value = serde_json::from_str(&started).unwrap();
    assert_eq!(log["store"], "memory");
    let addr = log["addr"].as_str().unwrap().to_string();

    // It serves...
    let response = raw_http::blocking_get(&format!("http://{addr}/healthz"));
    assert!(response, "healthz answers at the logged address");

    // ...and exits 0 on SIGTERM.
    assert!(support::send_signal(child.0.id(), support::Signal::SIGTERM));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(lines.map(|l| l.unwrap()).any(|l| l.contains("stopped")));
}

#[test]
fn redis_outage_is_logged_once_per_transition() {
    let mut redis = support::RedisServer::start();
    let child = ratekeeper()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--redis-url",
            &redis.url(),
        ])
        .env("RATEKEEPER_LOG__FORMAT", "json")
        .env("RATEKEEPER_REDIS__PROBE_INTERVAL", "50ms")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next_matching = |needle: &str| {
        rx.recv_timeout(Duration::from_secs(10))
            .into_iter()
            .chain(std::iter::from_fn(|| {
                rx.recv_timeout(Duration::from_secs(10)).ok()
            }))
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no log line containing {needle:?}"))
    };
    let started: serde_json::Value = serde_json::from_str(&next_matching("listening")).unwrap();
    assert_eq!(
        (started["store"].as_str(), started["ready"].as_bool()),
        (Some("redis"), Some(true))
    );
    let addr = started["addr"].as_str().unwrap().to_string();

    redis.kill();
    for _ in 0..20 {
        raw_http::post_check(&addr);
    }
    let down = next_matching("unreachable");
    assert!(down.contains("failing open"), "{down}");
    redis.restart();
    next_matching("redis back");
    for _ in 0..20 {
        raw_http::post_check(&addr);
    }
    assert!(support::send_signal(child.0.id(), support::Signal::SIGTERM));
    child.0.wait().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(
        !rest
            .iter()
            .any(|l| l.contains("unreachable") || l.contains("back")),
        "each transition is logged once: {rest:#?}"
    );
}

mod raw_http {
    /// A plain HTTP/1.1 GET over a socket: enough to see a 200 without
    /// starting an async runtime in this synchronous test.
    pub fn blocking_get(url: &str) -> bool {
        use std::io::{Read, Write};
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_at(rest.find('/').unwrap());
        let mut stream = std::net::TcpStream::connect(host).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response.starts_with("HTTP/1.1 200")
    }

    /// POSTs one check; the answer does not matter here.
    pub fn post_check(host: &str) {
        use std::io::{Read, Write};
        let body = r#"{"key":"k","limit":5,"window":"1s"}"#;
        let mut stream = std::net::TcpStream::connect(host).unwrap();
        write!(
            stream,
            "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }
}

/// Kubernetes injects `RATEKEEPER_SERVICE_HOST`, `RATEKEEPER_PORT` and the
/// like for a Service named `ratekeeper`: they are not configuration, and
/// the healthcheck finds the port the service listens on from the same
/// configuration as `serve`.
#[test]
fn kubernetes_service_variables_are_ignored_and_healthcheck_follows_the_config() {
    let port = support::free_port();
    let listen = format!("127.0.0.1:{port}");
    let kubernetes = [
        ("RATEKEEPER_SERVICE_HOST", "10.96.0.12"),
        ("RATEKEEPER_SERVICE_PORT", "8080"),
        ("RATEKEEPER_PORT", "tcp://10.96.0.12:8080"),
        ("RATEKEEPER_PORT_8080_TCP_ADDR", "10.96.0.12"),
        ("RATEKEEPER_PORT_8080_TCP_PROTO", "tcp"),
    ];
    let child = ratekeeper()
        .arg("serve")
        .env("RATEKEEPER_SERVER__LISTEN", &listen)
        .env("RATEKEEPER_LOG__FORMAT", "json")
        .env("RATEKEEPER_LOG__LEVEL", "debug")
        .envs(kubernetes)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let lines: Vec<String> = BufReader::new(child.0.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .take_while(|l| !l.contains("listening"))
        .collect();
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the service runs: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("RATEKEEPER_PORT_8080_TCP_ADDR")),
        "each ignored variable is logged at debug: {lines:?}"
    );

    let healthcheck = |env_listen: &str| {
        ratekeeper()
            .arg("healthcheck")
            .env("RATEKEEPER_SERVER__LISTEN", env_listen)
            .envs(kubernetes)
            .output()
            .unwrap()
    };
    let out = healthcheck(&listen);
    assert!(out.status.success(), "{out:?}");
    // The probe reads server.listen only: a secret it cannot read (mounted
    // for the service alone) does not fail it.
    let out = ratekeeper()
        .arg("healthcheck")
        .env("RATEKEEPER_SERVER__LISTEN", &listen)
        .env("RATEKEEPER_REDIS__URL", "redis://app@127.0.0.1:6379")
        .env("RATEKEEPER_REDIS__PASSWORD_FILE", "/nonexistent/secret")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // A wildcard listen address is probed over loopback.
    assert!(healthcheck(&format!("0.0.0.0:{port}")).status.success());
    let elsewhere = healthcheck(&format!("127.0.0.1:{}", support::free_port()));
    assert_eq!(elsewhere.status.code(), Some(1), "{elsewhere:?}");
}

#[test]
fn a_bad_redis_url_is_reported_without_its_password() {
    let out = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_REDIS__URL", "redis://app:s3cret-pw@db:port")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("redis.url"), "{stderr}");
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
}

/// At `RUST_LOG=trace`, a log file in the policies file's directory must
/// not feed on itself: the file watcher sees each write of the log as an
/// event in the watched directory, and logging those at trace wrote 20 MB
/// a second, without end, before they were cut at debug.
#[test]
fn a_trace_log_in_the_watched_directory_does_not_log_its_own_writes() {
    let dir = support::fresh_dir("trace-log");
    let policies = dir.join("policies.toml");
    std::fs::copy("config/policies.example.toml", &policies).unwrap();
    let log_path = dir.join("ratekeeper.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let _service = KillOnDrop(
        ratekeeper()
            .args(["serve", "--listen", "127.0.0.1:0", "--policies"])
            .arg(&policies)
            .env("RUST_LOG", "trace")
            .env("RATEKEEPER_LOG__FORMAT", "json")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    );
    let size = || std::fs::metadata(&log_path).unwrap().len();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("ratekeeper listening")
    {
        assert!(std::time::Instant::now() < deadline, "never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = size();
    std::thread::sleep(Duration::from_secs(2));
    let grown = size() - before;
    assert!(
        grown < 64 * 1024,
        "an idle service logged {grown} bytes in 2 s at trace"
    );
}

/// The runtime's worker threads (tokio names them `tokio-rt-worker`) of
/// the process `pid`.
fn runtime_workers(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "tokio-rt-worker")
        .count()
}

/// Issue 29: `server.worker_threads` sizes the runtime (the main thread
/// drives the accept loop; the workers run the requests), the service
/// answers checks on one worker, and a value out of range exits 64 naming
/// the key.
#[test]
fn server_worker_threads_sizes_the_runtime() {
    for workers in [1, 3] {
        let n = workers.to_string();
        let (child, addr) =
            support::binary::serve(&[("RATEKEEPER_SERVER__WORKER_THREADS", n.as_str())]);
        assert_eq!(runtime_workers(child.0.id()), workers);
        let body = r#"{"key":"workers","limit":5,"window":"1h"}"#;
        let (status, answer) = support::raw_http(&addr, "POST", "/v1/check", body).unwrap();
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains(r#""allowed":true"#), "{answer}");
    }
    let out = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_SERVER__WORKER_THREADS", "2000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("server.worker_threads"), "{stderr}");
}
