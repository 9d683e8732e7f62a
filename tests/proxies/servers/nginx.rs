//! A real nginx, run from `examples/nginx/nginx.conf` and
//! `ratekeeper.conf` (only the ports changed) in a temp prefix as an
//! unprivileged single process, as `examples/nginx/README.md` runs it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{free_port, fresh_dir, wait_until};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/nginx/ratekeeper.conf"
);

/// Its variant for a ratekeeper with `[server.tls]` and client certificates.
pub const TLS_EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/nginx/ratekeeper-tls.conf"
);

/// The whole configuration around it, for a trial without root.
const MAIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nginx/nginx.conf");

/// The nginx binary; scripts/test.sh installs it with apt-get.
fn nginx_binary() -> PathBuf {
    [
        "/usr/sbin/nginx",
        "/usr/local/sbin/nginx",
        "/usr/local/nginx/sbin/nginx",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .or_else(|| {
        let out = Command::new("sh")
            .args(["-c", "command -v nginx"])
            .output()
            .ok()?;
        let path = String::from_utf8(out.stdout).ok()?;
        (!path.trim().is_empty()).then(|| PathBuf::from(path.trim()))
    })
    .expect(
        "nginx is missing: run scripts/test.sh, which installs it with apt-get, \
             or install nginx (with the auth_request module) yourself",
    )
}

/// A running nginx; killed when dropped.
pub struct Nginx {
    child: Child,
    pub port: u16,
    _dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// nginx with the shipped example, pointed at `ratekeeper` and `upstream`.
    pub fn start(ratekeeper: SocketAddr, upstream: SocketAddr) -> Nginx {
        Self::start_with_token(ratekeeper, upstream, None)
    }

    /// The same, with `token` in the example's Authorization line, as its
    /// comment says to do when ratekeeper has `auth.tokens_file`.
    pub fn start_with_token(
        ratekeeper: SocketAddr,
        upstream: SocketAddr,
        token: Option<&str>,
    ) -> Nginx {
        let mut pairs = Vec::new();
        if let Some(token) = token {
            pairs.push((
                "proxy_set_header Authorization \"\";",
                format!("proxy_set_header Authorization \"Bearer {token}\";"),
            ));
        }
        Self::start_from(EXAMPLE, ratekeeper, upstream, &pairs)
    }

    /// nginx with the site `example` (a file of examples/nginx/), its
    /// addresses and `pairs` substituted.
    pub fn start_from(
        example: &str,
        ratekeeper: SocketAddr,
        upstream: SocketAddr,
        pairs: &[(&str, String)],
    ) -> Nginx {
        let dir = fresh_dir("nginx");
        let port = free_port();
        let example = std::fs::read_to_string(example).unwrap();
        let example = super::substitute(&example, pairs);
        let site = example
            .replace("server 127.0.0.1:3000;", &format!("server {upstream};"))
            .replace("server 127.0.0.1:8080;", &format!("server {ratekeeper};"))
            .replace(
                "listen 127.0.0.1:8000;",
                &format!("listen 127.0.0.1:{port};"),
            );
        assert_ne!(
            site, example,
            "the example's addresses changed; update this test"
        );
        // The README's command: the example's nginx.conf as it is, which
        // includes ratekeeper.conf from its own directory.
        std::fs::write(dir.join("ratekeeper.conf"), site).unwrap();
        std::fs::copy(MAIN, dir.join("nginx.conf")).unwrap();
        let log = std::fs::File::create(dir.join("error.log")).unwrap();
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(&dir)
            .args(["-e", "stderr", "-c"])
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nginx starts");
        let mut nginx = Nginx {
            child,
            port,
            _dir: dir.clone(),
        };
        wait_until(Duration::from_secs(10), "nginx listens", || {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                panic!("nginx exited with {status}: {log}");
            }
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        nginx
    }
}
