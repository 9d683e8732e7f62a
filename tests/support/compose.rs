//! The shipped `docker-compose.yml`, brought up for real as its own
//! project, with a test override file beside it; `down -v` on drop.

use std::path::{Path, PathBuf};

use std::process::{Command, Output, Stdio};

use super::docker::{docker_ok, unique_name};

/// `docker compose` (v2) when the engine's CLI has it, else `docker-compose`
/// (v1, as Debian packages it).
fn compose_command() -> Vec<&'static str> {
    let v2 = Command::new("docker")
        .args(["compose", "version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if v2 {
        vec!["docker", "compose"]
    } else {
        vec!["docker-compose"]
    }
}

pub struct Compose {
    project: String,
    files: Vec<PathBuf>,
    /// Holds the override file; removed after `down`, which reads it.
    dir: PathBuf,
}

impl Compose {
    /// `up -d --no-build` of the repository's `docker-compose.yml` plus
    /// `override_yaml` (compose's merge rules: a volume with the same
    /// target replaces the shipped one; a new service is added). `dir`
    /// (the test's files) is removed once the project is down.
    pub fn up(override_yaml: &str, dir: PathBuf) -> Compose {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let overrides = dir.join("docker-compose.test.yml");
        std::fs::write(&overrides, override_yaml).unwrap();
        let compose = Compose {
            project: unique_name("compose"),
            files: vec![root.join("docker-compose.yml"), overrides],
            dir,
        };
        // The caller built `ratekeeper:latest` from this checkout first
        // (`docker::image()`: the same Dockerfile and context). Compose v1
        // builds through its own client, which passes the revision as a
        // build argument and so missed the engine's cache for the fat-LTO
        // build: a second build of several minutes in CI's 30.
        compose.ok(&["up", "-d", "--no-build"]);
        compose
    }

    /// Runs a compose subcommand of this project.
    pub fn run(&self, args: &[&str]) -> Output {
        let command = compose_command();
        let mut cmd = Command::new(command[0]);
        cmd.args(&command[1..]).args(["-p", &self.project]);
        for file in &self.files {
            cmd.arg("-f").arg(file);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}; install docker-compose"))
    }

    /// A compose subcommand that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "compose {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The id of `service`'s (first) container.
    pub fn container(&self, service: &str) -> String {
        let id = self.ok(&["ps", "-q", service]);
        let id = id.lines().next().unwrap_or_default().to_string();
        assert!(!id.is_empty(), "no container for {service}");
        id
    }

    /// `service`'s address on the project's network (the host reaches it
    /// directly over the bridge).
    pub fn ip(&self, service: &str) -> String {
        docker_ok(&[
            "inspect",
            "--format",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &self.container(service),
        ])
    }

    pub fn logs(&self) -> String {
        let out = self.run(&["logs", "--no-color"]);
        String::from_utf8_lossy(&out.stdout).to_string()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self.run(&["down", "-v", "--remove-orphans", "-t", "2"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
