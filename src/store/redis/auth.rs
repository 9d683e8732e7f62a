//! Credentials that Redis refuses while connecting never reach a caller as
//! such: fred keeps retrying the connection, and the commands queued behind
//! it time out. A wrong password would read as "store timed out" forever.
//! So each client's connection errors are watched; an authentication
//! failure is remembered until a connection succeeds, and meanwhile turns
//! the outage errors callers see into [`StoreError::Auth`].
//!
//! A failed TLS handshake (`errors::tls_failure`) is remembered the same
//! way and turns them into [`StoreError::Tls`], with what to fix. A
//! handshake that only times out is what a plaintext port gives (Redis
//! waits for a line end in the ClientHello); the port is then sent a
//! plain `PING`, and a RESP answer names that mistake.
//!
//! Any other connection error (refused, reset, unresolvable) is remembered
//! the same way: a call that then times out waited for a connection that
//! never came, so it is reported as [`StoreError::Unavailable`] with the
//! connection's error, not as a slow Redis.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::broadcast::error::RecvError;

use super::errors::{is_auth, tls_failure};
use crate::store::StoreError;
use crate::tasks::Tasks;

#[derive(Default)]
pub(super) struct AuthWatch {
    /// The store's tasks, for the plaintext probe.
    tasks: Tasks,
    /// Why the last connection attempt was refused, if it was.
    refused: Mutex<Option<String>>,
    /// The last connection error of another kind since the last connect.
    unreachable: Mutex<Option<String>>,
    /// What to fix, when the last connection attempt failed its TLS
    /// handshake.
    tls: Mutex<Option<String>>,
    /// The clients connect with TLS: a handshake that times out is worth
    /// a look at what answers on that port.
    uses_tls: bool,
    /// A look at a port is under way (one at a time).
    probing: AtomicBool,
}

/// What a TLS client finds at a plaintext Redis port: its ClientHello
/// waits there for a line end that never comes, so the handshake only
/// times out.
const PLAINTEXT_HINT: &str = "the server did not answer in TLS: the port is a plaintext one? use \
     redis:// or the server's tls-port";

impl AuthWatch {
    /// Starts one listener per client of `pool` on the store's `tasks`:
    /// they end when the pool is dropped, or at the store's `quit`.
    pub(super) fn spawn(pool: &Pool, tasks: &Tasks) -> Arc<AuthWatch> {
        let watch = Arc::new(AuthWatch {
            tasks: tasks.clone(),
            uses_tls: pool
                .clients()
                .iter()
                .any(|c| c.client_config().tls.is_some()),
            ..Default::default()
        });
        for client in pool.clients() {
            let (mut errors, mut connects) = (client.error_rx(), client.reconnect_rx());
            let watch = watch.clone();
            // fred's connection errors name no server: the configured one.
            let configured = client.client_config().server.hosts().into_iter().next();
            tasks.spawn_until_shutdown(async move {
                loop {
                    tokio::select! {
                        error = errors.recv() => match error {
                            Ok((error, server)) => watch.on_error(&error, server.or_else(|| configured.clone())),
                            Err(RecvError::Lagged(_)) => {}
                            Err(RecvError::Closed) => return,
                        },
                        connected = connects.recv() => match connected {
                            Ok(_) => watch.set(None),
                            Err(RecvError::Lagged(_)) => {}
                            Err(RecvError::Closed) => return,
                        },
                    }
                }
            });
        }
        watch
    }

    fn set(&self, refused: Option<String>) {
        if refused.is_none() {
            *lock(&self.unreachable) = None;
            *lock(&self.tls) = None;
        }
        *lock(&self.refused) = refused;
    }

    fn on_error(self: &Arc<Self>, error: &Error, server: Option<Server>) {
        if is_auth(error) {
            return self.set(Some(error.details().to_string()));
        }
        if let Some(fix) = tls_failure(error) {
            *lock(&self.tls) = Some(fix);
            return;
        }
        *lock(&self.unreachable) = Some(error.to_string());
        // A timeout says nothing new about TLS; anything else (refused,
        // reset) means the TLS failure is no longer what stops us.
        if *error.kind() != ErrorKind::Timeout {
            *lock(&self.tls) = None;
        } else if let (true, Some(server)) = (self.uses_tls, server) {
            self.look_for_plaintext(server);
        }
    }

    /// Whether a plaintext Redis answers at `server`: a `PING` (no
    /// credential) over plain TCP, answered in RESP. A TLS port answers
    /// with an alert or closes.
    fn look_for_plaintext(self: &Arc<Self>, server: Server) {
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let watch = self.clone();
        self.tasks.spawn_until_shutdown(async move {
            let answer = tokio::time::timeout(Duration::from_millis(500), async {
                let mut stream = TcpStream::connect((&*server.host, server.port)).await?;
                stream.write_all(b"PING\r\n").await?;
                let mut first = [0u8; 1];
                stream.read_exact(&mut first).await.map(|_| first[0])
            })
            .await;
            if matches!(answer, Ok(Ok(b'+' | b'-'))) {
                *lock(&watch.tls) = Some(PLAINTEXT_HINT.to_string());
            }
            watch.probing.store(false, Ordering::Release);
        });
    }

    /// `error`, or the refused credentials behind it: a timeout or an
    /// unreachable store while the last connection attempt was refused.
    pub(super) fn explain(&self, error: StoreError) -> StoreError {
        if !error.store_is_down() || matches!(error, StoreError::Auth(_) | StoreError::Tls(_)) {
            return error;
        }
        if let Some(fix) = &*lock(&self.tls) {
            return StoreError::Tls(format!("{fix} (while connecting)"));
        }
        if let Some(reason) = &*lock(&self.refused) {
            // Redis's own words; they never contain the password.
            return StoreError::Auth(format!("{reason} (while connecting)"));
        }
        match (&error, &*lock(&self.unreachable)) {
            (StoreError::Timeout(_), Some(why)) => {
                StoreError::Unavailable(format!("not connected: {why}"))
            }
            _ => error,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
