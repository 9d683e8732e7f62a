//! Re-reading the `[redis.tls]` files while the service runs: one watch
//! per file (they may sit in different directories, a Kubernetes Secret
//! each), every one re-reading all three, since a certificate and its key
//! change together and must be judged together.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tracing::{error, info};

use crate::metrics::Metrics;
use crate::store::redis::tls::{Reloaded, TlsClient};
use crate::watch;

/// Re-reads the TLS files when the one at `path` changes.
pub(super) struct Reloader {
    path: PathBuf,
    client: Arc<TlsClient>,
    metrics: Arc<Metrics>,
}

impl watch::Reload for Reloader {
    fn path(&self) -> &Path {
        &self.path
    }

    fn what(&self) -> &'static str {
        "redis.tls file"
    }

    fn reread(&self, forced: bool) {
        let tls = &self.metrics.reloads.tls;
        match self.client.reload(forced) {
            Ok(Reloaded::Unchanged | Reloaded::StillRefused) => {}
            Ok(Reloaded::Swapped) => {
                tls.loaded(SystemTime::now());
                info!(
                    file = %self.path.display(),
                    "redis.tls files re-read: new connections to Redis use them"
                );
            }
            // The message names the key and the file, never its content.
            Err(e) => {
                tls.error.inc();
                error!(
                    file = %self.path.display(),
                    "redis.tls file rejected; the certificates in force stay: {e}"
                );
            }
        }
    }
}

/// Counts the startup load; one reloader per configured file, to watch.
pub(super) fn reloaders(client: &Arc<TlsClient>, metrics: &Arc<Metrics>) -> Vec<Arc<Reloader>> {
    metrics.reloads.tls.loaded(SystemTime::now());
    client
        .files()
        .paths()
        .into_iter()
        .map(|(_, path)| {
            let reloader = Reloader {
                path: path.to_path_buf(),
                client: client.clone(),
                metrics: metrics.clone(),
            };
            Arc::new(reloader)
        })
        .collect()
}
