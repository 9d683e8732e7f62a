//! The operator's client subcommands against a live instance (the real
//! binary on both ends): `ratekeeper top` prints who is being limited, as
//! a table that refreshes or as JSON, and carries a token from a file.

use crate::support;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::binary::{KillOnDrop, ratekeeper, run, serve};
use support::fresh_dir;

/// `n` inline checks of `key` at `base` (limit 3 a day, so some deny; a
/// day, as the denials are counted exactly and a window's end is
/// epoch-aligned: a minute's fell among the checks now and then).
fn spend(base: &str, key: &str, n: usize) {
    let body = format!(r#"{{"key": "{key}", "limit": 3, "window": "1d"}}"#);
    for _ in 0..n {
        let answer = support::raw_http(base, "POST", "/v1/check", &body);
        assert!(matches!(answer, Ok((200, _))), "{answer:?}");
    }
}

fn top(base: &str, args: &[&str]) -> Command {
    let mut command = ratekeeper();
    command
        .args(["top", "--url", &format!("http://{base}")])
        .args(args);
    command
}

#[test]
fn top_prints_the_heaviest_keys_as_a_table_and_as_json() {
    let (_server, base) = serve(&[]);
    spend(&base, "tenant-a", 9);
    spend(&base, "tenant-b", 4);
    let (code, out, err) = run(&mut top(&base, &["--once"]));
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().skip(3).collect();
    assert!(
        out.lines()
            .next()
            .unwrap()
            .contains("policy inline  denied units, last 1m")
    );
    assert!(out.contains("total 7 units"), "{out}");
    assert!(
        rows[1].starts_with("  1  tenant-a") && rows[1].contains(" 6 "),
        "{out}"
    );
    assert!(
        rows[2].starts_with("  2  tenant-b") && rows[2].contains(" 1 "),
        "{out}"
    );

    let (code, out, err) = run(&mut top(
        &base,
        &["--by", "checked", "--limit", "1", "--json"],
    ));
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["keys"][0]["key"], "tenant-a");
    assert_eq!(json["keys"][0]["count"], 9);
    assert_eq!(
        (json["total"].as_u64(), json["unlisted_max"].as_u64()),
        (Some(13), Some(4))
    );
}

#[test]
fn top_refreshes_until_stopped() {
    let (_server, base) = serve(&[]);
    spend(&base, "tenant-a", 5);
    let mut child = KillOnDrop(
        top(&base, &["--interval", "200ms"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(1_100));
    child.0.kill().unwrap();
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let tables = out.matches("policy inline").count();
    assert!(
        (3..=7).contains(&tables),
        "{tables} tables in 1.1 s:\n{out}"
    );
    assert!(!out.contains('\x1b'), "no screen clearing into a pipe");
}

#[test]
fn top_needs_an_admin_token_from_a_file_when_tokens_are_on() {
    let dir = fresh_dir("cli-top");
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        "check tkc_cli_0123456789abcdef\nadmin tka_cli_0123456789abcdef\n",
    )
    .unwrap();
    set_private(&tokens);
    let (_server, base) = serve(&[("RATEKEEPER_AUTH__TOKENS_FILE", tokens.to_str().unwrap())]);
    let (code, _, err) = run(&mut top(&base, &["--once"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("401: missing_token") && err.contains("--token-file"),
        "{err}"
    );

    let check = dir.join("check-token");
    std::fs::write(&check, "tkc_cli_0123456789abcdef\n").unwrap();
    let (code, _, err) = run(&mut top(
        &base,
        &["--once", "--token-file", check.to_str().unwrap()],
    ));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("403: insufficient_scope") && err.contains("admin"),
        "{err}"
    );
    assert!(!err.contains("tkc_cli"), "the token is never echoed: {err}");

    // Issue 27 part 5: the whole tokens file is refused, not its first
    // line (a check token) silently sent.
    let (code, _, err) = run(&mut top(
        &base,
        &["--once", "--token-file", tokens.to_str().unwrap()],
    ));
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("holds 2 tokens") && err.contains("admin for reset"),
        "{err}"
    );
    assert!(!err.contains("tk"), "no token is echoed: {err}");

    let admin = dir.join("admin-token");
    std::fs::write(&admin, "  tka_cli_0123456789abcdef  \n").unwrap();
    let (code, out, err) = run(&mut top(
        &base,
        &["--once", "--token-file", admin.to_str().unwrap()],
    ));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(no key counted in this window)"), "{out}");
}

#[test]
fn top_says_when_the_instance_cannot_be_reached() {
    let started = Instant::now();
    let (code, _, err) = run(&mut top("127.0.0.1:1", &["--once", "--timeout", "1s"]));
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("cannot reach http://127.0.0.1:1"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // https:// needs the CA that signed the instance's certificate; any
    // other scheme is refused. Both before anything is sent.
    let mut https = ratekeeper();
    https.args(["top", "--once", "--url", "https://127.0.0.1:1"]);
    let (code, _, err) = run(&mut https);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("needs --ca-file"), "{err}");
    let mut ftp = ratekeeper();
    ftp.args(["top", "--once", "--url", "ftp://127.0.0.1:1"]);
    let (code, _, err) = run(&mut ftp);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("must start with http:// or https://"), "{err}");
}

