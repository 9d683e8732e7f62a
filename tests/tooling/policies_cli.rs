//! The policies file as an operator meets it through the binary: startup
//! refuses an invalid file (exit 64, every problem named), `ratekeeper
//! policies check` validates offline, and SIGHUP reloads.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ratekeeper::domain::policy::sha256_hex;

use crate::support;

use support::binary::{ratekeeper, serve};
use support::{Signal, fresh_dir, path_str, send_signal};

/// Two policies with four problems between them, on known lines.
const BAD: &str = r#"[policies.api]
failure_mode = "sometimes"
limits = [
  { name = "burst", algorithm = "token_bucket", limit = 0, window = "1s" },
  { name = "burst", limit = 10, window = "1y" },
]

[policies.Login]
limits = [{ name = "minute", limit = 5, window = "1m" }]
"#;

/// Every problem of [`BAD`], as `ratekeeper` prints it.
const BAD_PROBLEMS: [&str; 5] = [
    "policies.api.failure_mode (line 2, column 16)",
    "policies.api.limits[0].limit (line 4, column 57)",
    "policies.api.limits[1].name (line 5, column 12)",
    "policies.api.limits[1].window (line 5, column 42)",
    "policies.Login (line 8, column 11)",
];

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/policies.example.toml")
        .display()
        .to_string()
}

use support::binary::run;

#[test]
fn startup_with_an_invalid_file_exits_64_naming_every_problem() {
    let dir = fresh_dir("policies-cli-start");
    let path = dir.join("policies.toml");
    std::fs::write(&path, BAD).unwrap();
    let (code, _, err) = run(ratekeeper().args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policies",
        path_str(&path),
    ]));
    assert_eq!(code, 64, "{err}");
    for problem in BAD_PROBLEMS {
        assert!(err.contains(problem), "{problem} missing from: {err}");
    }
    assert!(err.contains("5 problems"), "{err}");

    // An unreadable file also stops startup, through the environment too.
    let (code, _, err) = run(ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_POLICIES__FILE", dir.join("missing.toml")));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("missing.toml"), "{err}");
}

