//! The policies file at the edge: reading it (bounded, following symlinks),
//! judging it with [`PolicySet::parse`]: the parser the policies file's
//! [`HotFile`] plugs in, which swaps it in whole and is watched for changes
//! ([`crate::watch`]).
//!
//! A file that cannot be read or fails validation is rejected whole: the
//! set in force stays, the error is logged with its line and column, and
//! `ratekeeper_reloads_total{file="policies",result="error"}` counts it. So is a
//! path that is not a regular file, and a file with no policies at all
//! while some are in force, unless SIGHUP asked for it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use tracing::{error, info};

use crate::domain::{Bounds, PolicyFileError, PolicySet};
use crate::metrics::Metrics;
use crate::watch::hot::{HotFile, Parse};
use crate::watch::read::{ReadError, read_regular};
use crate::watch::source::{File, FileRead};

/// The largest policies file read: parsing stays cheap, and a wrong path
/// (a log file, say) is refused rather than read whole.
pub const MAX_FILE_BYTES: u64 = crate::watch::read::MAX_FILE_BYTES;

/// Why a policies file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read the policies file {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("the policies file {path} is {kind}; it must be a regular file")]
    NotAFile { path: String, kind: &'static str },
    #[error(
        "the policies file {path} is larger than {MAX_FILE_BYTES} bytes (1 MiB); is it the right file?"
    )]
    TooLarge { path: String },
    #[error("the policies file {path} is not UTF-8 text: {source}")]
    NotUtf8 {
        path: String,
        source: std::str::Utf8Error,
    },
    #[error(
        "the policies file {path} now holds no policies while {in_force} are in force; \
         send SIGHUP to load it anyway"
    )]
    WouldEmpty { path: String, in_force: usize },
    #[error("invalid policies file {path}: {source}")]
    Invalid {
        path: String,
        source: PolicyFileError,
    },
}

/// The file's bytes, at most [`MAX_FILE_BYTES`], by the reader of every
/// watched file ([`read_regular`]: a regular file only, non-blocking, so
/// a FIFO or a device at the path cannot block every later reload).
/// Opening the path follows symlinks, so a Kubernetes ConfigMap mount
/// (`policies.toml -> ..data/policies.toml`) reads the version `..data`
/// points at now.
pub fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    read_regular(path, MAX_FILE_BYTES).map_err(|e| read_error(path, e))
}

fn read_error(path: &Path, e: ReadError) -> LoadError {
    let path = path.display().to_string();
    match e {
        ReadError::Io(source) => LoadError::Read { path, source },
        ReadError::NotAFile(kind) => LoadError::NotAFile { path, kind },
        ReadError::TooLarge(_) => LoadError::TooLarge { path },
    }
}

/// Parses `bytes` read from `path` into a set stamped with `loaded_at`.
pub fn parse(
    path: &Path,
    bytes: &[u8],
    bounds: &Bounds,
    loaded_at: SystemTime,
) -> Result<PolicySet, LoadError> {
    let shown = || path.display().to_string();
    let text = std::str::from_utf8(bytes).map_err(|source| LoadError::NotUtf8 {
        path: shown(),
        source,
    })?;
    let mut set =
        PolicySet::parse(text, bounds, Some(loaded_at)).map_err(|source| LoadError::Invalid {
            path: shown(),
            source,
        })?;
    set.source = Some(shown());
    Ok(set)
}

/// Reads and parses the file at `path` (the startup load, and
/// `ratekeeper policies check`).
pub fn load(path: &Path, bounds: &Bounds) -> Result<PolicySet, LoadError> {
    parse(path, &read(path)?, bounds, SystemTime::now())
}

pub use crate::watch::hot::ReloadOutcome;

/// The policies file as a hot file: a [`HotFile`] of [`PolicyFile`].
pub type Reloader = HotFile<PolicyFile>;

/// The hot file of the policies at `path`, swapped into `policies`.
pub fn reloader(
    path: PathBuf,
    bounds: Bounds,
    policies: Arc<ArcSwap<PolicySet>>,
    metrics: Arc<Metrics>,
) -> Reloader {
    let counted = metrics.reloads.policies.clone();
    HotFile::new(path, PolicyFile { bounds, metrics }, policies, counted)
}

/// How the policies file is judged: [`parse`], within `bounds`.
pub struct PolicyFile {
    bounds: Bounds,
    metrics: Arc<Metrics>,
}

impl Parse for PolicyFile {
    type Source = File;
    type Value = PolicySet;
    type Error = LoadError;
    const WHAT: &'static str = "policies file";
    const SOURCE: File = File;

    fn unreadable(&self, path: &Path, error: ReadError) -> LoadError {
        read_error(path, error)
    }

    fn parse(&self, path: &Path, read: &FileRead) -> Result<PolicySet, LoadError> {
        parse(path, &read.bytes, &self.bounds, SystemTime::now())
    }

    fn count(set: &PolicySet) -> usize {
        set.len()
    }

    /// An empty file is more often one caught half-written (`cat new >
    /// policies.toml` truncates first) than a wish to answer every policy
    /// check with `unknown_policy`.
    fn would_empty(&self, path: &Path, in_force: usize) -> Option<LoadError> {
        Some(LoadError::WouldEmpty {
            path: path.display().to_string(),
            in_force,
        })
    }

    fn loaded_at(&self, set: &PolicySet) -> SystemTime {
        set.loaded_at.unwrap_or_else(SystemTime::now)
    }

    /// Every decision series of the new set exists before a check counts one.
    fn before_swap(&self, set: &PolicySet) {
        self.metrics.decisions.policy_series(set);
    }

    fn installed(&self, path: &Path, set: &PolicySet, _: &FileRead) {
        let (n, sha) = (set.len(), &set.sha256);
        self.metrics.decisions.policies_in_force(set);
        info!(
            file = %path.display(),
            policies = n,
            with_levels = set.hierarchies().count(),
            sha256 = %sha,
            "loaded {n} policies from {} (sha256 {})",
            path.display(),
            &sha[..12.min(sha.len())]
        );
    }

    fn rejected(&self, path: &Path, e: &LoadError) {
        error!(
            file = %path.display(),
            "policies file rejected; the policies in force stay: {e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policies file goes through the shared reader: a FIFO and a link
    /// to a device are refused, with what they are, and never read.
    #[test]
    fn a_fifo_or_a_device_is_refused() {
        let dir = std::env::temp_dir().join(format!("rk-policies-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let zero = dir.join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (path, kind) in [(fifo, "a FIFO"), (zero, "a device")] {
            let err = read(&path).unwrap_err();
            assert!(
                matches!(err, LoadError::NotAFile { kind: k, .. } if k == kind),
                "{err}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
