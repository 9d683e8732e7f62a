//! Each client as it ships in examples/clients/, with what it needs: a
//! venv from PyPI for Python, Node and Go as Debian packages them, curl
//! and jq for the shell script. A missing tool fails the test with how to
//! install it: scripts/test.sh installs them all.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{DemoApp, configured};
use crate::support::binary::run;
use crate::support::venv::{self, pip_tools, python_of};

fn example(client: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/clients")
        .join(client)
}

/// `name` from PATH (or a Debian path off it), else a panic saying how to
/// install it.
fn tool(name: &str, debian_package: &str, also: &[&str]) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found: the client tests run it. Install it with \
                 `sudo apt-get install -y {debian_package}` (Debian/Ubuntu), or run \
                 `bash scripts/test.sh`, which does"
            )
        })
}

/// The Starlette demo app under uvicorn, in a venv holding the pins of
/// the example's own requirements.txt, so the two cannot drift apart.
pub fn python(env: &[(String, String)]) -> DemoApp {
    uvicorn(&example("python"), "app", "python", env)
}

/// `module:app` of examples/llm-gateway/ under uvicorn (the gateway or
/// its fake upstream): its requirements.txt holds the Python client's
/// pins, so one venv serves both.
pub fn llm_gateway(module: &str, env: &[(String, String)]) -> DemoApp {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/llm-gateway");
    uvicorn(&dir, module, module, env)
}

/// `module:app` of `dir` under uvicorn on a free port, in the venv of the
/// pins of `dir`'s requirements.txt.
fn uvicorn(dir: &Path, module: &str, what: &str, env: &[(String, String)]) -> DemoApp {
    let requirements = std::fs::read_to_string(dir.join("requirements.txt")).unwrap();
    let pins: Vec<&str> = requirements
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let uvicorn = pip_tools("clients-python", &pins, "bin/uvicorn");
    let mut command = Command::new(python_of(&uvicorn));
    command
        .args(["-m", "uvicorn", &format!("{module}:app"), "--app-dir"])
        .arg(dir)
        .args(["--host", "127.0.0.1", "--port", "0", "--no-access-log"]);
    DemoApp::spawn(what, command, env)
}

/// The Node demo server (built-in http and fetch only).
pub fn node(env: &[(String, String)]) -> DemoApp {
    let node = tool("node", "nodejs", &["/usr/bin/nodejs"]);
    let mut command = Command::new(node);
    command
        .arg(example("node").join("server.mjs"))
        .env("PORT", "0");
    DemoApp::spawn("node", command, env)
}

/// The Go demo server, built once per test process.
pub fn go(env: &[(String, String)]) -> DemoApp {
    let mut command = Command::new(go_demo());
    command.env("PORT", "0");
    DemoApp::spawn("go", command, env)
}

fn go_demo() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let go = tool("go", "golang", &["/usr/lib/go/bin/go"]);
            let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
            let binary = tmp.join("clients-go-demo");
            // Test processes build at once: each into a name of its own,
            // then renamed into place (a running binary keeps its inode).
            let building = tmp.join(format!("clients-go-demo.{}", std::process::id()));
            venv::run(
                Command::new(go)
                    .args(["build", "-o"])
                    .arg(&building)
                    .arg(".")
                    .current_dir(example("go"))
                    // Standard library only: nothing may be downloaded, and
                    // none of the operator's flags apply.
                    .env("GOPROXY", "off")
                    .env("GOFLAGS", "")
                    .env("GOTOOLCHAIN", "local")
                    .env("GOCACHE", tmp.join("go-build-cache")),
                "building examples/clients/go with Debian's golang (go 1.19)",
            );
            std::fs::rename(&building, &binary).unwrap();
            binary
        })
        .clone()
}

/// One run of ratekeeper-acquire.sh.
pub struct Acquired {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Acquired {
    /// The exit status, and whether the command after `--` (`echo ran`) ran.
    pub fn expect(&self, code: i32, ran: bool, what: &str) {
        let stdout = if ran { "ran\n" } else { "" };
        assert_eq!(
            (self.code, self.stdout.as_str()),
            (code, stdout),
            "{what}: {}",
            self.stderr
        );
    }
}

/// Runs ratekeeper-acquire.sh `args` with `env`.
pub fn acquire(env: &[(String, String)], args: &[&str]) -> Acquired {
    for (name, package) in [("curl", "curl"), ("jq", "jq"), ("bash", "bash")] {
        tool(name, package, &[]);
    }
    let mut command = Command::new(example("shell").join("ratekeeper-acquire.sh"));
    command.args(args);
    configured(&mut command, env);
    let started = Instant::now();
    let (code, stdout, stderr) = run(&mut command);
    Acquired {
        code,
        stdout,
        stderr,
        elapsed: started.elapsed(),
    }
}
