//! Schemathesis (from PyPI) against the real binary: every check it has
//! (`--checks all`), over a bounded number of generated requests per
//! operation, must find nothing. The virtualenv lives under the target
//! directory and is created on first use; if it cannot be created the test
//! fails with the reason, it never skips.
//!
//! `tests/schemathesis/ratekeeper_hooks.py` teaches the generator the
//! cross-field rules JSON Schema cannot state (cost ≤ limit, ...), which the
//! OpenAPI document gives in prose.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

use support::venv::{pip_tool, python_of};

/// Generated requests per operation and phase: with ten operations, 600
/// took about three minutes here (1000 took five, too much of CI's half
/// hour); release and renew generate at a third of the others' pace (their
/// forms and the lease id's pattern), so twelve take 500.
const MAX_EXAMPLES: &str = "500";
/// The same for the runtime overrides, blocks and exemptions (tag
/// `tenants`, thirteen operations of little arithmetic), in a run of their
/// own: at 500 with the others the whole took 393 s.
const TENANTS_EXAMPLES: &str = "100";
const SCHEMATHESIS: &str = "schemathesis>=4.32,<5";
const RUN_LIMIT: Duration = Duration::from_secs(600);
const ADMIN_TOKEN: &str = "schemathesis-admin-token-0123456789";

/// The `st` script in our virtualenv, installed on first use; run it with
/// the venv's Python ([`python_of`]).
fn schemathesis() -> PathBuf {
    pip_tool("schemathesis", SCHEMATHESIS, "bin/schemathesis")
}

#[test]
fn schemathesis_finds_nothing() {
    let st = schemathesis();
    // One policy, so that valid policy-form requests are valid here too (the
    // hooks point them at it): its tightest limit takes any cost up to
    // POLICY_CAPACITY in ratekeeper_hooks.py. And one policy with levels,
    // `fuzz_tree`, for the hierarchy form's (the ids of its schema example,
    // `org`, `team` and `user`).
    let policies = Path::new(env!("CARGO_TARGET_TMPDIR")).join("schemathesis-policies.toml");
    std::fs::write(
        &policies,
        "[policies.fuzz]\nlimits = [\n  \
         { name = \"burst\", algorithm = \"gcra\", limit = 1000000, window = \"1s\" },\n  \
         { name = \"daily\", algorithm = \"fixed_window\", limit = 1000000000000, window = \"1d\" },\n  \
         { name = \"inflight\", algorithm = \"concurrency\", limit = 10000, lease_ttl = \"1s\" },\n]\n\
         [policies.fuzz_level]\nlimits = [ { name = \"day\", limit = 1000000, window = \"1d\" } ]\n\
         [policies.fuzz_tree]\nlevels = [\n  \
         { name = \"org\", policy = \"fuzz_level\", key = \"o:{org}\" },\n  \
         { name = \"team\", policy = \"fuzz_level\", key = \"t:{org}/{team}\" },\n  \
         { name = \"user\", policy = \"fuzz_level\", key = \"u:{user}\" },\n]\n",
    )
    .unwrap();
    // With bearer tokens on, as the document's security says: schemathesis
    // sends the admin token, and its ignored_auth check finds that requests
    // without it (or with a wrong one) are refused.
    let tokens = Path::new(env!("CARGO_TARGET_TMPDIR")).join("schemathesis-tokens");
    std::fs::write(&tokens, format!("admin {ADMIN_TOKEN}\n")).unwrap();
    let (_service, addr) = support::binary::serve(&[
        ("RATEKEEPER_LOG__LEVEL", "warn,ratekeeper::app=info"),
        ("RATEKEEPER_POLICIES__FILE", policies.to_str().unwrap()),
        ("RATEKEEPER_AUTH__TOKENS_FILE", tokens.to_str().unwrap()),
    ]);
    let url = format!("http://{addr}");
    run(
        &st,
        &url,
        &["--exclude-tag", "tenants", "--max-examples", MAX_EXAMPLES],
    );
    run(
        &st,
        &url,
        &[
            "--include-tag",
            "tenants",
            "--max-examples",
            TENANTS_EXAMPLES,
        ],
    );
}

/// One schemathesis run against `url` with `args`, which must find nothing.
fn run(st: &Path, url: &str, args: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hooks = root.join("tests").join("schemathesis");
    let mut run = Command::new(python_of(st))
        .arg(st)
        .arg("run")
        .arg(root.join("openapi.yaml"))
        .args(["--url", url])
        .args(["--checks", "all"])
        .args(args)
        .args(["--no-color", "--request-timeout", "5"])
        .args(["--header", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
        .env("SCHEMATHESIS_HOOKS", "ratekeeper_hooks")
        // The hooks make real reservations for the settles to name.
        .env("RATEKEEPER_FUZZ_URL", url)
        .env("RATEKEEPER_FUZZ_TOKEN", ADMIN_TOKEN)
        .env("PYTHONPATH", &hooks)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Hypothesis and schemathesis keep their databases in the working
        // directory: keep them out of the source tree.
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("schemathesis runs");
    let started = Instant::now();
    // Read output on threads so a full pipe never stalls the run.
    let out = run.stdout.take().unwrap();
    let err = run.stderr.take().unwrap();
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = run.kill();
            let _ = run.wait();
            panic!("schemathesis ran past {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    println!("{out}");
    assert!(
        status.success(),
        "schemathesis found problems ({status}):\n{out}\n{err}"
    );
    assert!(out.contains("No issues found"), "{out}");
}
