//! Envoy's rate limit service (RLS v3) over gRPC: loading the
//! envoyproxy/ratelimit YAML files, the tonic server ([`server`]), its
//! bounded connections ([`listener`]), and its bearer-token check
//! ([`auth`]).

pub mod auth;
pub mod listener;
pub mod reload;
pub mod server;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::domain::Bounds;
use crate::domain::rls::{RlsConfig, parse_domain};

/// The largest config file read: bounds memory on a wrong path.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

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
    files_of(path)?
        .into_iter()
        .map(|file| read(&file).map(|text| (file, text)))
        .collect()
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
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    })
}

/// One file's text, at most `MAX_FILE_BYTES`.
fn read(file: &Path) -> Result<String, RlsLoadError> {
    let size = std::fs::metadata(file)
        .map_err(|e| file_error(file, e.to_string()))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(file_error(
            file,
            format!("larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    std::fs::read_to_string(file).map_err(|e| file_error(file, e.to_string()))
}
