//! Hot reload of `rls.config`: the files are re-read every poll interval
//! (and on SIGHUP), and swapped in when their names or contents changed.
//! A config that fails to load is logged and the one in force stays, as for
//! the policies file. Polling, not file-system events: one small read per
//! interval covers a file, a directory and a ConfigMap's symlink swap alike.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::{Snapshot, parse_all, snapshot};
use crate::domain::Bounds;
use crate::domain::rls::RlsConfig;

fn fingerprint(files: &Snapshot) -> [u8; 32] {
    let mut hash = Sha256::new();
    for (path, text) in files {
        let name = path.to_string_lossy();
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name.as_bytes());
        hash.update((text.len() as u64).to_le_bytes());
        hash.update(text.as_bytes());
    }
    hash.finalize().into()
}

/// Watches `path`; `config` holds what is in force (already loaded from it).
pub fn spawn(
    path: PathBuf,
    bounds: Bounds,
    config: Arc<ArcSwap<RlsConfig>>,
    interval: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // Unknown at first: a change between the startup load and the first
        // read must not be missed (re-parsing an unchanged config is harmless).
        let mut last: Option<[u8; 32]> = None;
        let mut hup = signal(SignalKind::hangup()).ok();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => None } } => {}
            }
            let path = path.clone();
            let read = tokio::task::spawn_blocking(move || snapshot(&path)).await;
            let files = match read {
                Ok(Ok(files)) => files,
                Ok(Err(error)) => {
                    warn!(%error, "rls.config unreadable; keeping the config in force");
                    continue;
                }
                Err(_) => continue,
            };
            let now = fingerprint(&files);
            if last == Some(now) {
                continue;
            }
            last = Some(now);
            match parse_all(&files, &bounds) {
                Ok(new) => {
                    info!(domains = new.domains.len(), "rls.config reloaded");
                    config.store(Arc::new(new));
                }
                Err(error) => warn!(%error, "rls.config rejected; keeping the config in force"),
            }
        }
    })
}
