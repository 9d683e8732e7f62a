//! Envoy's rate limit service (RLS v3) over gRPC: loading the
//! envoyproxy/ratelimit YAML files, the tonic server ([`server`]: the
//! answers; [`service`]: the gRPC method, decoding with [`wire`]'s types),
//! its bounded connections ([`listener`]), and its bearer-token check
//! ([`auth`]).

pub mod auth;
pub mod listener;
pub mod reload;
pub mod serve;
pub mod server;
pub mod service;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::domain::Bounds;
use crate::domain::rls::{RlsConfig, parse_domain};
use crate::watch::source::{Files, FilesError, Snapshot, Source};

/// The largest config file read, the cap of every watched file. A real
/// domain's descriptors take kilobytes (envoyproxy/ratelimit's examples
/// are under 2 KiB), and a Kubernetes ConfigMap holds at most 1 MiB.
const MAX_FILE_BYTES: u64 = crate::watch::read::MAX_FILE_BYTES;

/// The most config files a directory may hold (one domain each) ...
const MAX_FILES: usize = 256;

/// ... and the most bytes they may hold together: what one reload reads
/// and parses stays bounded whatever the directory holds.
const MAX_TOTAL_BYTES: u64 = 4 * MAX_FILE_BYTES;

/// A problem loading `rls.config`; always names the file.
#[derive(Debug, thiserror::Error)]
pub enum RlsLoadError {
    #[error("rls.config {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error(
        "rls.config {path} now holds no domains while {in_force} are in force; \
         send SIGHUP to load it anyway"
    )]
    WouldEmpty { path: PathBuf, in_force: usize },
}

fn file_error(path: &Path, message: impl Into<String>) -> RlsLoadError {
    RlsLoadError::File {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Loads a file, or every `*.yaml`/`*.yml` file of a directory (sorted,
/// hidden ones skipped: a Kubernetes ConfigMap's `..data` links). One domain
/// per file; a domain in two files is an error.
pub fn load(path: &Path, bounds: &Bounds) -> Result<RlsConfig, RlsLoadError> {
    parse_all(&FILES.read(path).map_err(read_error)?, bounds)
}

/// What `rls.config` names: a file, or a directory of them. Each file is
/// read by the reader of every watched file: a FIFO (`mkfifo evil.yaml` in
/// the directory) or a device (a link to `/dev/zero`) is refused, never
/// waited on or read without end. Refused, not skipped: the version is
/// rejected and the config in force stays, as for a broken file, rather
/// than losing that file's domain without a word.
pub(crate) const FILES: Files = Files {
    extensions: &["yaml", "yml"],
    max_files: MAX_FILES,
    max_total_bytes: MAX_TOTAL_BYTES,
};

pub(crate) fn read_error(e: FilesError) -> RlsLoadError {
    file_error(&e.path, e.reason.to_string())
}

pub(crate) fn parse_all(files: &Snapshot, bounds: &Bounds) -> Result<RlsConfig, RlsLoadError> {
    let mut config = RlsConfig::default();
    for (file, bytes) in files {
        let text = std::str::from_utf8(bytes).map_err(|_| file_error(file, "is not UTF-8 text"))?;
        let domain = parse_domain(text, bounds).map_err(|e| file_error(file, e))?;
        if config.domains.contains_key(&domain.name) {
            return Err(file_error(
                file,
                format!("domain {:?} is also defined in another file", domain.name),
            ));
        }
        config.domains.insert(Arc::clone(&domain.name), domain);
    }
    Ok(config)
}
