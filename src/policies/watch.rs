//! Watching the policies file: file-system events on its directory, SIGHUP,
//! and a slow poll as a backstop, each leading to a [`Reloader::reload`].
//!
//! The directory is watched, not the file: `mv new.toml policies.toml`
//! replaces the inode a file watch would follow (limitador #523), and a
//! Kubernetes ConfigMap update never touches `policies.toml` at all; it
//! renames a new `..data` symlink over the old one (istio #34890). Events
//! naming either the file or `..data` lead to a re-read of the path, which
//! follows the symlinks to whatever they point at now.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::warn;

use super::Reloader;

/// Editors and `kubectl` touch the directory several times per change;
/// wait this long after the first event so one re-read sees the result.
const DEBOUNCE: Duration = Duration::from_millis(75);

/// The name Kubernetes gives the symlink it swaps on a ConfigMap update.
const CONFIGMAP_DATA: &str = "..data";

/// Starts watching; the task (and the watcher it owns) ends when aborted.
/// SIGHUP is caught from the moment this returns.
pub fn spawn(reloader: Arc<Reloader>, poll_interval: Duration) -> JoinHandle<()> {
    let hangup = signal(SignalKind::hangup())
        .inspect_err(|e| warn!(error = %e, "cannot catch SIGHUP; the file is still watched"))
        .ok();
    let changed = Arc::new(Notify::new());
    let watcher = watch_directory(reloader.path(), changed.clone());
    tokio::spawn(async move {
        // Dropping the watcher stops it: it lives exactly as long as this task.
        let _watcher = watcher;
        let mut hangup = hangup;
        let mut poll = tokio::time::interval(poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await; // the first tick is immediate; the file was just loaded
        loop {
            let forced = tokio::select! {
                () = changed.notified() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    false
                }
                () = next_signal(&mut hangup) => true,
                _ = poll.tick() => false,
            };
            // File IO and parsing off the async workers.
            let reloader = reloader.clone();
            let _ = tokio::task::spawn_blocking(move || reloader.reload(forced)).await;
        }
    })
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

/// Watches the file's directory (not recursively) and wakes `changed` on
/// any event that names the file or `..data`. `None` when the watch cannot
/// be set up (the poll and SIGHUP still reload).
fn watch_directory(path: &Path, changed: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
    let directory = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    let name: OsString = path.file_name()?.to_os_string();
    let handler = move |event: notify::Result<Event>| {
        let Ok(event) = event else { return };
        // Opening the file to read it is an event too: ignore reads, or
        // every reload would schedule the next.
        if matches!(event.kind, EventKind::Access(kind) if kind != AccessKind::Close(AccessMode::Write))
        {
            return;
        }
        let relevant = event.paths.iter().any(|p| {
            p.file_name()
                .is_some_and(|n| n == name.as_os_str() || n == CONFIGMAP_DATA)
        });
        if relevant {
            changed.notify_one();
        }
    };
    let watched = notify::recommended_watcher(handler).and_then(|mut watcher| {
        watcher.watch(&directory, RecursiveMode::NonRecursive)?;
        Ok(watcher)
    });
    watched
        .inspect_err(|e| {
            warn!(
                directory = %directory.display(),
                error = %e,
                "cannot watch the policies file's directory; changes are seen by the poll and SIGHUP only"
            );
        })
        .ok()
}
