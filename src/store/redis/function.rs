//! The script as a Redis function (`store::scripts::LIBRARY`): loaded once
//! on every primary, then called with FCALL, which runs only its entry
//! point where EVALSHA runs the whole script.
//!
//! Functions need Redis 7 and an ACL that allows `FUNCTION LOAD` and
//! `FCALL`. Where either is refused, the store says so once in the log and
//! keeps calling the script with EVALSHA, which needs nothing more than it
//! always did. A library is kept by Redis like data: replicated, saved with
//! RDB and AOF, so a failover keeps it; a restart without persistence, or a
//! `FUNCTION FLUSH`, loses it: the call that finds it missing goes by
//! EVALSHA, and so do the next ones until the probe has loaded it again.
//! Redis refuses a function that may write as a whole at maxmemory and on
//! a replica, where it lets EVAL run and refuses only its writes (a release
//! or a denied check writes nothing, or frees memory): such a call is run
//! again by EVALSHA, so those answers stay what they were.

use std::sync::atomic::{AtomicBool, Ordering};

use fred::prelude::*;

use super::Inner;
use super::errors::classify;
use crate::store::{StoreError, scripts};

/// Whether calls use the function; whether it is off for a reason that
/// may pass (a timeout, OOM, a replica, a library lost with the data), so
/// the probe loads it again; and whether the log has said that functions
/// cannot be used.
#[derive(Default)]
pub(super) struct Functions {
    usable: AtomicBool,
    retry: AtomicBool,
    warned: AtomicBool,
}

impl Functions {
    pub(super) fn usable(&self) -> bool {
        self.usable.load(Ordering::Acquire)
    }

    /// Off, for a reason that may pass: the probe loads it again.
    pub(super) fn should_retry(&self) -> bool {
        !self.usable() && self.retry.load(Ordering::Acquire)
    }

    /// Off until the probe loads it again.
    fn pause(&self) {
        self.usable.store(false, Ordering::Release);
        self.retry.store(true, Ordering::Release);
    }
}

/// What an FCALL's failure means for the function.
enum Failed {
    /// The server does not hold it (a restart without persistence,
    /// `FUNCTION FLUSH`, a new node), or refused this call as a whole where
    /// EVAL would have run it (OOM: a script that may write is refused
    /// whole at maxmemory, where EVAL only refuses the writes; READONLY on
    /// a replica): EVALSHA for this call, and the probe loads it again.
    Paused,
    /// Refused for good (an ACL without FCALL, a server without it).
    Refused,
    /// Anything else: the call's own error.
    Other,
}

fn failed(error: &Error) -> Failed {
    let details = error.details();
    if details.contains("Function not found")
        || details.starts_with("OOM")
        || details.starts_with("READONLY")
    {
        Failed::Paused
    } else if refuses_functions(details) {
        Failed::Refused
    } else {
        Failed::Other
    }
}

/// A refusal no retry will change: an ACL without the command, a server
/// without it, a library it cannot compile.
fn refuses_functions(details: &str) -> bool {
    details.starts_with("NOPERM")
        || details.contains("unknown command")
        || details.contains("unknown subcommand")
        || details.contains("Error compiling")
}

impl Inner {
    /// The function's name, for FCALL.
    pub(super) fn function_name(&self) -> &'static str {
        scripts::LIBRARY.0.as_str()
    }

    /// Loads the library through `client` (every primary of a cluster).
    /// Never fails its caller, since EVALSHA still works: a refusal
    /// (NOPERM, an unknown command before Redis 7) turns the function off
    /// for this process; anything else (a timeout, OOM, a read-only
    /// replica) turns it off until the next probe loads it again. An ACL
    /// that allows the load but not FCALL is found by the first call.
    pub(super) async fn load_function(&self, client: &Client) {
        let code = scripts::LIBRARY.1.as_str();
        let loaded: Result<Value, Error> = client.function_load_cluster(true, code).await;
        match loaded {
            Ok(_) => {
                self.functions.retry.store(false, Ordering::Release);
                self.functions.usable.store(true, Ordering::Release);
            }
            Err(e) if refuses_functions(e.details()) => self.refused(&classify(e)),
            Err(e) => {
                tracing::debug!(error = %classify(e), "loading the Redis function failed; the next probe retries");
                self.functions.pause();
            }
        }
    }

    /// After an FCALL that failed as `failed` says: whether to run the
    /// call again by EVALSHA. A paused function is loaded again by the
    /// probe (`RedisStore::ping`), not by this call: loading inline would
    /// make the call wait for it, and a call dropped meanwhile (a client
    /// hanging up) would leave the load half done.
    pub(super) fn fcall_failed(&self, error: &Error) -> bool {
        match failed(error) {
            Failed::Paused => {
                self.functions.pause();
                true
            }
            Failed::Refused => {
                self.refused(&classify(error.clone()));
                true
            }
            Failed::Other => false,
        }
    }

    /// Functions cannot be used here (`e` says why): EVALSHA from now on.
    fn refused(&self, e: &StoreError) {
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
}
