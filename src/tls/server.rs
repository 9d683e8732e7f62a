//! TLS on our own listeners (`[server.tls]`, `[grpc.tls]`): the rustls
//! `ServerConfig` each new connection's handshake uses, rebuilt whole when
//! a file changes. A connection keeps the config it was accepted with, so
//! a rotation reaches new handshakes and drops no open connection.
//!
//! With `client_ca_file`, a client must present a certificate that CA
//! signed (mTLS): one without, or with another, fails the handshake.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;

use super::{
    LastRead, PairKeys, Reloaded, TlsFileError, ca_roots, certified_key, hash_of, problem, provider,
};

/// One listener's TLS files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// The CA (PEM) client certificates must chain to; `None`: no client
    /// certificate is asked for.
    pub client_ca_file: Option<PathBuf>,
}

/// Which listener: the keys its errors name, and what its clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The HTTP API: HTTP/1.1.
    Http,
    /// The Envoy RLS: gRPC, HTTP/2 (offered by ALPN, as gRPC clients
    /// require).
    Grpc,
}

impl Listener {
    /// The `listener` label of the metrics, as the listeners' own.
    pub fn label(self) -> &'static str {
        match self {
            Listener::Http => "http",
            Listener::Grpc => "grpc",
        }
    }

    /// Its `cert_file`, `key_file` and `client_ca_file` keys: the one
    /// place they are named (the config reader asks for them by these).
    pub fn keys(self) -> [&'static str; 3] {
        match self {
            Listener::Http => [
                "server.tls.cert_file",
                "server.tls.key_file",
                "server.tls.client_ca_file",
            ],
            Listener::Grpc => [
                "grpc.tls.cert_file",
                "grpc.tls.key_file",
                "grpc.tls.client_ca_file",
            ],
        }
    }

    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Listener::Http => vec![b"http/1.1".to_vec()],
            Listener::Grpc => vec![b"h2".to_vec()],
        }
    }
}

/// The TLS of one listener: the config in force and the files it is
/// re-read from.
pub struct ServerTls {
    listener: Listener,
    files: ServerTlsFiles,
    config: ArcSwap<ServerConfig>,
    loaded: LastRead,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("listener", &self.listener)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// The bytes of the certificate, key and client CA files.
type FileBytes = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

impl ServerTls {
    /// Reads and checks every file; an error names the key at fault.
    pub fn load(listener: Listener, files: ServerTlsFiles) -> Result<ServerTls, TlsFileError> {
        let (bytes, hash) = read_files(listener, &files)?;
        let config = build(listener, &files, &bytes)?;
        Ok(ServerTls {
            listener,
            files,
            config: ArcSwap::from_pointee(config),
            loaded: LastRead::new(hash),
        })
    }

    /// The config a new connection's handshake uses.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.load_full()
    }

    pub fn listener(&self) -> Listener {
        self.listener
    }

    /// Whether a client must present a certificate (mTLS).
    pub fn asks_client_certificates(&self) -> bool {
        self.files.client_ca_file.is_some()
    }

    /// The files, each with the key that named it.
    pub fn paths(&self) -> Vec<(&'static str, &Path)> {
        let [cert, key, ca] = self.listener.keys();
        let mut paths = vec![
            (cert, self.files.cert_file.as_path()),
            (key, self.files.key_file.as_path()),
        ];
        if let Some(path) = &self.files.client_ca_file {
            paths.push((ca, path.as_path()));
        }
        paths
    }

    /// Re-reads the files; swaps in a new config when they changed and
    /// parse. `forced` re-judges bytes already refused. Blocking IO.
    pub fn reload(&self, forced: bool) -> Result<Reloaded, TlsFileError> {
        self.loaded.reload(
            forced,
            || read_files(self.listener, &self.files),
            |bytes| build(self.listener, &self.files, bytes),
            |config| self.config.store(Arc::new(config)),
        )
    }
}

fn read_files(
    listener: Listener,
    files: &ServerTlsFiles,
) -> Result<(FileBytes, u64), TlsFileError> {
    let [cert, key, ca] = listener.keys();
    let bytes = (
        super::read(cert, &files.cert_file)?,
        super::read(key, &files.key_file)?,
        files
            .client_ca_file
            .as_deref()
            .map(|p| super::read(ca, p))
            .transpose()?,
    );
    let hash = hash_of(&bytes);
    Ok((bytes, hash))
}

fn build(
    listener: Listener,
    files: &ServerTlsFiles,
    (cert, key, ca): &FileBytes,
) -> Result<ServerConfig, TlsFileError> {
    let [cert_key, key_key, ca_key] = listener.keys();
    let keys = PairKeys {
        cert: cert_key,
        key: key_key,
    };
    let certified = certified_key(keys, &files.cert_file, cert, key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| problem(cert_key, e.to_string()))?;
    let builder = match ca {
        Some(pem) => {
            let roots = Arc::new(ca_roots(ca_key, pem)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| problem(ca_key, format!("cannot be used: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(certified));
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = listener.alpn();
    Ok(config)
}
