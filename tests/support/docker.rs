//! Containers for the deployment tests: the public base images' local
//! stand-ins (`tests/docker/standins.sh`), the real `Dockerfile` built once
//! per run, and containers and networks that are removed when dropped, so
//! a failing test leaves nothing running. Every name carries this process's
//! id; leftovers of a killed run are removed by the next one.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The tag the tests build the `Dockerfile` as, the one `docker-compose.yml`
/// names, so the compose tests find it built.
pub const IMAGE: &str = "ratekeeper:latest";
/// Labels everything the tests create, with the creating process's id.
const LABEL: &str = "org.ratekeeper.test";

/// Runs `docker ARGS`; its output, successful or not.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker ({e}): {}", HOW_TO_GET_DOCKER))
}

const HOW_TO_GET_DOCKER: &str = "the container tests need a Docker Engine with the Compose tool; \
    on Debian: `apt-get install docker.io docker-compose debootstrap`, start the daemon \
    (`systemctl start docker` or `dockerd &`), then run `bash scripts/test.sh` again";

/// `docker ARGS`, which must succeed; its trimmed stdout.
pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Held by each container test while it runs: one at a time, in this
/// process and across processes (nextest runs each test in its own). Their
/// latency bounds leave about 25 ms on a 2-core machine, which a second
/// cluster of containers starting beside them would eat.
pub fn one_test_at_a_time() -> nix::fcntl::Flock<std::fs::File> {
    let path = format!("{}/container-tests.lock", env!("CARGO_TARGET_TMPDIR"));
    let lock = std::fs::File::create(path).unwrap();
    nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap()
}

/// The stand-ins and [`IMAGE`], built from this checkout once per test
/// process. Test processes running at once take turns on a lock file; the
/// engine's layer cache makes every build after the first a no-op unless a
/// source file changed.
pub fn image() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let engine = docker(&["info", "--format", "{{.ServerVersion}}"]);
        assert!(
            engine.status.success(),
            "no Docker Engine answers: {HOW_TO_GET_DOCKER}"
        );
        let lock =
            std::fs::File::create(format!("{}/docker-build.lock", env!("CARGO_TARGET_TMPDIR")))
                .unwrap();
        // Held until the build is done (std's File::lock is newer than our MSRV).
        let _turn = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .unwrap();
        reap_leftovers();
        let root = env!("CARGO_MANIFEST_DIR");
        run_logged(
            Command::new("bash").arg(format!("{root}/tests/docker/standins.sh")),
            "making the stand-in base images",
        );
        let started = Instant::now();
        run_logged(
            Command::new("docker").args(["build", "-t", IMAGE, root]),
            "building the Dockerfile",
        );
        eprintln!(
            "docker build of {IMAGE}: {:.1} s",
            started.elapsed().as_secs_f64()
        );
    });
    IMAGE
}

/// Runs `command`, printing its output only when it fails.
fn run_logged(command: &mut Command, what: &str) {
    let out = command.stdin(Stdio::null()).output().unwrap();
    if !out.status.success() {
        let _ = std::io::stderr().write_all(&out.stdout);
        let _ = std::io::stderr().write_all(&out.stderr);
        panic!("{what} failed ({}); its output is above", out.status);
    }
}

/// Removes the containers and networks of test processes that are gone:
/// those labelled with a dead process's id, and compose projects named
/// after one (`rk-compose-<pid>-<n>`, see [`unique_name`]).
fn reap_leftovers() {
    let gone = |pid: &str| !std::path::Path::new(&format!("/proc/{pid}")).exists();
    let projects = docker_ok(&[
        "ps",
        "-a",
        "--filter",
        "label=com.docker.compose.project",
        "--format",
        "{{.ID}} {{.Label \"com.docker.compose.project\"}}",
    ]);
    for line in projects.lines() {
        let Some((id, project)) = line.split_once(' ') else {
            continue;
        };
        let pid = project
            .strip_prefix("rk-compose-")
            .and_then(|rest| rest.split('-').next());
        if pid.is_some_and(gone) {
            let _ = docker(&["rm", "-f", "-v", id]);
        }
    }
    let networks = docker_ok(&["network", "ls", "--format", "{{.ID}} {{.Name}}"]);
    for line in networks.lines() {
        let Some((id, name)) = line.split_once(' ') else {
            continue;
        };
        let pid = name
            .strip_prefix("rk-compose-")
            .and_then(|rest| rest.split('-').next());
        if pid.is_some_and(gone) {
            let _ = docker(&["network", "rm", id]);
        }
    }
    let format = "{{.ID}} {{.Label \"org.ratekeeper.test\"}}";
    let filter = format!("label={LABEL}");
    for (kind, list) in [
        (
            "container",
            [
                "container",
                "ls",
                "-a",
                "--filter",
                &filter,
                "--format",
                format,
            ],
        ),
        (
            "network",
            ["network", "ls", "--filter", &filter, "--format", format, ""],
        ),
    ] {
        let list: Vec<&str> = list.into_iter().filter(|a| !a.is_empty()).collect();
        let list = docker_ok(&list);
        for line in list.lines() {
            if let Some((id, pid)) = line.split_once(' ')
                && gone(pid)
            {
                let _ = docker(&[kind, "rm", "-f", id]);
            }
        }
    }
}

