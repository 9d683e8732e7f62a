//! The git revision for `ratekeeper_build_info`. `RATEKEEPER_REVISION` in
//! the environment wins (the Dockerfile passes it as a build argument: its
//! build has no `.git`); otherwise `git rev-parse`; otherwise `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RATEKEEPER_REVISION");
    let revision = std::env::var("RATEKEEPER_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RATEKEEPER_REVISION={}", revision.trim());
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn git_revision() -> Option<String> {
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Build again when HEAD moves: to another branch, or its branch to
    // another commit (--git-path finds both in a worktree too).
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(path) = git(&["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={path}");
    }
    Some(revision)
}
