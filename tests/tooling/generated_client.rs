//! Issue 17, part 3: `openapi.yaml` serves client generators, not only the
//! drift test. openapi-python-client (from PyPI) generates a Python client
//! from it, with warnings as errors; `tests/generated_client/calls.py`
//! then calls check in its three forms, reset, refund, policies and top
//! through the generated types against the real binary, with a token.

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::binary::serve;
use support::fresh_dir;
use support::venv::{pip_tool, python_of, run};

/// The generator, pinned: a new version may name classes differently.
const GENERATOR: &str = "openapi-python-client==0.29.1";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The client generated from `openapi.yaml` under `dir`; fails on any
/// warning (an endpoint or schema the generator could not read).
fn generate(dir: &Path) {
    let generator = pip_tool(
        "openapi-python-client",
        GENERATOR,
        "bin/openapi-python-client",
    );
    // No post hooks: they format with ruff, which is not installed.
    std::fs::write(dir.join("config.yml"), "post_hooks: []\n").unwrap();
    run(
        Command::new(python_of(&generator))
            .arg(&generator)
            .args(["generate", "--meta", "none", "--fail-on-warning", "--path"])
            .arg(root().join("openapi.yaml"))
            .arg("--config")
            .arg(dir.join("config.yml"))
            .current_dir(dir),
        "openapi-python-client generate (every warning is an error)",
    );
    assert!(dir.join("ratekeeper_client/api/limits/reset.py").is_file());
}

#[test]
fn a_generated_python_client_checks_resets_refunds_and_lists() {
    let dir = fresh_dir("generated-client");
    generate(&dir);
    let tokens = dir.join("tokens");
    let admin = "tka_generated_0123456789abcdef";
    std::fs::write(&tokens, format!("admin {admin}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let policies = root().join("config/policies.example.toml");
    let (_server, addr) = serve(&[
        ("RATEKEEPER_POLICIES__FILE", policies.to_str().unwrap()),
        ("RATEKEEPER_AUTH__TOKENS_FILE", tokens.to_str().unwrap()),
    ]);
    let generator = pip_tool(
        "openapi-python-client",
        GENERATOR,
        "bin/openapi-python-client",
    );
    let out = Command::new(python_of(&generator))
        .arg(root().join("tests/generated_client/calls.py"))
        .arg(format!("http://{addr}"))
        .arg(admin)
        .env("PYTHONPATH", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "calls.py failed:\n{stderr}");
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let allowed = |remaining: u64, limit: u64| json!({"allowed": true, "remaining": remaining, "limit": limit, "limits": null});
    let api = json!({"allowed": true, "remaining": 19, "limit": 10, "limits": ["burst", "daily"]});
    assert_eq!(got["policy"], api);
    let hourly = ["hourly", "daily"];
    assert_eq!(
        got["inline"],
        json!({"allowed": true, "remaining": 1, "limit": 2, "limits": hourly})
    );
    assert_eq!(got["single"], allowed(0, 1));
    assert_eq!(got["single_again"]["allowed"], false);
    assert_eq!(got["reset"], allowed(1, 1));
    assert_eq!(got["single_after_reset"], allowed(0, 1));
    assert_eq!(got["policy_reset"]["remaining"], 20, "a full bucket again");
    assert_eq!(
        got["refund"],
        json!({"allowed": true, "remaining": 2, "limit": 2, "limits": hourly})
    );
    assert_eq!(got["policies"], json!(["api", "export", "login"]));
    assert_eq!(got["top"], json!({"gen-3": 3, "gen-2": 1}));
    assert_eq!(got["unknown_policy"], "unknown_policy");
}
