//! What the real binary says, or refuses, at startup about how exposed it
//! is: a gRPC listener without tokens, a tokens file others may write
//! (or that sits in a directory anyone may replace it in), and the
//! shipped example's placeholders.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use crate::support;

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

/// The HTTP listener's rule: beyond loopback, a warning unless tokens
/// guard the listener (with them, every gRPC call needs one).
#[test]
fn a_grpc_listener_beyond_loopback_is_warned_about_without_tokens() {
    let dir = fresh_dir("auth-grpc");
    let file = dir.join("tokens");
    std::fs::write(&file, "check grpc-test-token-0123456789\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let tokens = file.to_str().unwrap();
    for (grpc, with_tokens, warned) in [
        ("127.0.0.1:0", false, 0),
        ("127.0.0.1:0", true, 0),
        ("0.0.0.0:0", false, 1),
        ("0.0.0.0:0", true, 0),
    ] {
        let mut env = vec![("RATEKEEPER_GRPC__LISTEN", grpc)];
        if with_tokens {
            env.push(("RATEKEEPER_AUTH__TOKENS_FILE", tokens));
        }
        let log = startup_log(&env);
        let what = format!("grpc.listen {grpc}, tokens {with_tokens}");
        assert_eq!(count(&log, GRPC_WARNING), warned, "{what}:\n{log}");
        let auth = format!(r#""bearer_auth":{with_tokens}"#);
        assert_eq!(count(&log, &auth), 1, "{what}:\n{log}");
        if warned == 1 {
            assert!(
                log.contains("unauthenticated (no auth.tokens_file)"),
                "{log}"
            );
            assert!(log.contains(r#""level":"WARN""#), "{log}");
        }
    }
    // Without grpc.listen, nothing about gRPC.
    assert_eq!(count(&startup_log(&[]), GRPC_WARNING), 0);
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The warnings logged when loading `file` with `file_mode` in `dir` with
/// `dir_mode`: (readable, writable, open directory) line counts.
fn permission_warnings(file: &Path, file_mode: u32, dir: &Path, dir_mode: u32) -> [usize; 3] {
    chmod(file, file_mode);
    chmod(dir, dir_mode);
    let log = startup_log(&[("RATEKEEPER_AUTH__TOKENS_FILE", file.to_str().unwrap())]);
    chmod(dir, 0o700);
    assert!(log.contains("loaded 1 bearer tokens"), "{log}");
    [
        count(&log, "readable by every user"),
        count(&log, "writable by its group or by every user"),
        count(&log, "writable by every user and not sticky"),
    ]
}

/// A tokens file that others may write, or that sits in a directory
/// anyone may rename a file in, is warned about (and still loaded, as a
/// file others may read always was).
#[test]
fn a_tokens_file_others_may_write_or_replace_is_warned_about() {
    let root = fresh_dir("auth-perms");
    let dir = root.join("secrets");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(&file, "check perms-test-token-0123456789\n").unwrap();
    for (file_mode, dir_mode, want) in [
        (0o600, 0o700, [0, 0, 0]),
        (0o400, 0o755, [0, 0, 0]),
        (0o644, 0o700, [1, 0, 0]),
        (0o620, 0o700, [0, 1, 0]),
        (0o602, 0o700, [0, 1, 0]),
        (0o666, 0o700, [1, 1, 0]),
        (0o600, 0o777, [0, 0, 1]),
        (0o600, 0o1777, [0, 0, 0]),
        (0o600, 0o775, [0, 0, 0]),
    ] {
        assert_eq!(
            permission_warnings(&file, file_mode, &dir, dir_mode),
            want,
            "file {file_mode:o}, directory {dir_mode:o}"
        );
    }
    // Through a symlink (a Kubernetes Secret's layout): the real file's
    // directory counts too.
    let link_dir = root.join("mounted");
    std::fs::create_dir(&link_dir).unwrap();
    let link = link_dir.join("tokens");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    chmod(&link_dir, 0o755);
    assert_eq!(permission_warnings(&link, 0o600, &dir, 0o777), [0, 0, 1]);
    assert_eq!(permission_warnings(&link, 0o600, &dir, 0o755), [0, 0, 0]);
}
