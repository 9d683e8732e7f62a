//! TLS for the Redis tests: certificates made by the `openssl` CLI in a
//! temp directory (a CA, a server certificate for `IP:127.0.0.1` and
//! `DNS:localhost`, a client certificate), and redis-server started with a
//! TLS port beside its plaintext one. The plaintext port is the test's own
//! back door (PING, redis-cli, restarts); the service is only given the TLS
//! port.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ratekeeper::config::{ConfigError, Overrides, Settings};

use super::{RedisServer, free_port, fresh_dir, path_str};

/// A CA and the certificates it signed, as PEM files in `dir`, each named
/// `<ca name>-<what>.crt` / `.key`.
#[derive(Clone)]
pub struct Certs {
    pub dir: PathBuf,
    name: String,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the openssl CLI runs (apt-get install -y openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];

impl Certs {
    /// A fresh CA named `name` in a fresh directory, with a server
    /// certificate (`server`) and a client certificate (`client`).
    pub fn new(name: &str) -> Certs {
        Self::in_dir(fresh_dir("tls"), name)
    }

    /// The same, in `dir` (beside another CA's files).
    pub fn in_dir(dir: PathBuf, name: &str) -> Certs {
        let certs = Certs {
            dir,
            name: name.to_string(),
        };
        let (key, crt) = (certs.key("ca"), certs.crt("ca"));
        let subject = format!("/CN={name} test CA");
        let mut args = vec!["req", "-x509", "-nodes", "-days", "30", "-subj", &subject];
        args.extend(EC);
        args.extend(["-keyout", path_str(&key), "-out", path_str(&crt)]);
        args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        openssl(&certs.dir, &args);
        certs.sign("server", 30);
        certs.sign("client", 30);
        certs
    }

    /// A leaf certificate `what` for `IP:127.0.0.1` and `DNS:localhost`,
    /// valid `days` days from now (-1: expired yesterday), for both server
    /// and client use (Redis presents its own on cluster-bus links).
    pub fn sign(&self, what: &str, days: i32) {
        let (key, crt) = (self.key(what), self.crt(what));
        let csr = self.dir.join(format!("{}-{what}.csr", self.name));
        let subject = format!("/CN={what}");
        let mut args = vec!["req", "-nodes", "-subj", &subject];
        args.extend(EC);
        args.extend(["-keyout", path_str(&key), "-out", path_str(&csr)]);
        openssl(&self.dir, &args);
        let ext = self.dir.join(format!("{}-{what}.ext", self.name));
        std::fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
             extendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        let days = days.to_string();
        let (ca_crt, ca_key) = (self.crt("ca"), self.key("ca"));
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                path_str(&csr),
                "-CA",
                path_str(&ca_crt),
                "-CAkey",
                path_str(&ca_key),
                "-CAcreateserial",
                "-days",
                &days,
                "-extfile",
                path_str(&ext),
                "-out",
                path_str(&crt),
            ],
        );
    }

    pub fn crt(&self, what: &str) -> PathBuf {
        self.dir.join(format!("{}-{what}.crt", self.name))
    }

    pub fn key(&self, what: &str) -> PathBuf {
        self.dir.join(format!("{}-{what}.key", self.name))
    }

    /// redis-server's TLS arguments: a TLS port `port`, this CA's server
    /// certificate (or `server`), client certificates required or not.
    pub fn server_args(&self, server: &str, port: u16, auth_clients: bool) -> Vec<String> {
        let auth = if auth_clients { "yes" } else { "no" };
        [
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            path_str(&self.crt(server)),
            "--tls-key-file",
            path_str(&self.key(server)),
            "--tls-ca-cert-file",
            path_str(&self.crt("ca")),
            "--tls-auth-clients",
            auth,
        ]
        .map(str::to_string)
        .to_vec()
    }
}

/// A redis-server with a TLS port (and its plaintext one, for the test).
pub struct TlsRedis {
    pub server: RedisServer,
    pub tls_port: u16,
}

impl TlsRedis {
    /// TLS with `certs`' server certificate `server`; client certificates
    /// required when `auth_clients`.
    pub fn start(certs: &Certs, server: &str, auth_clients: bool) -> TlsRedis {
        Self::start_on(certs, server, auth_clients, free_port())
    }

