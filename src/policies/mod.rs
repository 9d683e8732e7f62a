//! The policies file at the edge: reading it (bounded, following symlinks),
//! judging it with [`PolicySet::parse`], swapping it in whole, and watching
//! it for changes ([`crate::watch`]).
//!
//! A file that cannot be read or fails validation is rejected whole: the
//! set in force stays, the error is logged with its line and column, and
//! `ratekeeper_reloads_total{file="policies",result="error"}` counts it. So is a
//! path that is not a regular file, and a file with no policies at all
//! while some are in force, unless SIGHUP asked for it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use tracing::{error, info};

use crate::domain::policy::sha256_hex;
use crate::domain::{Bounds, PolicyFileError, PolicySet};
use crate::metrics::Metrics;
use crate::watch::read::{ReadError, read_regular};

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
    let path_shown = path.display().to_string();
    read_regular(path, MAX_FILE_BYTES).map_err(|e| match e {
        ReadError::Io(source) => LoadError::Read {
            path: path_shown,
            source,
        },
        ReadError::NotAFile(kind) => LoadError::NotAFile {
            path: path_shown,
            kind,
        },
        ReadError::TooLarge(_) => LoadError::TooLarge { path: path_shown },
    })
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

/// What one reload attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// Same bytes as the set in force (or as the last rejected file): nothing to do.
    Unchanged,
    /// A new set is in force, with this many policies.
    Loaded(usize),
    /// The file was rejected; the set in force stays.
    Rejected,
}

/// Loads the policies file into the shared set, keeping the metrics.
pub struct Reloader {
    path: PathBuf,
    bounds: Bounds,
    policies: Arc<ArcSwap<PolicySet>>,
    metrics: Arc<Metrics>,
    /// What the last rejected attempt saw (the file's hash, or its read
    /// error), so the poll does not log and count the same bad file again.
    rejected: Mutex<Option<String>>,
}

impl Reloader {
    pub fn new(
        path: PathBuf,
        bounds: Bounds,
        policies: Arc<ArcSwap<PolicySet>>,
        metrics: Arc<Metrics>,
    ) -> Reloader {
        Reloader {
            path,
            bounds,
            policies,
            metrics,
            rejected: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The startup load: any problem is returned (startup fails); a good
    /// file is swapped in and counted as a reload.
    pub fn load_initial(&self) -> Result<usize, LoadError> {
        let set = load(&self.path, &self.bounds).inspect_err(|_| {
            self.metrics.reloads.policies.error.inc();
        })?;
        Ok(self.install(set))
    }

    /// Re-reads the file and swaps the new set in if its bytes changed.
    /// `forced` (SIGHUP) also re-judges bytes already rejected, and counts
    /// an unchanged good file as a reload.
    pub fn reload(&self, forced: bool) -> ReloadOutcome {
        let mut rejected = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        // What identifies this attempt: the bytes' hash, or the read error.
        let (fingerprint, read) = match read(&self.path) {
            Err(e) => (format!("read: {e}"), Err(e)),
            Ok(bytes) => {
                let sha = sha256_hex(&bytes);
                if !forced && sha == self.policies.load().sha256 {
                    // Back to the set in force (a bad edit undone, say).
                    *rejected = None;
                    return ReloadOutcome::Unchanged;
                }
                (sha, Ok(bytes))
            }
        };
        if !forced && rejected.as_deref() == Some(fingerprint.as_str()) {
            return ReloadOutcome::Unchanged;
        }
        let loaded = read
            .and_then(|bytes| parse(&self.path, &bytes, &self.bounds, SystemTime::now()))
            .and_then(|set| self.refuse_emptying(set, forced));
        match loaded {
            Ok(set) => {
                *rejected = None;
                ReloadOutcome::Loaded(self.install(set))
            }
            Err(e) => {
                *rejected = Some(fingerprint);
                self.metrics.reloads.policies.error.inc();
                error!(
                    file = %self.path.display(),
                    "policies file rejected; the policies in force stay: {e}"
                );
                ReloadOutcome::Rejected
            }
        }
    }

    /// A file that parses to no policies at all while some are in force is
    /// far more often a file caught half-written (`cat new > policies.toml`
    /// truncates first) or emptied by mistake than a wish to drop every
    /// policy, which would answer every policy check with `unknown_policy`.
    /// Only SIGHUP (`forced`) installs it; a change seen by the watcher or
    /// the poll does not.
    fn refuse_emptying(&self, set: PolicySet, forced: bool) -> Result<PolicySet, LoadError> {
        let in_force = self.policies.load().len();
        if forced || !set.is_empty() || in_force == 0 {
            return Ok(set);
        }
        Err(LoadError::WouldEmpty {
            path: self.path.display().to_string(),
            in_force,
        })
    }

    /// Swaps `set` in whole and records it; returns its size.
    fn install(&self, set: PolicySet) -> usize {
        let n = set.len();
        let sha = set.sha256.clone();
        let at = set.loaded_at.unwrap_or_else(SystemTime::now);
        self.metrics.decisions.policy_series(&set);
        self.policies.store(Arc::new(set));
        self.metrics.reloads.policies.loaded(at);
        self.metrics.decisions.policies_loaded.set(n as i64);
        info!(
            file = %self.path.display(),
            policies = n,
            sha256 = %sha,
            "loaded {n} policies from {} (sha256 {})",
            self.path.display(),
            &sha[..12.min(sha.len())]
        );
        n
    }
}

impl crate::watch::Reload for Reloader {
    fn path(&self) -> &Path {
        &self.path
    }

    fn what(&self) -> &'static str {
        "policies file"
    }

    fn reread(&self, forced: bool) {
        self.reload(forced);
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
