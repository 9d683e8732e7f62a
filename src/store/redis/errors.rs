//! Which Redis failures are outages (answered by the failure policy) and
//! which are bugs (surfaced as 500s).

use fred::prelude::*;

use crate::store::StoreError;

/// Server error codes that mean "not now" rather than "never". OOM: Redis is
/// at maxmemory with noeviction and refuses writes, an outage of capacity.
const TRANSIENT_SERVER_CODES: [&str; 7] = [
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "READONLY",
    "OOM",
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
        _ if TRANSIENT_SERVER_CODES.contains(&code) => StoreError::Unavailable(error.to_string()),
        ErrorKind::Unknown if !from_server => StoreError::Unavailable(error.to_string()),
        _ => StoreError::Backend(error.to_string()),
    }
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
                batch_window: Duration::ZERO,
                clock: None,
                ttl_pad_ms: 0,
            };
            let error = RedisStore::connect(options).err().expect("rejected");
            assert!(!error.to_string().contains("hunter2"), "{url}: {error}");
        }
    }
}