    /// The same on TLS port `tls_port` (a restart with new certificates).
    pub fn start_on(certs: &Certs, server: &str, auth_clients: bool, tls_port: u16) -> TlsRedis {
        let args = certs.server_args(server, tls_port, auth_clients);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = RedisServer::start_with(&args);
        TlsRedis { server, tls_port }
    }

    /// `rediss://127.0.0.1:<tls port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}

/// Test settings (port 0, no process environment) for `url`, with
/// `[redis.tls]` given the way an operator does in a container: as
/// `RATEKEEPER_REDIS__<KEY>` variables (`("TLS__CA_FILE", path)`).
pub fn tls_settings(url: &str, tls: &[(&str, &Path)]) -> Result<Settings, ConfigError> {
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".into()),
        redis_url: Some(url.to_string()),
        ..Default::default()
    };
    let vars: std::collections::HashMap<String, String> = tls
        .iter()
        .map(|(key, path)| {
            let name = format!("RATEKEEPER_REDIS__{key}");
            (name, path_str(path).to_string())
        })
        .collect();
    let env = config::Environment::default().source(Some(vars.into_iter().collect()));
    Settings::load_from(&overrides, env)
}

/// [`tls_settings`] with the CA, and the client certificate of `certs`
/// when `client`.
pub fn settings_for(url: &str, certs: &Certs, client: bool) -> Settings {
    let (ca, crt, key) = (certs.crt("ca"), certs.crt("client"), certs.key("client"));
    let mut vars: Vec<(&str, &Path)> = vec![("TLS__CA_FILE", &ca)];
    if client {
        vars.extend([
            ("TLS__CERT_FILE", crt.as_path()),
            ("TLS__KEY_FILE", key.as_path()),
        ]);
    }
    tls_settings(url, &vars).expect("valid TLS settings")
}

/// An HTTP/1.1 connection over TLS to one of our listeners, kept open
/// across requests (to show a rotation does not drop it), with the
/// certificate the server presented.
pub struct TlsConnection {
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    /// The server's leaf certificate, DER.
    pub peer: Vec<u8>,
}

impl TlsConnection {
    /// Connects to `addr` trusting `ca`, presenting `client` (certificate
    /// and key) when given; `Err` names what failed (the handshake's
    /// error).
    pub async fn open(
        addr: &str,
        ca: &Path,
        client: Option<(&Path, &Path)>,
    ) -> Result<TlsConnection, String> {
        let stream = handshake(addr, ca, client, None).await?;
        let peer = stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        // TLS 1.3: a refused client certificate shows at the first read.
        let mut connection = TlsConnection { stream, peer };
        connection.get("/healthz").await?;
        Ok(connection)
    }

    /// `GET path` on this connection: its status and body.
    pub async fn get(&mut self, path: &str) -> Result<(u16, String), String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n");
        let stream = &mut self.stream;
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("closed by the server".into());
            }
            got.extend_from_slice(&buf[..n]);
            if let Some(answer) = whole_response(&got) {
                return Ok(answer);
            }
        }
    }
}

/// A whole HTTP/1.1 response with a content-length, once it is all there.
fn whole_response(got: &[u8]) -> Option<(u16, String)> {
    let text = std::str::from_utf8(got).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    (body.len() >= length).then(|| (status, body.to_string()))
}

/// A PEM certificate file's first certificate, DER.
pub fn der_of(crt: &Path) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_file(crt).unwrap().to_vec()
}

/// The leaf certificate (DER) a TLS listener at `addr` presents now, from a
/// handshake alone, trusting `ca` and offering ALPN `h2` (the gRPC
/// listener's); nothing is sent after it.
pub async fn peer_of(addr: &str, ca: &Path) -> Result<Vec<u8>, String> {
    let stream = handshake(addr, ca, None, Some(b"h2")).await?;
    Ok(stream.get_ref().1.peer_certificates().unwrap()[0].to_vec())
}

/// A TLS handshake with `addr` as `localhost`, trusting `ca`, presenting
/// `client` (certificate and key) and offering `alpn` when given; `Err`
/// names what failed.
async fn handshake(
    addr: &str,
    ca: &Path,
    client: Option<(&Path, &Path)>,
    alpn: Option<&[u8]>,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    // ring, as the service uses (its post-quantum deprecation is moot here).
    #[allow(deprecated)]
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.map(<[u8]>::to_vec).into_iter().collect();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}
