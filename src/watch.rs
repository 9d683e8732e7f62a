//! Watching a config path (the policies file, `rls.config`): file-system
//! events on its directory, SIGHUP, and a slow poll as a backstop, each
//! leading to a [`Reload::reread`] of what the path holds now.
//!
//! The path is a file, or a directory of files (`rls.config` may be one):
//! then the directory itself is watched, and an event naming any entry of
//! it (a file edited, added, removed, `..data` swapped) leads to a re-read.
//!
//! The directory is watched, not the file: `mv new.toml policies.toml`
//! replaces the inode a file watch would follow (limitador #523), and a
//! Kubernetes ConfigMap update never touches `policies.toml` at all; it
//! renames a new `..data` symlink over the old one (istio #34890). Events
//! naming either the file or `..data` lead to a re-read of the path, which
//! follows the symlinks to whatever they point at now. When the path
//! resolves into another directory, that one is watched too.
//!
//! A watch can be lost without a word: the directory removed or replaced,
//! the kernel's event queue overflowing, the symlinks now pointing into a
//! directory not watched. Errors and "rescan" events count as a change
//! (the re-read is cheap: unchanged bytes are not swapped), and every
//! second the watched directories are compared with what the path resolves
//! to now; a difference, or an error, re-creates the watcher.
//!
//! Every watched file is read by [`read::read_regular`]: regular files
//! only, non-blocking, capped. What the policies file, the tokens file and
//! `rls.config` share beyond the watch (fingerprints, the last good value
//! kept, the reload metrics) is [`hot::HotFile`].
//!
//! The loops are futures for the caller to spawn, tied to its shutdown.

pub mod hot;
pub mod read;
pub mod source;

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{info, warn};

/// What a watch reloads: a path and how to re-read it. The re-read is
/// cheap when nothing changed (unchanged content is not swapped), so a
/// spurious wake-up costs one read.
pub trait Reload: Send + Sync + 'static {
    /// The file, or directory of files, watched.
    fn path(&self) -> &Path;
    /// What the path is, for log lines: "policies file", "rls.config".
    fn what(&self) -> &'static str;
    /// Re-reads the path and swaps in a changed, valid version; `forced`
    /// (SIGHUP) also re-judges content already rejected. Blocking IO.
    fn reread(&self, forced: bool);
}

/// Editors and `kubectl` touch the directory several times per change: the
/// file is re-read once no event came for this long (each event restarts
/// the wait) ...
const DEBOUNCE: Duration = Duration::from_millis(75);

/// ... and, after a write into the file, once the writer has closed it
/// (`cat new.toml > policies.toml` from a slow writer pauses between
/// chunks; what is there before the close is a prefix). Never longer than
/// this after the first event, so a writer that never closes (or a missed
/// close) delays a reload by at most this much.
const SETTLE_CAP: Duration = Duration::from_secs(1);

/// How often the watched directories are checked against what the path
/// resolves to now.
const WATCH_CHECK: Duration = Duration::from_secs(1);

/// The name Kubernetes gives the symlink it swaps on a ConfigMap update.
const CONFIGMAP_DATA: &str = "..data";

/// What the watcher's callback (on notify's thread) tells the reload task.
#[derive(Default)]
struct Events {
    changed: Notify,
    /// A write into the file was seen and not yet its close.
    writing: AtomicBool,
    /// The watch reported an error or lost a directory: re-create it.
    lost: AtomicBool,
    /// An error was logged in this episode (reset once re-armed).
    warned: AtomicBool,
}

