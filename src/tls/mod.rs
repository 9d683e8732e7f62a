//! TLS material read from files, for both ends we speak TLS on: the Redis
//! client (`store::redis::tls`) and our own listeners ([`server`]).
//!
//! Files are read by the watched files' reader (regular files only,
//! capped) and judged whole: a certificate and its key change together. A
//! file that does not parse keeps the last good material; at startup it
//! stops the service (exit 64, naming the key). Errors name the key and
//! the file, never a key's bytes or a parser's view of them.
//!
//! Why rustls with ring: it builds with only a C compiler, and the
//! distroless image has no OpenSSL to link against.

pub(crate) mod client;
pub(crate) mod probe;
pub mod server;

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::watch::read::{MAX_FILE_BYTES, read_regular};

/// A file that cannot be used, named by its key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{key}: {message}")]
pub struct TlsFileError {
    pub key: &'static str,
    pub message: String,
}

pub(crate) fn problem(key: &'static str, message: impl Into<String>) -> TlsFileError {
    TlsFileError {
        key,
        message: message.into(),
    }
}

/// What a re-read of a set of TLS files did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    Unchanged,
    Swapped,
    /// The same bad bytes as last time: already reported.
    StillRefused,
}

/// ring (see the module doc). rustls 0.23.48 deprecates its default
/// provider for lacking post-quantum key exchange; Redis 7's OpenSSL 3.0
/// offers none either, so nothing is lost yet.
#[allow(deprecated)]
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The bytes of the file `key` names, within the watched files' cap.
pub(crate) fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    read_regular(path, MAX_FILE_BYTES)
        .map_err(|e| problem(key, format!("cannot read {}: {e}", path.display())))
}

pub(crate) fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Every certificate of a PEM file; at least one.
pub(crate) fn certificates(
    key: &'static str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| problem(key, format!("is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(problem(key, "holds no PEM CERTIFICATE block"));
    }
    Ok(certs)
}

/// A CA bundle as trust roots, every certificate of it usable.
pub(crate) fn ca_roots(key: &'static str, pem: &[u8]) -> Result<RootCertStore, TlsFileError> {
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(certificates(key, pem)?);
    if ignored > 0 {
        return Err(problem(
            key,
            format!("{ignored} certificate(s) in it cannot be parsed"),
        ));
    }
    Ok(roots)
}

/// The keys naming a certificate chain and its private key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PairKeys {
    pub cert: &'static str,
    pub key: &'static str,
}

/// A certificate chain and its private key, checked to belong together.
pub(crate) fn certified_key(
    keys: PairKeys,
    cert_path: &Path,
    cert: &[u8],
    key: &[u8],
) -> Result<CertifiedKey, TlsFileError> {
    let chain = certificates(keys.cert, cert)?;
    // Never quote the key's bytes or the parser's view of them.
    let der = PrivateKeyDer::from_pem_slice(key)
        .map_err(|_| problem(keys.key, "holds no PEM private key"))?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|_| problem(keys.key, "is not a usable private key"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|_| {
        let cert = cert_path.display();
        problem(keys.key, format!("is not the key of {cert}"))
    })?;
    Ok(certified)
}

/// A hash of the bytes last swapped in, and of the bytes (or the read
/// error) last refused, so an unchanged file is neither re-parsed nor
/// re-reported at every poll.
pub(crate) struct LastRead(std::sync::Mutex<(u64, Option<u64>)>);

impl LastRead {
    pub(crate) fn new(hash: u64) -> LastRead {
        LastRead(std::sync::Mutex::new((hash, None)))
    }

    /// Re-reads with `read` (the bytes and their hash), and when they
    /// changed, judges them with `parse` and hands what it made to
    /// `install`. `forced` re-judges bytes already refused.
    pub(crate) fn reload<B, M>(
        &self,
        forced: bool,
        read: impl FnOnce() -> Result<(B, u64), TlsFileError>,
        parse: impl FnOnce(&B) -> Result<M, TlsFileError>,
        install: impl FnOnce(M),
    ) -> Result<Reloaded, TlsFileError> {
        let mut loaded = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (bytes, hash) = match read() {
            Ok(read) => read,
            // A file gone or unreadable: reported once, like bad bytes.
            Err(e) => {
                let hash = hash_of(&e.to_string());
                if loaded.1 == Some(hash) && !forced {
                    return Ok(Reloaded::StillRefused);
                }
                loaded.1 = Some(hash);
                return Err(e);
            }
        };
        if hash == loaded.0 {
            loaded.1 = None;
            return Ok(Reloaded::Unchanged);
        }
        if loaded.1 == Some(hash) && !forced {
            return Ok(Reloaded::StillRefused);
        }
        match parse(&bytes) {
            Ok(made) => {
                install(made);
                *loaded = (hash, None);
                Ok(Reloaded::Swapped)
            }
            Err(e) => {
                loaded.1 = Some(hash);
                Err(e)
            }
        }
    }
}
