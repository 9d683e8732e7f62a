//! One hot file: a watched path read by a [`Source`] (a file, or a
//! directory of files), judged by a [`Parse`], and swapped in whole. What
//! the policies file, the tokens file and `rls.config` share is written
//! here once:
//! - a version is told apart by its fingerprint, so an unchanged one is
//!   neither re-parsed nor logged and counted again, and a bad one is
//!   judged (logged, counted) once, until SIGHUP asks again;
//! - a version that cannot be read or judged is rejected whole: the last
//!   good value stays;
//! - a version with nothing in it while something is in force is refused
//!   unless SIGHUP asked for it, where the parser says so;
//! - every load counts in `ratekeeper_reloads_total{file, result}` and
//!   `ratekeeper_last_reload_timestamp_seconds{file}`, the startup load too.
//!
//! It is a [`Reload`], so [`super::watch`] drives it on file events,
//! SIGHUP and the slow poll.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use super::Reload;
use super::source::Source;

/// Where a hot file counts its loads: `ratekeeper_reloads_total{file,
/// result}` and `ratekeeper_last_reload_timestamp_seconds{file}` (the
/// metrics implement it, so that the watch imports nothing of them).
pub trait CountLoads: Send + Sync + 'static {
    /// A good load, made at `at`.
    fn loaded(&self, at: SystemTime);
    /// A version rejected whole.
    fn failed(&self);
}

/// What a hot file holds and how a version of it is judged. Logging and
/// the metrics of the value itself (a gauge of its size, say) are the
/// parser's; counting loads is the [`HotFile`]'s.
pub trait Parse: Send + Sync + 'static {
    type Source: Source;
    /// What is swapped in.
    type Value: Send + Sync + 'static;
    type Error: std::fmt::Display;
    /// The path's kind, for log lines: "policies file".
    const WHAT: &'static str;
    const SOURCE: Self::Source;
    /// Whether SIGHUP installs (and counts) again the version in force.
    const SIGHUP_RELOADS_UNCHANGED: bool = true;

    /// The error the source's `error` about `path` is reported as.
    fn unreadable(&self, path: &Path, error: <Self::Source as Source>::Error) -> Self::Error;
    fn parse(&self, path: &Path, read: &SourceRead<Self>) -> Result<Self::Value, Self::Error>;
    /// How many items (policies, tokens, domains) `value` holds.
    fn count(value: &Self::Value) -> usize;
    /// A version with no items while `in_force` are in force is far more
    /// often a file caught half-written or emptied by mistake than a wish:
    /// the error to refuse it with, when the parser refuses it. Only
    /// SIGHUP installs it then; a file event or the poll does not.
    fn would_empty(&self, _path: &Path, _in_force: usize) -> Option<Self::Error> {
        None
    }
    /// When `value` was loaded, for the last-reload gauge.
    fn loaded_at(&self, _value: &Self::Value) -> SystemTime {
        SystemTime::now()
    }
    /// Just before `value` is swapped in: what must exist before any
    /// request sees it.
    fn before_swap(&self, _value: &Self::Value) {}
    /// Just after `value` (read as `read`) was swapped in and counted.
    fn installed(&self, path: &Path, value: &Self::Value, read: &SourceRead<Self>);
    /// A version was rejected: the value in force stays.
    fn rejected(&self, path: &Path, error: &Self::Error);
}

/// What the parser `P`'s source reads.
pub type SourceRead<P> = <<P as Parse>::Source as Source>::Read;

/// What one reload attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// Same version as the one in force (or as the last rejected): nothing to do.
    Unchanged,
    /// A new version is in force, with this many items.
    Loaded(usize),
    /// The version was rejected; the one in force stays.
    Rejected,
}

/// What identifies a version: its content's fingerprint, or why it could
/// not be read.
#[derive(Clone, PartialEq, Eq)]
enum Version {
    Read([u8; 32]),
    Unreadable(String),
}

/// The versions already judged.
#[derive(Default)]
struct Seen {
    in_force: Option<[u8; 32]>,
    /// The last rejected version.
    rejected: Option<Version>,
}

