//! Hot reload of `rls.config`, by the same watch as the policies file
//! ([`crate::watch`]: file events on the directory, SIGHUP, a slow poll).
//! A new version is swapped in whole, and only when the files' names or
//! contents changed; one that fails to load is logged, counted in
//! `ratekeeper_reloads_total{file="rls",result="error"}`, and the config
//! in force stays.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use tracing::{error, info};

use super::{RlsLoadError, Snapshot, parse_all, snapshot};
use crate::domain::Bounds;
use crate::domain::rls::RlsConfig;
use crate::metrics::Metrics;
use crate::policies::ReloadOutcome;

/// The files' names and contents, hashed: what identifies a version.
fn fingerprint(files: &Snapshot) -> String {
    let mut hash = Sha256::new();
    for (path, text) in files {
        let name = path.to_string_lossy();
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name.as_bytes());
        hash.update((text.len() as u64).to_le_bytes());
        hash.update(text.as_bytes());
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The versions already judged, so an unchanged one is neither re-parsed
/// nor logged and counted again.
#[derive(Default)]
struct Seen {
    in_force: Option<String>,
    /// The last rejected version's fingerprint, or its read error.
    rejected: Option<String>,
}

/// Loads `rls.config` into the shared config, keeping the metrics.
pub struct Reloader {
    path: PathBuf,
    bounds: Bounds,
    config: Arc<ArcSwap<RlsConfig>>,
    metrics: Arc<Metrics>,
    seen: Mutex<Seen>,
}

impl Reloader {
    pub fn new(
        path: PathBuf,
        bounds: Bounds,
        config: Arc<ArcSwap<RlsConfig>>,
        metrics: Arc<Metrics>,
    ) -> Reloader {
        Reloader {
            path,
            bounds,
            config,
            metrics,
            seen: Mutex::default(),
        }
    }

    /// The startup load: any problem is returned (startup fails); a good
    /// config is swapped in and counted.
    pub fn load_initial(&self) -> Result<usize, RlsLoadError> {
        let loaded = snapshot(&self.path)
            .and_then(|files| Ok((fingerprint(&files), parse_all(&files, &self.bounds)?)));
        let (sha, config) = loaded.inspect_err(|_| self.metrics.reloads.rls.error.inc())?;
        self.lock().in_force = Some(sha);
        Ok(self.install(config))
    }

    /// Re-reads the files and swaps the new config in if they changed.
    /// `forced` (SIGHUP) also re-judges a version already rejected, and
    /// counts an unchanged good version as a reload (as the policies file).
    pub fn reload(&self, forced: bool) -> ReloadOutcome {
        let mut seen = self.lock();
        let (fingerprint, files) = match snapshot(&self.path) {
            Err(e) => (format!("read: {e}"), Err(e)),
            Ok(files) => (fingerprint(&files), Ok(files)),
        };
        if !forced && seen.in_force.as_deref() == Some(fingerprint.as_str()) {
            // Back to the version in force (a bad edit undone, say).
            seen.rejected = None;
            return ReloadOutcome::Unchanged;
        }
        if !forced && seen.rejected.as_deref() == Some(fingerprint.as_str()) {
            return ReloadOutcome::Unchanged;
        }
        let loaded = files
            .and_then(|files| parse_all(&files, &self.bounds))
            .and_then(|config| self.refuse_emptying(config, forced));
        match loaded {
            Ok(config) => {
                *seen = Seen {
                    in_force: Some(fingerprint),
                    rejected: None,
                };
                ReloadOutcome::Loaded(self.install(config))
            }
            Err(e) => {
                seen.rejected = Some(fingerprint);
                self.metrics.reloads.rls.error.inc();
                error!(
                    path = %self.path.display(),
                    "rls.config rejected; the config in force stays: {e}"
                );
                ReloadOutcome::Rejected
            }
        }
    }

    /// A directory left with no `*.yaml` while domains are in force (`rm`
    /// then `cp`, `rsync --delete`, a file caught truncated) would install
    /// zero domains, and every `ShouldRateLimit` would answer OK: limiting
    /// off. Far more often a moment in an update than a wish, so only SIGHUP
    /// (`forced`) installs it; a file event or the poll does not.
    fn refuse_emptying(&self, config: RlsConfig, forced: bool) -> Result<RlsConfig, RlsLoadError> {
        let in_force = self.config.load().domains.len();
        if forced || !config.domains.is_empty() || in_force == 0 {
            return Ok(config);
        }
        Err(RlsLoadError::WouldEmpty {
            path: self.path.clone(),
            in_force,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Swaps `config` in whole and records it; returns its domain count.
    fn install(&self, config: RlsConfig) -> usize {
        let n = config.domains.len();
        self.config.store(Arc::new(config));
        self.metrics.reloads.rls.loaded(SystemTime::now());
        self.metrics.rls.domains_loaded.set(n as i64);
        info!(path = %self.path.display(), domains = n, "rls.config loaded: {n} domains");
        n
    }
}

impl crate::watch::Reload for Reloader {
    fn path(&self) -> &Path {
        &self.path
    }

    fn what(&self) -> &'static str {
        "rls.config"
    }

    fn reread(&self, forced: bool) {
        self.reload(forced);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rls::{MAX_FILE_BYTES, MAX_FILES};

    fn reloader(dir: &Path) -> Reloader {
        let config = Arc::new(ArcSwap::from_pointee(RlsConfig::default()));
        let metrics = Arc::new(Metrics::new());
        Reloader::new(dir.to_path_buf(), Bounds::default(), config, metrics)
    }

    fn fresh(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rk-rls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const EDGE: &str = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n";

    #[test]
    fn an_emptied_directory_is_refused_unless_forced() {
        let dir = fresh("emptied");
        std::fs::write(dir.join("edge.yaml"), EDGE).unwrap();
        let r = reloader(&dir);
        assert_eq!(r.load_initial().unwrap(), 1);
        std::fs::remove_file(dir.join("edge.yaml")).unwrap();

        assert_eq!(
            r.reload(false),
            ReloadOutcome::Rejected,
            "limiting would be off"
        );
        assert_eq!(
            r.config.load().domains.len(),
            1,
            "the config in force stays"
        );
        assert_eq!(r.metrics.reloads.rls.error.get(), 1);
        assert_eq!(r.reload(false), ReloadOutcome::Unchanged, "judged once");

        assert_eq!(
            r.reload(true),
            ReloadOutcome::Loaded(0),
            "SIGHUP installs it"
        );
        assert_eq!(r.config.load().domains.len(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sighup_counts_an_unchanged_config_as_a_reload() {
        let dir = fresh("forced");
        std::fs::write(dir.join("edge.yaml"), EDGE).unwrap();
        let r = reloader(&dir);
        r.load_initial().unwrap();
        assert_eq!(r.reload(false), ReloadOutcome::Unchanged);
        assert_eq!(r.metrics.reloads.rls.ok.get(), 1);
        assert_eq!(r.reload(true), ReloadOutcome::Loaded(1));
        assert_eq!(r.metrics.reloads.rls.ok.get(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Runs `f` on a thread and fails if it does not return within 2 s: a
    /// reader that blocks must fail the test, not hang it.
    fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(2))
            .expect("the read blocked")
    }

    fn reload_within(r: &Arc<Reloader>, forced: bool) -> ReloadOutcome {
        let r = r.clone();
        within(move || r.reload(forced))
    }

    fn startup_error(path: PathBuf) -> String {
        within(move || reloader(&path).load_initial().unwrap_err().to_string())
    }

    #[test]
    fn a_fifo_in_the_directory_is_refused_without_blocking() {
        let dir = fresh("fifo");
        std::fs::write(dir.join("edge.yaml"), EDGE).unwrap();
        let r = Arc::new(reloader(&dir));
        r.load_initial().unwrap();
        nix::unistd::mkfifo(&dir.join("evil.yaml"), nix::sys::stat::Mode::S_IRWXU).unwrap();

        assert_eq!(reload_within(&r, false), ReloadOutcome::Rejected);
        assert_eq!(
            r.config.load().domains.len(),
            1,
            "the config in force stays"
        );
        assert_eq!(
            reload_within(&r, true),
            ReloadOutcome::Rejected,
            "SIGHUP too"
        );
        assert_eq!(r.metrics.reloads.rls.error.get(), 2);

        // Once it is gone, the edit made meanwhile applies.
        std::fs::write(dir.join("edge.yaml"), EDGE.replace('5', "6")).unwrap();
        std::fs::remove_file(dir.join("evil.yaml")).unwrap();
        assert_eq!(reload_within(&r, false), ReloadOutcome::Loaded(1));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fifo_or_a_device_as_the_file_is_refused_at_startup() {
        let dir = fresh("startup");
        let fifo = dir.join("rls.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = startup_error(fifo);
        assert!(
            err.ends_with("rls.yaml: is a FIFO; it must be a regular file"),
            "{err}"
        );
        let zero = dir.join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = startup_error(zero);
        assert!(
            err.ends_with("zero.yaml: is a device; it must be a regular file"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A link to /dev/zero in the directory: refused before anything is
    /// read (it used to be read until memory ran out, at every poll).
    #[test]
    fn a_link_to_dev_zero_in_the_directory_is_refused() {
        let dir = fresh("zero");
        std::fs::write(dir.join("edge.yaml"), EDGE).unwrap();
        let r = Arc::new(reloader(&dir));
        r.load_initial().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.yaml")).unwrap();
        assert_eq!(reload_within(&r, false), ReloadOutcome::Rejected);
        assert_eq!(r.config.load().domains.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_past_the_caps_are_refused() {
        let dir = fresh("caps");
        let big = format!("{EDGE}#{}\n", "x".repeat(MAX_FILE_BYTES as usize));
        std::fs::write(dir.join("edge.yaml"), &big).unwrap();
        let err = reloader(&dir).load_initial().unwrap_err().to_string();
        assert!(
            err.ends_with("is larger than 1048576 bytes; is it the right file?"),
            "{err}"
        );

        // Together: five files just under the cap each.
        let under = format!("#{}\n", "x".repeat(MAX_FILE_BYTES as usize - 100));
        for i in 0..5 {
            std::fs::write(
                dir.join(format!("d{i}.yaml")),
                format!("domain: d{i}\n{under}"),
            )
            .unwrap();
        }
        std::fs::remove_file(dir.join("edge.yaml")).unwrap();
        let err = reloader(&dir).load_initial().unwrap_err().to_string();
        assert!(err.contains("more than 4194304 bytes together"), "{err}");

        let many = fresh("many");
        for i in 0..=MAX_FILES {
            std::fs::write(many.join(format!("d{i}.yaml")), format!("domain: d{i}\n")).unwrap();
        }
        let err = reloader(&many).load_initial().unwrap_err().to_string();
        assert!(err.contains("more than 256 *.yaml/*.yml files"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&many);
    }
}