fn set_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn client(base: &str, args: &[&str]) -> Command {
    let mut command = ratekeeper();
    command
        .args(args)
        .args(["--url", &format!("http://{base}")]);
    command
}

fn policies_file() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/policies.example.toml")
}

#[test]
fn check_prints_the_decision_and_exits_by_it() {
    let file = policies_file();
    let (_server, base) = serve(&[("RATEKEEPER_POLICIES__FILE", file.to_str().unwrap())]);
    let (code, out, err) = run(&mut client(
        &base,
        &["check", "--policy", "api", "--key", "k_cli"],
    ));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("ALLOWED  limit 10  remaining 19"),
        "{out}"
    );
    assert!(lines[1].starts_with("NAME   ALGORITHM"), "{out}");
    assert!(
        lines[2].starts_with("burst  token_bucket  10     20     1s"),
        "{out}"
    );
    assert!(
        lines[3].starts_with("daily  fixed_window  10000  10000  1d"),
        "{out}"
    );

    // A day: the second run must find the first's unit spent.
    let single = ["check", "--key", "k_one", "--limit", "1", "--window", "1d"];
    assert_eq!(run(&mut client(&base, &single)).0, 0);
    let (code, out, _) = run(&mut client(&base, &single));
    assert_eq!(code, 3, "denied exits 3: {out}");
    assert!(
        out.starts_with("DENIED  limit 1  remaining 0  retry after "),
        "{out}"
    );

    let inline = r#"[{"limit":2,"window":"1h","algorithm":"fixed_window"}]"#;
    let args = [
        "check", "--key", "k_in", "--limits", inline, "--cost", "2", "--json",
    ];
    let (code, out, err) = run(&mut client(&base, &args));
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (json["allowed"].as_bool(), json["remaining"].as_u64()),
        (Some(true), Some(0))
    );

    let (code, _, err) = run(&mut client(
        &base,
        &["check", "--key", "k", "--policy", "nope"],
    ));
    assert_eq!(code, 1);
    assert!(err.contains("422: unknown_policy"), "{err}");
    let (code, _, err) = run(&mut client(&base, &["check", "--key", "k"]));
    assert_eq!(code, 64, "{err}");
}

#[test]
fn reset_gives_the_units_back_and_policies_show_lists_the_file() {
    let file = policies_file();
    let (_server, base) = serve(&[("RATEKEEPER_POLICIES__FILE", file.to_str().unwrap())]);
    let single = ["--key", "k_reset", "--limit", "1", "--window", "1d"];
    let check = |base: &str| run(&mut client(base, &[&["check"][..], &single].concat())).0;
    assert_eq!((check(&base), check(&base)), (0, 3));
    let (code, out, err) = run(&mut client(&base, &[&["reset"][..], &single].concat()));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ALLOWED  limit 1  remaining 1"), "{out}");
    assert_eq!(check(&base), 0, "allowed again after the reset");

    let (code, out, err) = run(&mut client(&base, &["policies", "show"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("file {}  sha256 ", file.display())),
        "{out}"
    );
    assert!(out.contains("\napi     burst   token_bucket"), "{out}");
    assert!(out.contains("login   minute  sliding_window"), "{out}");
    let (code, out, _) = run(&mut client(
        &base,
        &["policies", "show", "export", "--json"],
    ));
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["policies"].as_array().unwrap().len(), 1);
    assert_eq!(json["policies"][0]["name"], "export");
}

