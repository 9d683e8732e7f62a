//! A real nginx, run from `examples/nginx/ratekeeper.conf` (only its ports
//! changed) in a temp prefix as an unprivileged single process, in front of
//! a small counting upstream.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{free_port, fresh_dir, wait_until};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/nginx/ratekeeper.conf"
);

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
        let dir = fresh_dir("nginx");
        let port = free_port();
        let mut example = std::fs::read_to_string(EXAMPLE).unwrap();
        if let Some(token) = token {
            let line = "proxy_set_header Authorization \"\";";
            assert!(example.contains(line), "the example's {line} changed");
            example = example.replace(
                line,
                &format!("proxy_set_header Authorization \"Bearer {token}\";"),
            );
        }
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
        std::fs::write(dir.join("site.conf"), site).unwrap();
        std::fs::write(dir.join("nginx.conf"), main_conf(&dir)).unwrap();
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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

/// One process, no user switch, every path inside `dir`.
fn main_conf(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include {d}/site.conf;
}}
"
    )
}