#[test]
fn check_accepts_a_valid_file_with_a_summary() {
    let (code, out, err) = run(ratekeeper().args(["policies", "check", &example()]));
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read(example()).unwrap();
    assert!(out.contains("3 policies (api, export, login)"), "{out}");
    assert!(out.contains(&sha256_hex(&text)), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn check_rejects_an_invalid_file_with_every_problem() {
    let dir = fresh_dir("policies-cli-check");
    let path = dir.join("bad.toml");
    std::fs::write(&path, BAD).unwrap();
    let (code, out, err) = run(ratekeeper().args(["policies", "check", path_str(&path)]));
    assert_eq!(code, 64, "{out}");
    for problem in BAD_PROBLEMS {
        assert!(err.contains(problem), "{problem} missing from: {err}");
    }

    // A syntax error: its line and column.
    std::fs::write(&path, "[policies.api]\nlimits = [\n").unwrap();
    let (code, _, err) = run(ratekeeper().args(["policies", "check", path_str(&path)]));
    assert_eq!(code, 64);
    assert!(err.contains("line 2, column 11: unclosed array"), "{err}");

    // Too large to be a policies file.
    std::fs::write(&path, "#".repeat(1024 * 1024 + 1)).unwrap();
    let (code, _, err) = run(ratekeeper().args(["policies", "check", path_str(&path)]));
    assert_eq!(code, 64);
    assert!(err.contains("larger than 1048576 bytes"), "{err}");
}

#[test]
fn check_uses_the_configured_bounds() {
    let dir = fresh_dir("policies-cli-bounds");
    let config = dir.join("ratekeeper.toml");
    std::fs::write(&config, "[limits]\nmax_limits_per_check = 1\n").unwrap();
    let (code, _, err) = run(ratekeeper().args([
        "policies",
        "check",
        &example(),
        "--config",
        path_str(&config),
    ]));
    assert_eq!(code, 64);
    assert!(
        err.contains("policies.api.limits (line 18, column 10): must hold 1 to 1 limits"),
        "{err}"
    );
    assert!(err.contains("policies.login.limits"), "{err}");
}

#[tokio::test]
async fn sighup_reloads() {
    // The file is a symlink into another directory: both are watched, so
    // an edit of the target is seen without a signal; SIGHUP then reloads
    // even an unchanged file (counted), and the process keeps serving.
    let dir = fresh_dir("policies-cli-hup");
    let elsewhere = fresh_dir("policies-cli-hup-target");
    let target = elsewhere.join("real.toml");
    let v1 = "[policies.a]\nlimits = [{ name = \"x\", limit = 1, window = 1 }]\n";
    let v2 = "[policies.b]\nlimits = [{ name = \"y\", limit = 2, window = 2 }]\n";
    std::fs::write(&target, v1).unwrap();
    let path = dir.join("policies.toml");
    symlink(&target, &path).unwrap();
    let (child, addr) = serve(&[
        ("RATEKEEPER_POLICIES__FILE", path_str(&path)),
        ("RATEKEEPER_POLICIES__POLL_INTERVAL", "1h"),
    ]);
    let url = format!("http://{addr}/v1/policies");
    let sha = || async {
        let body: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        body["sha256"].as_str().unwrap().to_string()
    };
    let reloads = || async {
        let text = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| {
                l.strip_prefix("ratekeeper_reloads_total{file=\"policies\",result=\"ok\"} ")
            })
            .map_or(0.0, |v| v.parse::<f64>().unwrap())
    };
    assert_eq!(sha().await, sha256_hex(v1.as_bytes()));

    std::fs::write(&target, v2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while sha().await != sha256_hex(v2.as_bytes()) {
        assert!(
            Instant::now() < deadline,
            "the target's edit was not seen within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = reloads().await;
    assert!(send_signal(child.0.id(), Signal::SIGHUP));
    let deadline = Instant::now() + Duration::from_secs(2);
    while reloads().await < before + 1.0 {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Still serving after the signal, the same file.
    assert_eq!(sha().await, sha256_hex(v2.as_bytes()));
}

#[tokio::test]
async fn sighup_without_a_policies_file_keeps_serving() {
    let (mut child, addr) = serve(&[]);
    assert!(send_signal(child.0.id(), Signal::SIGHUP));
    // Its default action would end the process at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(child.0.try_wait().unwrap().is_none(), "SIGHUP ended it");
    let health = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[test]
fn a_fifo_as_the_policies_file_is_refused_not_waited_on() {
    let dir = fresh_dir("policies-cli-fifo");
    let path = dir.join("policies.toml");
    let made = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success());
    // Opening a FIFO for reading blocks until a writer comes: `run` would
    // fail its 10 s bound.
    let (code, _, err) = run(ratekeeper().args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policies",
        path_str(&path),
    ]));
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("is a FIFO; it must be a regular file"),
        "{err}"
    );
    let (code, _, err) = run(ratekeeper().args(["policies", "check", path_str(&path)]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("FIFO"), "{err}");
    // A directory, likewise.
    let (code, _, err) = run(ratekeeper().args(["policies", "check", path_str(&dir)]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn a_huge_invalid_file_lists_at_most_100_problems() {
    // Close to the 1 MiB cap: 20 000 limits, all named alike, all invalid,
    // which is 40 000 problems (the count, each limit, every name but the first).
    let mut text = String::from("[policies.p]\nlimits = [\n");
    for _ in 0..20_000 {
        text.push_str("  { name = \"same\", limit = 0, window = \"1s\" },\n");
    }
    text.push_str("]\n");
    assert!(text.len() > 900_000 && text.len() < 1024 * 1024);
    let dir = fresh_dir("policies-cli-huge");
    let path = dir.join("policies.toml");
    std::fs::write(&path, &text).unwrap();
    let (code, _, err) = run(ratekeeper().args(["policies", "check", path_str(&path)]));
    assert_eq!(code, 64);
    assert!(
        err.contains("40000 problems:"),
        "{}",
        &err[..err.len().min(2000)]
    );
    let listed = err
        .lines()
        .filter(|l| l.contains("policies.p.limits"))
        .count();
    assert_eq!(listed, 100, "{}", &err[..err.len().min(2000)]);
    assert!(
        err.contains("... and 39900 more problems"),
        "{}",
        &err[err.len().saturating_sub(500)..]
    );
    // In file order, located: the count (line 2) first, then limits[0].
    assert!(
        err.contains("policies.p.limits (line 2, column 10)"),
        "{}",
        &err[..2000]
    );
    assert!(
        err.contains("policies.p.limits[0].limit (line 3, column 28)"),
        "{}",
        &err[..2000]
    );
}