/// Issue 30: `override set|get|ls|rm`, `block`, `unblock` and `audit`
/// against a live instance with tokens on: tables, `--json`, the admin
/// token's name in the audit trail, a key that needs encoding, and the
/// exit codes of a refusal and a usage error.
#[test]
fn the_tenant_commands_set_list_and_audit_overrides_and_blocks() {
    let dir = fresh_dir("cli-tenants");
    let policies = dir.join("policies.toml");
    std::fs::write(
        &policies,
        "[policies.api]\nlimits = [{ name = \"daily\", limit = 100, window = \"1d\" }]\n",
    )
    .unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "admin alice tka_cli_0123456789abcdef\n").unwrap();
    set_private(&tokens);
    let (_server, base) = serve(&[
        ("RATEKEEPER_AUTH__TOKENS_FILE", tokens.to_str().unwrap()),
        ("RATEKEEPER_POLICIES__FILE", policies.to_str().unwrap()),
    ]);
    let cli = |args: &[&str]| {
        let mut command = ratekeeper();
        command
            .args(args)
            .args(["--url", &format!("http://{base}")])
            .args(["--token-file", tokens.to_str().unwrap()]);
        run(&mut command)
    };
    let key = "user/7 x";
    let (code, out, err) = cli(&[
        "override", "set", "--policy", "api", "--key", key, "--limit", "daily=7", "--ttl", "1h",
        "--reason", "INC-1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("override  api     user/7 x  daily=7"), "{out}");
    let (code, out, _) = cli(&["override", "get", "--policy", "api", "--key", key, "--json"]);
    assert_eq!(code, 0);
    let entry: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (entry["key"].as_str(), entry["set_by"].as_str()),
        (Some(key), Some("alice"))
    );
    let (_, out, _) = cli(&["override", "ls", "--policy", "api"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    let (code, _, _) = cli(&["block", "--key", "abuser", "--reason", "spam"]);
    assert_eq!(code, 0);
    let answer = support::raw_http(
        &base,
        "POST",
        "/v1/check",
        r#"{"key": "abuser", "limit": 5, "window": "1d"}"#,
    );
    // The instance wants a token for a check too: its refusal says so.
    assert!(matches!(answer, Ok((401, _))), "{answer:?}");
    let (code, out, _) = cli(&["audit", "--limit", "2"]);
    assert_eq!(code, 0);
    let rows: Vec<&str> = out.lines().collect();
    assert!(
        rows[1].contains("alice") && rows[1].contains("block.set"),
        "{out}"
    );
    assert!(
        rows[2].contains("override.set") && rows[2].contains("INC-1"),
        "{out}"
    );
    assert!(!out.contains("tka_cli"), "no token is printed: {out}");
    assert_eq!(cli(&["unblock", "--key", "abuser"]).0, 0);
    let (code, _, err) = cli(&["unblock", "--key", "abuser"]);
    assert_eq!(code, 1);
    assert!(err.contains("404: not_found"), "{err}");
    let (code, _, err) = cli(&[
        "override", "set", "--policy", "api", "--key", "k", "--limit", "daily",
    ]);
    assert_eq!(code, 64, "{err}");
    assert_eq!(
        cli(&["override", "rm", "--policy", "api", "--key", key]).0,
        0
    );
}

/// A redirect is not followed: the token it would carry elsewhere (to a
/// plaintext URL, say) is never sent there. The redirecting "instance" is
/// a bare socket that answers 307; the place it points to counts who
/// comes.
#[test]
fn the_client_follows_no_redirect() {
    use std::io::Write;
    let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target_addr = target.local_addr().unwrap();
    target.set_nonblocking(true).unwrap();
    let redirector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = redirector.local_addr().unwrap().to_string();
    let answer = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://{target_addr}/v1/top\r\n\
         content-length: 0\r\nconnection: close\r\n\r\n"
    );
    let serving = std::thread::spawn(move || {
        let (mut stream, _) = redirector.accept().unwrap();
        let mut head = [0u8; 4096];
        let _ = stream.read(&mut head);
        stream.write_all(answer.as_bytes()).unwrap();
    });
    let dir = fresh_dir("cli-redirect");
    let token = dir.join("token");
    std::fs::write(&token, "tka_cli_0123456789abcdef\n").unwrap();
    set_private(&token);
    let (code, _, err) = run(&mut top(
        &base,
        &["--once", "--token-file", token.to_str().unwrap()],
    ));
    serving.join().unwrap();
    assert_ne!(code, 0, "a 307 is not an answer: {err}");
    assert!(
        matches!(target.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the redirect was followed"
    );
}
