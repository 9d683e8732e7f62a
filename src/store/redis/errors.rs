//! Which Redis failures are outages (answered by the failure policy) and
//! which are bugs (surfaced as 500s).

use fred::prelude::*;

use crate::store::StoreError;

/// Server error codes that mean "not now" rather than "never". OOM: Redis is
/// at maxmemory with noeviction and refuses writes, an outage of capacity.
/// MOVED and ASK: a node pool asked a node that no longer owns the slot;
/// the routing is refreshed (see `domains.rs`). CLOCKSKEW is our script's
/// own (`period` in `lua/lib.lua`): Redis's clock is a whole calendar
/// period or more from the instance's, so no period it was sent holds
/// Redis's now; a misconfigured clock, answered by the failure policy.
const TRANSIENT_SERVER_CODES: [&str; 10] = [
    "MOVED",
    "ASK",
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "READONLY",
    "OOM",
    "CLOCKSKEW",
];

/// Maps a fred error to whether the failure policy should answer.
pub(super) fn classify(error: Error) -> StoreError {
    let details = error.details();
    // Server replies start with an upper-case code (ERR, WRONGTYPE, LOADING...);
    // fred's own errors about connection state are sentences ("Failed to
    // route command.", "Too many failed write attempts.").
    let code = details.split_whitespace().next().unwrap_or("");
    let from_server = !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase());
    if super::auth::is_auth(&error) {
        return StoreError::Auth(error.to_string());
    }
    match error.kind() {
        ErrorKind::Timeout => StoreError::Timeout(error.to_string()),
        ErrorKind::IO
        | ErrorKind::Canceled
        | ErrorKind::Routing
        | ErrorKind::Cluster
        | ErrorKind::Backpressure => StoreError::Unavailable(error.to_string()),
        ErrorKind::Unknown if !from_server => StoreError::Unavailable(error.to_string()),
        _ => by_reply(details, error.to_string()),
    }
}

/// Maps the text of a Redis error reply to a kind, by its code. Also for
/// the errors a batched check's `pcall` caught (`lua/ops.lua`), which
/// carry no fred error kind: an OOM or READONLY inside a batch is the same
/// outage as on the direct path, not a bug.
pub(super) fn classify_message(message: &str) -> StoreError {
    by_reply(message, message.to_string())
}

/// `reply`'s kind, carrying `text`.
fn by_reply(reply: &str, text: String) -> StoreError {
    let code = reply.split_whitespace().next().unwrap_or("");
    if super::auth::is_auth_reply(reply) {
        StoreError::Auth(text)
    } else if TRANSIENT_SERVER_CODES.contains(&code) {
        StoreError::Unavailable(text)
    } else {
        StoreError::Backend(text)
    }
}

/// The node asked no longer serves the slot.
pub(super) fn is_moved(error: &Error) -> bool {
    let details = error.details();
    details.starts_with("MOVED ") || details.starts_with("ASK ")
}

pub(super) fn is_noscript(error: &Error) -> bool {
    error.details().starts_with("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(kind: ErrorKind, details: &str) -> &'static str {
        classify(Error::new(kind, details.to_string())).kind()
    }

    #[test]
    fn outages_are_transient_and_bugs_are_not() {
        assert_eq!(kind_of(ErrorKind::Timeout, "Request timed out."), "timeout");
        assert_eq!(kind_of(ErrorKind::IO, "Connection closed."), "unavailable");
        assert_eq!(
            kind_of(ErrorKind::Unknown, "Failed to route command."),
            "unavailable"
        );
        assert_eq!(
            kind_of(ErrorKind::Unknown, "Too many failed write attempts."),
            "unavailable"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "LOADING Redis is loading the dataset in memory"
            ),
            "unavailable"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "OOM command not allowed when used memory > 'maxmemory'."
            ),
            "unavailable"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "ERR Error running script (call to f_x): @user_script:1: boom"
            ),
            "backend"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Auth,
                "WRONGPASS invalid username-password pair or user is disabled."
            ),
            "auth"
        );
        assert_eq!(
            kind_of(ErrorKind::Auth, "NOAUTH Authentication required."),
            "auth"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "NOPERM User bob has no permissions to run the 'evalsha' command"
            ),
            "auth"
        );
        assert_eq!(
            kind_of(
                ErrorKind::InvalidArgument,
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ),
            "backend"
        );
        assert_eq!(
            kind_of(ErrorKind::Unknown, "MOVED 3999 127.0.0.1:6381"),
            "unavailable"
        );
        assert!(is_moved(&Error::new(
            ErrorKind::Unknown,
            "MOVED 3999 127.0.0.1:6381"
        )));
        assert!(!is_moved(&Error::new(ErrorKind::Unknown, "ERR MOVED")));
    }

    /// What a batched check's pcall caught (Redis 7.0's words, no fred kind).
    #[test]
    fn batched_replies_classify_like_direct_ones() {
        let kind = |message: &str| classify_message(message).kind();
        assert_eq!(
            kind("OOM command not allowed when used memory > 'maxmemory'."),
            "unavailable"
        );
        assert_eq!(
            kind("READONLY You can't write against a read only replica."),
            "unavailable"
        );
        assert_eq!(kind("LOADING Redis is loading"), "unavailable");
        assert_eq!(kind("NOPERM User bob has no permissions"), "auth");
        assert_eq!(
            kind("ERR The user executing the script can't run this command or subcommand"),
            "auth"
        );
        // Redis 7.2+, Valkey 8.1, Redis 8.2.
        assert_eq!(
            kind("ERR ACL failure in script: User u has no permissions to run the 'set' command"),
            "auth"
        );
        assert_eq!(
            kind("ERR ACL failure in script: No permissions to access a key"),
            "auth"
        );
        assert_eq!(
            kind("WRONGTYPE Operation against a key holding the wrong kind of value"),
            "backend"
        );
        assert_eq!(kind("user_script:12: attempt to compare nil"), "backend");
        assert_eq!(kind(""), "backend");
    }
}

#[cfg(test)]
mod url_tests {
    use super::super::{RedisOptions, RedisStore};
    use std::time::Duration;

    #[test]
    fn a_bad_url_is_reported_without_its_password() {
        for url in [
            "redis://:hunter2@127.0.0.1:notaport",
            "redis://u:hunter2@[::1:6379",
            "redis-cluster://:hunter2@",
            "redis://:hunter2@host:6379/notadb",
        ] {
            let options = RedisOptions {
                url: url.into(),
                key_prefix: "rk:".into(),
                timeout: Duration::from_millis(100),
                pool_size: 1,
                reconnect_max_delay: Duration::from_millis(100),
                unresponsive_timeout: Duration::from_millis(500),
                batch_window: Duration::ZERO,
                clock: None,
                ttl_pad_ms: 0,
                legacy_keys: false,
            };
            let error = RedisStore::connect(options).err().expect("rejected");
            assert!(!error.to_string().contains("hunter2"), "{url}: {error}");
        }
    }
}
