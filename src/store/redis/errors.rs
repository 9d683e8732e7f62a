//! Which Redis failures are outages (answered by the failure policy) and
//! which are bugs (surfaced as 500s). Refused credentials and permissions
//! (`is_auth`) are a misconfiguration, answered by the failure policy too;
//! `auth.rs` watches for them while connecting.

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
    if is_auth(&error) {
        return StoreError::Auth(error.to_string());
    }
    if let Some(why) = tls_failure(&error) {
        return StoreError::Tls(why);
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
    if is_auth_reply(reply) {
        StoreError::Auth(text)
    } else if TRANSIENT_SERVER_CODES.contains(&code) {
        StoreError::Unavailable(text)
    } else {
        StoreError::Backend(text)
    }
}

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

/// What to fix, when `error` is a failed TLS handshake. fred reports a
/// handshake's failure as an IO error carrying the `Debug` text of
/// rustls's error (`InvalidCertificate(UnknownIssuer)`,
/// `AlertReceived(CertificateRequired)`, `InvalidMessage(..)`), or as
/// [`ErrorKind::Tls`]; the text is matched to say what to do.
pub(super) fn tls_failure(error: &Error) -> Option<String> {
    let details = error.details();
    let said = |needle: &str| details.contains(needle);
    let cert = said("InvalidCertificate(");
    let why = if cert && (said("UnknownIssuer") || said("BadSignature")) {
        "the server's certificate is not signed by a trusted CA: set redis.tls.ca_file to the CA \
         that signed it"
    } else if cert && (said("Expired") || said("NotValidYet")) {
        "the server's certificate has expired or is not yet valid: renew it on the server \
         (or check this host's clock)"
    } else if cert && said("NotValidForName") {
        "the server's certificate does not hold the URL's host: set redis.tls.server_name to a \
         name it holds"
    } else if cert {
        "the server's certificate was refused: check redis.tls.ca_file and the server's \
         certificate"
    } else if said("AlertReceived") {
        "the server refused the handshake (our client certificate?): set redis.tls.cert_file \
         and redis.tls.key_file to a certificate its tls-ca-cert-file trusts"
    } else if said("InvalidMessage") || said("InvalidContentType") || said("CorruptMessage") {
        "the server did not answer in TLS: is the port a plaintext one? use redis:// or the \
         server's tls-port"
    } else if *error.kind() == ErrorKind::Tls || said("PeerIncompatible") || said("PeerMisbehaved")
    {
        "the TLS handshake failed: check the [redis.tls] settings and the server's TLS settings"
    } else {
        return None;
    };
    Some(why.to_string())
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
    fn timeouts_and_lost_connections_are_outages() {
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
    }

    #[test]
    fn a_server_loading_full_or_moved_is_an_outage() {
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
            kind_of(ErrorKind::Unknown, "MOVED 3999 127.0.0.1:6381"),
            "unavailable"
        );
        assert!(is_moved(&Error::new(
            ErrorKind::Unknown,
            "MOVED 3999 127.0.0.1:6381"
        )));
        assert!(!is_moved(&Error::new(ErrorKind::Unknown, "ERR MOVED")));
    }

    #[test]
    fn refused_credentials_and_permissions_are_auth() {
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
    }

    #[test]
    fn script_errors_and_wrong_types_are_bugs() {
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "ERR Error running script (call to f_x): @user_script:1: boom"
            ),
            "backend"
        );
        assert_eq!(
            kind_of(
                ErrorKind::InvalidArgument,
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ),
            "backend"
        );
    }

    /// fred carries rustls's errors as IO errors with their `Debug` text.
    #[test]
    fn tls_handshake_failures_are_named_with_what_to_fix() {
        let fix = |details: &str| {
            let error = Error::new(ErrorKind::IO, details.to_string());
            assert_eq!(classify(error.clone()).kind(), "tls", "{details}");
            tls_failure(&error).unwrap()
        };
        let io = |inner: &str| format!("Custom {{ kind: InvalidData, error: {inner} }}");
        assert!(fix(&io("InvalidCertificate(UnknownIssuer)")).contains("redis.tls.ca_file"));
        let expired = "InvalidCertificate(ExpiredContext { time: 1, not_after: 0 })";
        assert!(fix(&io(expired)).contains("expired"));
        let name = "InvalidCertificate(NotValidForNameContext { expected: x, presented: [] })";
        assert!(fix(&io(name)).contains("redis.tls.server_name"));
        let alert = "AlertReceived(CertificateRequired)";
        assert!(fix(&io(alert)).contains("redis.tls.cert_file"));
        assert!(fix(&io("InvalidMessage(InvalidContentType)")).contains("plaintext"));
        let plain = Error::new(ErrorKind::IO, "Connection reset by peer".to_string());
        assert!(tls_failure(&plain).is_none());
        assert_eq!(classify(plain).kind(), "unavailable");
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
    use super::super::{DEFAULT_MAX_IN_FLIGHT, RedisSettings, RedisStore};
    use std::time::Duration;

    #[test]
    fn a_bad_url_is_reported_without_its_password() {
        for url in [
            "redis://:hunter2@127.0.0.1:notaport",
            "redis://u:hunter2@[::1:6379",
            "redis-cluster://:hunter2@",
            "redis://:hunter2@host:6379/notadb",
        ] {
            let options = RedisSettings {
                url: url.into(),
                key_prefix: "rk:".into(),
                timeout: Duration::from_millis(100),
                pool_size: 1,
                reconnect_max_delay: Duration::from_millis(100),
                unresponsive_timeout: Duration::from_millis(500),
                probe_interval: Duration::from_millis(250),
                batch_window: Duration::ZERO,
                max_in_flight: DEFAULT_MAX_IN_FLIGHT,
                legacy_keys: false,
                tls: None,
            };
            let error = RedisStore::connect(options).err().expect("rejected");
            assert!(!error.to_string().contains("hunter2"), "{url}: {error}");
        }
    }
}
