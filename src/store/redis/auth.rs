//! Credentials that Redis refuses while connecting never reach a caller as
//! such: fred keeps retrying the connection, and the commands queued behind
//! it time out. A wrong password would read as "store timed out" forever.
//! So each client's connection errors are watched; an authentication
//! failure is remembered until a connection succeeds, and meanwhile turns
//! the outage errors callers see into [`StoreError::Auth`].
//!
//! Any other connection error (refused, reset, unresolvable) is remembered
//! the same way: a call that then times out waited for a connection that
//! never came, so it is reported as [`StoreError::Unavailable`] with the
//! connection's error, not as a slow Redis.

use std::sync::{Arc, Mutex};

use fred::prelude::*;
use tokio::sync::broadcast::error::RecvError;

use crate::store::StoreError;

/// Redis's replies to bad credentials (WRONGPASS, NOAUTH) and to a user
/// whose ACL lacks a command or key (NOPERM).
pub(super) fn is_auth(error: &Error) -> bool {
    *error.kind() == ErrorKind::Auth || is_auth_reply(error.details())
}

/// The same, from a reply's text. Inside a script, an ACL denial is not
/// NOPERM but an ERR, worded by version: Redis 7.0 says "ERR The user
/// executing the script can't run this command or subcommand" (or "can't
/// access at least one of the keys"); Redis 7.2 and later, Valkey 8.1 and
/// Redis 8.2 among them, say "ERR ACL failure in script: User u has no
/// permissions to run the 'set' command" (or "No permissions to access a
/// key"). Either is the same misconfiguration.
pub(super) fn is_auth_reply(reply: &str) -> bool {
    let code = reply.split_whitespace().next().unwrap_or("");
    matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM")
        || reply.starts_with("ERR The user executing the script can't")
        || reply.starts_with("ERR ACL failure in script")
}

#[derive(Default)]
pub(super) struct AuthWatch {
    /// Why the last connection attempt was refused, if it was.
    refused: Mutex<Option<String>>,
    /// The last connection error of another kind since the last connect.
    unreachable: Mutex<Option<String>>,
}

impl AuthWatch {
    /// Starts one listener per client of `pool`. They hold only the
    /// clients' event receivers, so they end when the pool is dropped.
    pub(super) fn spawn(pool: &Pool) -> Arc<AuthWatch> {
        let watch = Arc::new(AuthWatch::default());
        for client in pool.clients() {
            let (mut errors, mut connects) = (client.error_rx(), client.reconnect_rx());
            let watch = watch.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        error = errors.recv() => match error {
                            Ok((error, _)) if is_auth(&error) => watch.set(Some(error.details().to_string())),
                            Ok((error, _)) => watch.set_unreachable(error.to_string()),
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
        }
        *lock(&self.refused) = refused;
    }

    fn set_unreachable(&self, why: String) {
        *lock(&self.unreachable) = Some(why);
    }

    /// `error`, or the refused credentials behind it: a timeout or an
    /// unreachable store while the last connection attempt was refused.
    pub(super) fn explain(&self, error: StoreError) -> StoreError {
        if !error.store_is_down() || matches!(error, StoreError::Auth(_)) {
            return error;
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