/// A watched path whose last good version is swapped in whole.
pub struct HotFile<P: Parse> {
    path: PathBuf,
    parser: P,
    value: Arc<ArcSwap<P::Value>>,
    counts: Box<dyn CountLoads>,
    /// Also serialises the reloads (the watch, SIGHUP, a test).
    seen: Mutex<Seen>,
}

impl<P: Parse> HotFile<P> {
    /// `value` is where the value in force is shared; `counts` counts
    /// this file's loads.
    pub fn new(
        path: PathBuf,
        parser: P,
        value: Arc<ArcSwap<P::Value>>,
        counts: impl CountLoads,
    ) -> HotFile<P> {
        HotFile {
            path,
            parser,
            value,
            counts: Box::new(counts),
            seen: Mutex::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value in force, shared.
    pub fn value(&self) -> &Arc<ArcSwap<P::Value>> {
        &self.value
    }

    pub fn parser(&self) -> &P {
        &self.parser
    }

    /// The startup load: any problem is returned (startup fails) and
    /// counted; a good version is swapped in and counted.
    pub fn load_initial(&self) -> Result<usize, P::Error> {
        let mut seen = self.lock();
        let loaded = self.read().1.and_then(|read| {
            let value = self.parser.parse(&self.path, &read)?;
            Ok((value, read))
        });
        let (value, read) = loaded.inspect_err(|_| self.counts.failed())?;
        seen.in_force = Some(P::Source::fingerprint(&read));
        Ok(self.install(value, &read))
    }

    /// Re-reads the path and swaps a new version in if it changed.
    /// `forced` (SIGHUP) also re-judges a version already rejected, and
    /// installs the version in force again when the parser says so.
    pub fn reload(&self, forced: bool) -> ReloadOutcome {
        let mut seen = self.lock();
        let (version, read) = self.read();
        if let Version::Read(sha) = &version
            && seen.in_force == Some(*sha)
            && !(forced && P::SIGHUP_RELOADS_UNCHANGED)
        {
            // Back to the version in force (a bad edit undone, say).
            seen.rejected = None;
            return ReloadOutcome::Unchanged;
        }
        if !forced && seen.rejected.as_ref() == Some(&version) {
            return ReloadOutcome::Unchanged;
        }
        let loaded = read.and_then(|read| {
            let value = self.parser.parse(&self.path, &read)?;
            self.refuse_emptying(&value, forced)?;
            Ok((value, read))
        });
        match loaded {
            Ok((value, read)) => {
                *seen = Seen {
                    in_force: Some(P::Source::fingerprint(&read)),
                    rejected: None,
                };
                ReloadOutcome::Loaded(self.install(value, &read))
            }
            Err(e) => {
                seen.rejected = Some(version);
                self.counts.failed();
                self.parser.rejected(&self.path, &e);
                ReloadOutcome::Rejected
            }
        }
    }

    /// What the path holds now, and what identifies it.
    fn read(&self) -> (Version, Result<SourceRead<P>, P::Error>) {
        match P::SOURCE.read(&self.path) {
            Ok(read) => (Version::Read(P::Source::fingerprint(&read)), Ok(read)),
            Err(e) => {
                let e = self.parser.unreadable(&self.path, e);
                (Version::Unreadable(e.to_string()), Err(e))
            }
        }
    }

    fn refuse_emptying(&self, value: &P::Value, forced: bool) -> Result<(), P::Error> {
        let in_force = P::count(&self.value.load());
        if forced || P::count(value) > 0 || in_force == 0 {
            return Ok(());
        }
        match self.parser.would_empty(&self.path, in_force) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Swaps `value` in whole and records it; returns its size.
    fn install(&self, value: P::Value, read: &SourceRead<P>) -> usize {
        let n = P::count(&value);
        let at = self.parser.loaded_at(&value);
        self.parser.before_swap(&value);
        let value = Arc::new(value);
        self.value.store(value.clone());
        self.counts.loaded(at);
        self.parser.installed(&self.path, &value, read);
        n
    }

    fn lock(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<P: Parse> Reload for HotFile<P> {
    fn path(&self) -> &Path {
        &self.path
    }

    fn what(&self) -> &'static str {
        P::WHAT
    }

    fn reread(&self, forced: bool) {
        self.reload(forced);
    }
}

#[cfg(test)]
#[path = "hot_tests.rs"]
mod tests;