/// The watch loop, to spawn; it (and the watcher it owns) ends when
/// dropped. SIGHUP is caught from the moment this returns.
pub fn watch<R: Reload>(
    reloader: Arc<R>,
    poll_interval: Duration,
) -> impl Future<Output = ()> + Send + 'static {
    let hangup = catch_hangup();
    let events = Arc::new(Events::default());
    let mut watch = DirWatch::new(
        reloader.path().to_path_buf(),
        reloader.what(),
        events.clone(),
    );
    async move {
        let mut hangup = hangup;
        let mut poll = tokio::time::interval(poll_interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        poll.tick().await; // the first tick is immediate; the file was just loaded
        let mut check = tokio::time::interval(WATCH_CHECK);
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        check.tick().await;
        loop {
            let forced = tokio::select! {
                () = events.changed.notified() => {
                    settle(&events).await;
                    false
                }
                () = next_signal(&mut hangup) => {
                    info!(what = reloader.what(), "SIGHUP: re-reading the {}", reloader.what());
                    true
                }
                _ = poll.tick() => {
                    // A write in progress was seen: its events lead to a
                    // settled re-read; reading now could catch a prefix.
                    if events.writing.load(Ordering::Acquire) {
                        continue;
                    }
                    false
                }
                _ = check.tick() => {
                    if !watch.rearm_if_lost() {
                        continue;
                    }
                    // Changes may have been missed while the watch was gone.
                    false
                }
            };
            // File IO and parsing off the async workers (never blocked: left to end if dropped).
            let reloader = reloader.clone();
            let _ = tokio::task::spawn_blocking(move || reloader.reread(forced)).await;
            // A ConfigMap swap moves the target into a new directory.
            watch.rearm_if_lost();
        }
    }
}

