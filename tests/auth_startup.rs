//! What the real binary says, or refuses, at startup about how exposed it
//! is: the unauthenticated gRPC listener, a tokens file others may write
//! (or that sits in a directory anyone may replace it in), and the
//! shipped example's placeholders.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

mod support;

use support::binary::{KillOnDrop, ratekeeper};
use support::fresh_dir;

/// The log of `ratekeeper serve` (JSON lines) up to and including the
/// line saying it listens; the service is then stopped.
fn startup_log(env: &[(&str, &str)]) -> String {
    let child = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_LOG__FORMAT", "json")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut log = String::new();
    for line in BufReader::new(child.0.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.contains("ratekeeper listening") {
            return log;
        }
    }
    panic!("no startup line: {log}");
}

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

const GRPC_WARNING: &str = "gRPC service on";

#[test]
fn a_grpc_listener_beyond_loopback_is_warned_about_tokens_or_not() {
    let dir = fresh_dir("auth-grpc");
    let file = dir.join("tokens");
    std::fs::write(&file, "check grpc-test-token-0123456789\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let tokens = file.to_str().unwrap();
    for (grpc, with_tokens, warned) in [
        ("127.0.0.1:0", false, 0),
        ("127.0.0.1:0", true, 0),
        ("0.0.0.0:0", false, 1),
        ("0.0.0.0:0", true, 1),
    ] {
        let mut env = vec![("RATEKEEPER_GRPC__LISTEN", grpc)];
        if with_tokens {
            env.push(("RATEKEEPER_AUTH__TOKENS_FILE", tokens));
        }
        let log = startup_log(&env);
        let what = format!("grpc.listen {grpc}, tokens {with_tokens}");
        assert_eq!(count(&log, GRPC_WARNING), warned, "{what}:\n{log}");
        if warned == 1 {
            assert!(log.contains("unauthenticated"), "{log}");
            assert!(log.contains(r#""level":"WARN""#), "{log}");
        }
    }
    // Without grpc.listen, nothing about gRPC.
    assert_eq!(count(&startup_log(&[]), GRPC_WARNING), 0);
}
