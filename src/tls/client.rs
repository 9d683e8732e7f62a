//! The TLS client of the operator commands (`ratekeeper check`, `top`,
//! `override`...) for an instance whose HTTP listener has `[server.tls]`:
//! the server verified against a CA file (no system roots: the listener's
//! certificate is the operator's own CA's), and a client certificate for
//! mTLS. Files are read once, through the same bounded reader as the
//! service's.

use std::path::Path;

use rustls::ClientConfig;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;

use super::{PairKeys, TlsFileError, ca_roots, certified_key, problem, provider, read};

/// The flags the files came from, named in errors.
const CA: &str = "--ca-file";
const PAIR: PairKeys = PairKeys {
    cert: "--cert-file",
    key: "--key-file",
};

/// A client config trusting `ca`, presenting `pair` (certificate, key)
/// when given.
pub(crate) fn config(
    ca: &Path,
    pair: Option<(&Path, &Path)>,
) -> Result<ClientConfig, TlsFileError> {
    let roots = ca_roots(CA, &read(CA, ca)?)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| problem(CA, e.to_string()))?
        .with_root_certificates(roots);
    let Some((cert_path, key_path)) = pair else {
        return Ok(builder.with_no_client_auth());
    };
    let (cert, key) = (read(PAIR.cert, cert_path)?, read(PAIR.key, key_path)?);
    // Judged as the service judges its own pair: they must belong together.
    let chain = certified_key(PAIR, cert_path, &cert, &key)?.cert;
    let der = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|_| problem(PAIR.key, "holds no PEM private key"))?;
    builder
        .with_client_auth_cert(chain, der)
        .map_err(|_| problem(PAIR.key, "is not a usable private key"))
}