/// Without a file for `what` (the policies file), SIGHUP must still not
/// kill the process (its default action): it is caught and answered with
/// a log line naming what has nothing to reload (another watcher, of
/// `rls.config` say, logs its own re-read). A loop to spawn, as [`watch`].
pub fn without_file(what: &'static str) -> impl Future<Output = ()> + Send + 'static {
    let hangup = catch_hangup();
    async move {
        let mut hangup = hangup;
        loop {
            next_signal(&mut hangup).await;
            info!(what, "SIGHUP: no {what} configured, none to reload");
        }
    }
}

fn catch_hangup() -> Option<Signal> {
    signal(SignalKind::hangup())
        .inspect_err(|e| warn!(error = %e, "cannot catch SIGHUP"))
        .ok()
}

/// Waits until the events stop: [`DEBOUNCE`] without one, and no write
/// left unclosed; at most [`SETTLE_CAP`].
async fn settle(events: &Events) {
    let cap = Instant::now() + SETTLE_CAP;
    loop {
        let quiet = tokio::time::sleep_until(cap.min(Instant::now() + DEBOUNCE));
        tokio::select! {
            () = events.changed.notified() => {}
            () = quiet => {
                if !events.writing.load(Ordering::Acquire) {
                    break;
                }
            }
        }
        if Instant::now() >= cap {
            break;
        }
    }
    events.writing.store(false, Ordering::Release);
}

async fn next_signal(signal: &mut Option<Signal>) {
    match signal {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// A directory watched, and its identity (device, inode) when the watch
/// was set up; `None` when it could not be read.
type Armed = (PathBuf, Option<(u64, u64)>);

/// The watcher over the file's directory (and its target's), re-created
/// when it is lost.
struct DirWatch {
    path: PathBuf,
    what: &'static str,
    events: Arc<Events>,
    watcher: Option<notify::RecommendedWatcher>,
    armed: Vec<Armed>,
}

impl DirWatch {
    fn new(path: PathBuf, what: &'static str, events: Arc<Events>) -> DirWatch {
        let mut watch = DirWatch {
            path,
            what,
            events,
            watcher: None,
            armed: Vec::new(),
        };
        watch.arm(watch.current());
        watch
    }

    /// Whether the path is a directory of files (followed through symlinks).
    fn is_dir(&self) -> bool {
        self.path.is_dir()
    }

    /// The directories to watch now, with their identities: the path's own
    /// (the path itself when it is a directory), and the one its symlinks
    /// resolve into when that is another.
    fn current(&self) -> Vec<Armed> {
        let dir = self.is_dir();
        let own = match self.path.parent() {
            _ if dir => self.path.clone(),
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut dirs = vec![own.clone()];
        let real = std::fs::canonicalize(&self.path).ok();
        let target = if dir {
            real
        } else {
            real.and_then(|r| r.parent().map(Path::to_path_buf))
        };
        if let Some(target) = target
            && std::fs::canonicalize(&own).is_ok_and(|own| own != target)
        {
            dirs.push(target);
        }
        dirs.into_iter()
            .map(|d| {
                let id = std::fs::metadata(&d).ok().map(|m| (m.dev(), m.ino()));
                (d, id)
            })
            .collect()
    }

    /// Re-creates the watcher when it reported an error or lost a directory,
    /// when a watched directory was replaced, or when the path now resolves
    /// into another directory. Returns whether it did.
    fn rearm_if_lost(&mut self) -> bool {
        let current = self.current();
        let lost = self.events.lost.swap(false, Ordering::AcqRel);
        if !lost && self.watcher.is_some() && current == self.armed {
            return false;
        }
        self.arm(current);
        true
    }

    fn arm(&mut self, dirs: Vec<Armed>) {
        self.watcher = None; // the old one stops first
        // In a directory of files, every entry matters.
        let names = (!self.is_dir()).then(|| {
            let mut names: Vec<OsString> = vec![CONFIGMAP_DATA.into()];
            names.extend(self.path.file_name().map(OsString::from));
            if let Ok(real) = std::fs::canonicalize(&self.path) {
                names.extend(real.file_name().map(OsString::from));
            }
            names
        });
        let paths: Vec<PathBuf> = dirs.iter().map(|(d, _)| d.clone()).collect();
        match make_watcher(&paths, names, self.what, self.events.clone()) {
            Ok(watcher) => {
                self.watcher = Some(watcher);
                self.events.warned.store(false, Ordering::Release);
            }
            Err(e) => {
                if !self.events.warned.swap(true, Ordering::AcqRel) {
                    warn!(
                        file = %self.path.display(),
                        error = %e,
                        "cannot watch the {}'s directory; retrying every second, \
                         the poll and SIGHUP still reload",
                        self.what
                    );
                }
            }
        }
        self.armed = dirs;
    }
}

/// Watches `dirs` (not recursively); [`Filter::on_event`] judges each event.
fn make_watcher(
    dirs: &[PathBuf],
    names: Option<Vec<OsString>>,
    what: &'static str,
    events: Arc<Events>,
) -> notify::Result<notify::RecommendedWatcher> {
    let filter = Filter {
        dirs: dirs.to_vec(),
        names,
        what,
    };
    let mut watcher = notify::recommended_watcher(move |event| filter.on_event(&events, event))?;
    for dir in dirs {
        watcher.watch(dir, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// Which events matter: those naming one of `names` (any entry when
/// `None`: the path is a directory of files), errors, rescans, and one of
/// the watched `dirs` itself going away.
struct Filter {
    dirs: Vec<PathBuf>,
    names: Option<Vec<OsString>>,
    what: &'static str,
}

impl Filter {
    /// Runs on notify's thread: records what the event means in `events`
    /// and wakes the reload task when the file may have changed.
    fn on_event(&self, events: &Events, event: notify::Result<Event>) {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                if !events.warned.swap(true, Ordering::AcqRel) {
                    warn!(
                        error = %e,
                        "the {} watch failed; re-reading it and re-arming the watch",
                        self.what
                    );
                }
                events.lost.store(true, Ordering::Release);
                events.changed.notify_one();
                return;
            }
        };
        // A queue overflow: events were dropped, any of them may have mattered.
        if event.need_rescan() {
            events.changed.notify_one();
            return;
        }
        let close_write = EventKind::Access(AccessKind::Close(AccessMode::Write));
        // Opening the file to read it is an event too: ignore reads, or
        // every reload would schedule the next.
        if matches!(event.kind, EventKind::Access(_)) && event.kind != close_write {
            return;
        }
        let self_gone = matches!(
            event.kind,
            EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
        ) && event.paths.iter().any(|p| self.dirs.contains(p));
        if self_gone {
            events.lost.store(true, Ordering::Release);
            events.changed.notify_one();
            return;
        }
        let relevant = event.paths.iter().any(|p| match &self.names {
            None => true,
            Some(names) => p
                .file_name()
                .is_some_and(|n| names.iter().any(|name| name == n)),
        });
        if !relevant {
            return;
        }
        match event.kind {
            EventKind::Modify(ModifyKind::Data(_)) | EventKind::Create(CreateKind::File) => {
                events.writing.store(true, Ordering::Release);
            }
            kind if kind == close_write => events.writing.store(false, Ordering::Release),
            _ => {}
        }
        events.changed.notify_one();
    }
}

#[cfg(test)]
mod tests;