/// A name no other test or process uses.
pub fn unique_name(what: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "rk-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

fn label() -> String {
    format!("{LABEL}={}", std::process::id())
}

/// A user-defined bridge network: containers on it reach each other by
/// name, as separate hosts.
pub struct Network {
    pub name: String,
}

impl Network {
    pub fn create() -> Network {
        let name = unique_name("net");
        docker_ok(&["network", "create", "--label", &label(), &name]);
        Network { name }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = docker(&["network", "rm", &self.name]);
    }
}

/// A container started with `docker run -d`; removed with its volumes on
/// drop.
pub struct Container {
    pub name: String,
}

impl Container {
    /// `docker run -d --name <unique> ARGS` (ARGS end with the image and
    /// its command).
    pub fn run(what: &str, args: &[&str]) -> Container {
        // Every image a test runs is [`IMAGE`] or a stand-in (Redis): on a
        // machine that never built them, the first container would
        // otherwise be looked for on a registry.
        image();
        let name = unique_name(what);
        let label = label();
        let mut all = vec!["run", "-d", "--name", &name, "--label", &label];
        all.extend_from_slice(args);
        docker_ok(&all);
        Container { name }
    }

    /// The loopback port that `container_port` is published on (run with
    /// `-p 127.0.0.1::PORT`).
    pub fn host_port(&self, container_port: u16) -> u16 {
        let mapping = docker_ok(&["port", &self.name, &format!("{container_port}/tcp")]);
        let first = mapping.lines().next().unwrap_or_default();
        first
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{} publishes no {container_port}: {mapping:?}", self.name))
    }

    /// `docker inspect --format FORMAT`.
    pub fn inspect(&self, format: &str) -> String {
        docker_ok(&["inspect", "--format", format, &self.name])
    }

    /// Its address on `network`.
    pub fn ip(&self, network: &Network) -> String {
        self.inspect(&format!(
            "{{{{ (index .NetworkSettings.Networks \"{}\").IPAddress }}}}",
            network.name
        ))
    }

    pub fn logs(&self) -> String {
        let out = docker(&["logs", &self.name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// `docker exec NAME ARGS`; its trimmed stdout ("" if it failed).
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["exec", self.name.as_str()];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&docker(&all).stdout)
            .trim()
            .to_string()
    }

    pub fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }

    /// Waits up to `limit` for the container to exit; its exit code.
    pub fn wait_exit(&self, limit: Duration) -> i64 {
        let deadline = Instant::now() + limit;
        while self.running() {
            assert!(
                Instant::now() < deadline,
                "{} still runs after {limit:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.inspect("{{.State.ExitCode}}").parse().unwrap()
    }

    pub fn kill(&self) {
        docker_ok(&["kill", &self.name]);
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", "-v", &self.name]);
    }
}

/// `http://127.0.0.1:PORT` of `container`'s port 8080, once `/healthz`
/// answers there (within 30 s; the logs are shown if it does not).
pub fn serving(container: &Container) -> String {
    let addr = format!("127.0.0.1:{}", container.host_port(8080));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(super::raw_http(&addr, "GET", "/healthz", ""), Ok((200, _))) {
        assert!(
            Instant::now() < deadline && container.running(),
            "{} never answered /healthz; its log:\n{}",
            container.name,
            container.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    format!("http://{addr}")
}
