//! The script as a Redis function (`store::scripts::LIBRARY`): loaded once
//! on every primary, then called with FCALL, which runs only its entry
//! point where EVALSHA runs the whole script.
//!
//! Functions need Redis 7 and an ACL that allows `FUNCTION LOAD` and
//! `FCALL`. Where either is refused, the store says so once in the log and
//! keeps calling the script with EVALSHA, which needs nothing more than it
//! always did. A library is kept by Redis like data: replicated, saved with
//! RDB and AOF, so a failover keeps it; a restart without persistence, or a
//! `FUNCTION FLUSH`, loses it, and the next call that finds it missing
//! loads it again while calls go on with EVALSHA meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};

use fred::prelude::*;

use super::Inner;
use super::errors::classify;
use crate::store::{StoreError, scripts};

/// Whether calls use the function; whether loading it failed for a reason
/// that may pass (a timeout, OOM, a replica), so the next probe tries
/// again; whether a reload is under way; and whether the log has said that
/// functions cannot be used.
#[derive(Default)]
pub(super) struct Functions {
    usable: AtomicBool,
    retry: AtomicBool,
    loading: AtomicBool,
    warned: AtomicBool,
}

impl Functions {
    pub(super) fn usable(&self) -> bool {
        self.usable.load(Ordering::Acquire)
    }

    /// Not usable, for a reason that may pass: the probe loads it again.
    pub(super) fn should_retry(&self) -> bool {
        !self.usable() && self.retry.load(Ordering::Acquire)
    }
}

/// FCALL of a function the server does not hold.
pub(super) fn is_missing(error: &Error) -> bool {
    error.details().contains("Function not found")
}

/// FCALL refused by the user's ACL (which allowed FUNCTION LOAD).
pub(super) fn is_refused(error: &Error) -> bool {
    let details = error.details();
    details.starts_with("NOPERM") && details.contains("'fcall'")
}

impl Inner {
    /// The function's name, for FCALL.
    pub(super) fn function_name(&self) -> &'static str {
        scripts::LIBRARY.0.as_str()
    }

    /// Loads the library through `client` (every primary of a cluster).
    /// Never fails its caller, since EVALSHA still works: a refusal
    /// (NOPERM, an unknown command before Redis 7) turns the function off
    /// for this process; an outage (a timeout, OOM, a read-only replica)
    /// turns it off until the next probe loads it again. An ACL that allows
    /// the load but not FCALL is found by the first call (`refused`).
    pub(super) async fn load_function(&self, client: &Client) {
        let code = scripts::LIBRARY.1.as_str();
        let loaded: Result<Value, Error> = client.function_load_cluster(true, code).await;
        match loaded.map_err(classify) {
            Ok(_) => {
                self.functions.retry.store(false, Ordering::Release);
                self.functions.usable.store(true, Ordering::Release);
            }
            Err(e @ (StoreError::Timeout(_) | StoreError::Unavailable(_))) => {
                tracing::debug!(error = %e, "loading the Redis function failed; the next probe retries");
                self.functions.usable.store(false, Ordering::Release);
                self.functions.retry.store(true, Ordering::Release);
            }
            Err(e) => self.refused(&e),
        }
    }

    /// Functions cannot be used here (`e` says why): EVALSHA from now on.
    pub(super) fn refused(&self, e: &dyn std::fmt::Display) {
        self.functions.usable.store(false, Ordering::Release);
        self.functions.retry.store(false, Ordering::Release);
        if !self.functions.warned.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                error = %e,
                "Redis functions cannot be used (Redis 7 and an ACL allowing FUNCTION LOAD and \
                 FCALL are needed): calling the script with EVALSHA, about 3 µs more Redis time \
                 per call"
            );
        }
    }

    /// After an FCALL found the function missing (a restart without
    /// persistence, `FUNCTION FLUSH`, a new node): calls use EVALSHA until
    /// one reload, by the first call that noticed, puts it back.
    pub(super) async fn reload_function(&self, client: &Client) {
        self.functions.usable.store(false, Ordering::Release);
        self.functions.retry.store(true, Ordering::Release);
        if self.functions.loading.swap(true, Ordering::AcqRel) {
            return;
        }
        self.load_function(client).await;
        self.functions.loading.store(false, Ordering::Release);
    }
}
