//! Re-reading TLS files while the service runs: the `[redis.tls]` files
//! (the Redis client's), and `[server.tls]` and `[grpc.tls]` (our
//! listeners'). One watch per file (they may sit in different directories,
//! a Kubernetes Secret each), every one re-reading all of its set, since a
//! certificate and its key change together and must be judged together.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tracing::{error, info};

use crate::metrics::ReloadMetrics;
use crate::store::redis::tls::TlsClient;
use crate::tls::server::{Listener, ServerTls};
use crate::tls::{Reloaded, TlsFileError};
use crate::watch;

/// One set of TLS files, re-read whole.
pub(super) trait TlsSet: Send + Sync + 'static {
    /// Re-reads the files; swaps in changed ones that parse.
    fn reload(&self, forced: bool) -> Result<Reloaded, TlsFileError>;
    /// The files, each with the key that named it.
    fn paths(&self) -> Vec<(&'static str, &Path)>;
}

impl TlsSet for TlsClient {
    fn reload(&self, forced: bool) -> Result<Reloaded, TlsFileError> {
        TlsClient::reload(self, forced)
    }

    fn paths(&self) -> Vec<(&'static str, &Path)> {
        self.files().paths()
    }
}

impl TlsSet for ServerTls {
    fn reload(&self, forced: bool) -> Result<Reloaded, TlsFileError> {
        ServerTls::reload(self, forced)
    }

    fn paths(&self) -> Vec<(&'static str, &Path)> {
        ServerTls::paths(self)
    }
}

/// What a set is, for log lines, and who uses a swap.
#[derive(Clone, Copy)]
pub(super) struct Named {
    /// "redis.tls file", "server.tls file".
    pub what: &'static str,
    /// Who uses the new files: "new connections to Redis use them".
    pub swapped: &'static str,
}

pub(super) const REDIS: Named = Named {
    what: "redis.tls file",
    swapped: "new connections to Redis use them",
};

/// The names of a listener's set.
pub(super) fn listener(listener: Listener) -> Named {
    match listener {
        Listener::Http => Named {
            what: "server.tls file",
            swapped: "new HTTPS connections get the new certificate; open ones keep theirs",
        },
        Listener::Grpc => Named {
            what: "grpc.tls file",
            swapped: "new gRPC connections get the new certificate; open ones keep theirs",
        },
    }
}

/// Re-reads a set of TLS files when the one at `path` changes.
pub(super) struct Reloader {
    path: PathBuf,
    set: Arc<dyn TlsSet>,
    named: Named,
    metrics: ReloadMetrics,
}

impl watch::Reload for Reloader {
    fn path(&self) -> &Path {
        &self.path
    }

    fn what(&self) -> &'static str {
        self.named.what
    }

    fn reread(&self, forced: bool) {
        match self.set.reload(forced) {
            Ok(Reloaded::Unchanged | Reloaded::StillRefused) => {}
            Ok(Reloaded::Swapped) => {
                self.metrics.loaded(SystemTime::now());
                info!(
                    file = %self.path.display(),
                    "{}s re-read: {}", self.named.what, self.named.swapped
                );
            }
            // The message names the key and the file, never its content.
            Err(e) => {
                self.metrics.error.inc();
                error!(
                    file = %self.path.display(),
                    "{} rejected; the certificates in force stay: {e}", self.named.what
                );
            }
        }
    }
}

/// Counts the startup load; one reloader per configured file, to watch.
pub(super) fn reloaders(
    set: Arc<dyn TlsSet>,
    named: Named,
    metrics: &ReloadMetrics,
) -> Vec<Arc<Reloader>> {
    metrics.loaded(SystemTime::now());
    set.paths()
        .into_iter()
        .map(|(_, path)| {
            Arc::new(Reloader {
                path: path.to_path_buf(),
                set: set.clone(),
                named,
                metrics: metrics.clone(),
            })
        })
        .collect()
}
