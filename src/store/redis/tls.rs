//! TLS to Redis (`rediss://`): one rustls `ClientConfig` for every
//! connection fred makes (the pool, each cluster node's pool, the
//! sentinels, the invalidation subscriber), whose parts can change under it.
//!
//! Why not a new `ClientConfig` per change: fred keeps the connector it was
//! built with for the life of a client, and rebuilding every client would
//! drop every connection. Instead the config's certificate verifier and
//! client-certificate resolver read the current CA and client certificate
//! through an `ArcSwap`, so a connection made after a swap uses the new
//! files, and connections already open keep working.
//!
//! How the files are read and judged is `crate::tls`'s, shared with our
//! own listeners.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::tls::{LastRead, PairKeys, ca_roots, certified_key, hash_of, problem, provider};
pub use crate::tls::{Reloaded, TlsFileError};

/// The `[redis.tls]` settings: paths, and the name to verify.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// A CA bundle (PEM); `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate chain (PEM), for servers that require one.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key_file: Option<PathBuf>,
    /// The name the server's certificate must hold, when it differs from
    /// the host in the URL (an IP address, say).
    pub server_name: Option<String>,
}

impl TlsFiles {
    /// The paths given, each with the key that named it.
    pub fn paths(&self) -> Vec<(&'static str, &Path)> {
        [
            ("redis.tls.ca_file", &self.ca_file),
            ("redis.tls.cert_file", &self.cert_file),
            ("redis.tls.key_file", &self.key_file),
        ]
        .into_iter()
        .filter_map(|(key, path)| path.as_deref().map(|p| (key, p)))
        .collect()
    }
}

/// Whether `url` asks for TLS: the schemes fred 10.1 connects with TLS.
pub fn url_uses_tls(url: &str) -> bool {
    ["rediss://", "rediss-cluster://", "rediss-sentinel://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
}

/// The material of one load: what verifies the server, what we present.
struct Material {
    verifier: Arc<WebPkiServerVerifier>,
    client: Option<Arc<CertifiedKey>>,
}

/// What the verifier and the resolver share with [`TlsClient`].
#[derive(Debug)]
struct Current {
    material: ArcSwap<Material>,
    server_name: Option<ServerName<'static>>,
    /// Fixed at startup: whether a client certificate was configured.
    has_client_cert: bool,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material")
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}

/// The TLS side of the Redis client: the config fred connects with, and
/// the files it is re-read from.
pub struct TlsClient {
    files: TlsFiles,
    current: Arc<Current>,
    config: Arc<ClientConfig>,
    /// What was last read, to skip unchanged bytes.
    loaded: LastRead,
}

impl TlsClient {
    /// Reads and checks every file; an error names the key at fault.
    pub fn load(files: TlsFiles) -> Result<TlsClient, TlsFileError> {
        let server_name = match &files.server_name {
            Some(name) => Some(ServerName::try_from(name.clone()).map_err(|_| {
                problem(
                    "redis.tls.server_name",
                    "is not a valid DNS name or IP address",
                )
            })?),
            None => None,
        };
        let (bytes, hash) = read_files(&files)?;
        let material = parse(&files, &bytes)?;
        let current = Arc::new(Current {
            has_client_cert: material.client.is_some(),
            material: ArcSwap::from_pointee(material),
            server_name,
        });
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| problem("redis.tls", e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier(current.clone())))
            .with_client_cert_resolver(Arc::new(ClientCert(current.clone())));
        Ok(TlsClient {
            files,
            current,
            config: Arc::new(config),
            loaded: LastRead::new(hash),
        })
    }

    /// The config fred's connector is built from.
    pub fn fred_config(&self) -> fred::types::config::TlsConfig {
        let connector = connector(self.config.clone());
        fred::types::config::TlsConfig {
            connector,
            hostnames: fred::types::config::TlsHostMapping::None,
        }
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Re-reads the files; swaps in changed ones that parse. `forced`
    /// re-judges bytes already refused. Blocking IO.
    pub fn reload(&self, forced: bool) -> Result<Reloaded, TlsFileError> {
        // The paths are fixed at startup, so a client certificate is
        // there after a reload exactly when it was before.
        self.loaded.reload(
            forced,
            || read_files(&self.files),
            |bytes| parse(&self.files, bytes),
            |material| self.current.material.store(Arc::new(material)),
        )
    }
}

fn connector(config: Arc<ClientConfig>) -> fred::types::config::TlsConnector {
    // fred's From<ClientConfig> wants the config by value; a clone shares
    // the verifier and resolver (both `Arc`s), so swaps still reach it.
    fred::types::config::TlsConnector::from((*config).clone())
}

/// The bytes of the CA, certificate and key files, `None` where none is set.
type FileBytes = [Option<Vec<u8>>; 3];

/// The bytes of each configured file, and one hash of them all.
fn read_files(files: &TlsFiles) -> Result<(FileBytes, u64), TlsFileError> {
    let read = |key: &'static str, path: &Option<PathBuf>| {
        path.as_ref().map(|p| crate::tls::read(key, p)).transpose()
    };
    let bytes = [
        read("redis.tls.ca_file", &files.ca_file)?,
        read("redis.tls.cert_file", &files.cert_file)?,
        read("redis.tls.key_file", &files.key_file)?,
    ];
    let hash = hash_of(&bytes);
    Ok((bytes, hash))
}

fn parse(files: &TlsFiles, bytes: &FileBytes) -> Result<Material, TlsFileError> {
    let roots = match &bytes[0] {
        Some(pem) => ca_roots("redis.tls.ca_file", pem)?,
        None => system_roots()?,
    };
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| problem("redis.tls.ca_file", format!("cannot be used: {e}")))?;
    let client = match (&bytes[1], &bytes[2]) {
        (Some(cert), Some(key)) => Some(Arc::new(client_cert(files, cert, key)?)),
        _ => None,
    };
    Ok(Material { verifier, client })
}

fn system_roots() -> Result<RootCertStore, TlsFileError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(problem(
            "redis.tls.ca_file",
            "is not set and the system has no CA certificates: set it to the CA bundle",
        ));
    }
    Ok(roots)
}

fn client_cert(files: &TlsFiles, cert: &[u8], key: &[u8]) -> Result<CertifiedKey, TlsFileError> {
    let keys = PairKeys {
        cert: "redis.tls.cert_file",
        key: "redis.tls.key_file",
    };
    let path = files.cert_file.as_deref().unwrap_or(Path::new(""));
    certified_key(keys, path, cert, key)
}

/// Verifies with the current CA, against `redis.tls.server_name` if set.
#[derive(Debug)]
struct Verifier(Arc<Current>);

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = self.0.server_name.as_ref().unwrap_or(server_name);
        self.0.material.load().verifier.verify_server_cert(
            end_entity,
            intermediates,
            name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let material = self.0.material.load();
        material.verifier.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let material = self.0.material.load();
        material.verifier.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.material.load().verifier.supported_verify_schemes()
    }
}

/// Presents the current client certificate, if one is configured.
#[derive(Debug)]
struct ClientCert(Arc<Current>);

impl ResolvesClientCert for ClientCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.0.material.load().client.clone()
    }

    fn has_certs(&self) -> bool {
        self.0.has_client_cert
    }
}
