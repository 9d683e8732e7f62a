//! Hot reload of `rls.config`: the parser its [`HotFile`] plugs in, watched
//! like the policies file ([`crate::watch`]: file events on the directory,
//! SIGHUP, a slow poll). A new version is swapped in whole, and only when
//! the files' names or contents changed; one that fails to load is logged,
//! counted in `ratekeeper_reloads_total{file="rls",result="error"}`, and
//! the config in force stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tracing::{error, info};

use super::{FILES, RlsLoadError, parse_all, read_error};
use crate::domain::Bounds;
use crate::domain::rls::RlsConfig;
use crate::metrics::Metrics;
use crate::watch::hot::{HotFile, Parse};
use crate::watch::source::{Files, FilesError, Snapshot};

/// `rls.config` as a hot file: a [`HotFile`] of [`RlsFiles`].
pub type Reloader = HotFile<RlsFiles>;

/// The hot file of `rls.config` at `path`, swapped into `config`.
pub fn reloader(
    path: PathBuf,
    bounds: Bounds,
    config: Arc<ArcSwap<RlsConfig>>,
    metrics: Arc<Metrics>,
) -> Reloader {
    let counted = metrics.reloads.rls.clone();
    HotFile::new(path, RlsFiles { bounds, metrics }, config, counted)
}

/// How `rls.config`'s files are judged: one domain each, within `bounds`.
pub struct RlsFiles {
    bounds: Bounds,
    metrics: Arc<Metrics>,
}

impl Parse for RlsFiles {
    type Source = Files;
    type Value = RlsConfig;
    type Error = RlsLoadError;
    const WHAT: &'static str = "rls.config";
    const SOURCE: Files = FILES;

    fn unreadable(&self, _: &Path, error: FilesError) -> RlsLoadError {
        read_error(error)
    }

    fn parse(&self, _: &Path, files: &Snapshot) -> Result<RlsConfig, RlsLoadError> {
        parse_all(files, &self.bounds)
    }

    fn count(config: &RlsConfig) -> usize {
        config.domains.len()
    }

    /// A directory left with no `*.yaml` while domains are in force (`rm`
    /// then `cp`, `rsync --delete`, a file caught truncated) would install
    /// zero domains, and every `ShouldRateLimit` would answer OK: limiting
    /// off.
    fn would_empty(&self, path: &Path, in_force: usize) -> Option<RlsLoadError> {
        Some(RlsLoadError::WouldEmpty {
            path: path.to_path_buf(),
            in_force,
        })
    }

    fn installed(&self, path: &Path, config: &RlsConfig, _: &Snapshot) {
        let n = config.domains.len();
        self.metrics.rls.domains_loaded.set(n as i64);
        info!(path = %path.display(), domains = n, "rls.config loaded: {n} domains");
    }

    fn rejected(&self, path: &Path, e: &RlsLoadError) {
        error!(
            path = %path.display(),
            "rls.config rejected; the config in force stays: {e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rls::{MAX_FILE_BYTES, MAX_FILES};
    use crate::watch::hot::ReloadOutcome;

    fn reloader(dir: &Path) -> Reloader {
        let config = Arc::new(ArcSwap::from_pointee(RlsConfig::default()));
        let metrics = Arc::new(Metrics::new());
        super::reloader(dir.to_path_buf(), Bounds::default(), config, metrics)
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
            r.value().load().domains.len(),
            1,
            "the config in force stays"
        );
        assert_eq!(r.parser().metrics.reloads.rls.error.get(), 1);
        assert_eq!(r.reload(false), ReloadOutcome::Unchanged, "judged once");

        assert_eq!(
            r.reload(true),
            ReloadOutcome::Loaded(0),
            "SIGHUP installs it"
        );
        assert_eq!(r.value().load().domains.len(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sighup_counts_an_unchanged_config_as_a_reload() {
        let dir = fresh("forced");
        std::fs::write(dir.join("edge.yaml"), EDGE).unwrap();
        let r = reloader(&dir);
        r.load_initial().unwrap();
        assert_eq!(r.reload(false), ReloadOutcome::Unchanged);
        assert_eq!(r.parser().metrics.reloads.rls.ok.get(), 1);
        assert_eq!(r.reload(true), ReloadOutcome::Loaded(1));
        assert_eq!(r.parser().metrics.reloads.rls.ok.get(), 2);
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
            r.value().load().domains.len(),
            1,
            "the config in force stays"
        );
        assert_eq!(
            reload_within(&r, true),
            ReloadOutcome::Rejected,
            "SIGHUP too"
        );
        assert_eq!(r.parser().metrics.reloads.rls.error.get(), 2);

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
        assert_eq!(r.value().load().domains.len(), 1);
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
