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
use crate::watch::read::read_regular;

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
    parse_all(&snapshot(path)?, bounds)
}

/// Every config file's path and text, as they are now.
pub(crate) type Snapshot = Vec<(PathBuf, String)>;

pub(crate) fn snapshot(path: &Path) -> Result<Snapshot, RlsLoadError> {
    let mut total = 0;
    let mut files = Vec::new();
    for file in files_of(path)? {
        let text = read(&file)?;
        total += text.len() as u64;
        if total > MAX_TOTAL_BYTES {
            return Err(file_error(
                path,
                format!("its files hold more than {MAX_TOTAL_BYTES} bytes together"),
            ));
        }
        files.push((file, text));
    }
    Ok(files)
}

pub(crate) fn parse_all(files: &Snapshot, bounds: &Bounds) -> Result<RlsConfig, RlsLoadError> {
    let mut config = RlsConfig::default();
    for (file, text) in files {
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

/// The config files `path` names: itself, or a directory's YAML files.
fn files_of(path: &Path) -> Result<Vec<PathBuf>, RlsLoadError> {
    let meta = std::fs::metadata(path).map_err(|e| file_error(path, e.to_string()))?;
    Ok(if meta.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| file_error(path, e.to_string()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
            })
            .take(MAX_FILES + 1)
            .collect();
        if files.len() > MAX_FILES {
            return Err(file_error(
                path,
                format!("more than {MAX_FILES} *.yaml/*.yml files"),
            ));
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    })
}

/// One file's text, at most `MAX_FILE_BYTES`, by the reader of every
/// watched file: a FIFO (`mkfifo evil.yaml` in the directory) or a device
/// (a link to `/dev/zero`) is refused, never waited on or read without
/// end. Refused, not skipped: the version is rejected and the config in
/// force stays, as for a broken file, rather than losing that file's
/// domain without a word.
fn read(file: &Path) -> Result<String, RlsLoadError> {
    let bytes = read_regular(file, MAX_FILE_BYTES).map_err(|e| file_error(file, e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| file_error(file, "is not UTF-8 text"))
}
