//! `[server.tls]` and `[grpc.tls]`: TLS on our own listeners. Off unless
//! `cert_file` is set; then `key_file` must be too, and every file is read
//! and checked now, so a bad one stops startup naming its key.

use std::sync::Arc;

use super::reader::Reader;
use crate::tls::server::{Listener, ServerTls, ServerTlsFiles};

/// The listener's TLS, `Some(None)` when off; `None` after a problem
/// (recorded on `r`).
pub(super) fn read(r: &mut Reader, listener: Listener) -> Option<Option<Arc<ServerTls>>> {
    let [cert_key, key_key, ca_key] = listener.keys();
    // Every key asked for before any `?`: one left unasked would be unknown.
    let cert_file = r.path(cert_key);
    let key_file = r.path(key_key);
    let client_ca_file = r.path(ca_key);
    let (cert_file, key_file, client_ca_file) = (cert_file?, key_file?, client_ca_file?);
    let mut refuse = |key: &str, m: &str| {
        r.problem(key, m);
        None
    };
    let (cert_file, key_file) = match (cert_file, key_file) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) if client_ca_file.is_some() => {
            return refuse(ca_key, "needs cert_file and key_file: mTLS is TLS first");
        }
        (None, None) => return Some(None),
        (Some(_), None) => return refuse(key_key, "must be set with cert_file"),
        (None, Some(_)) => return refuse(cert_key, "must be set with key_file"),
    };
    let files = ServerTlsFiles {
        cert_file,
        key_file,
        client_ca_file,
    };
    match ServerTls::load(listener, files) {
        Ok(tls) => Some(Some(Arc::new(tls))),
        Err(e) => refuse(e.key, &e.message),
    }
}
