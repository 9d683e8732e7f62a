//! The `[redis]` section as the store takes it (read and checked by
//! `config`), and keeping the URL's password out of every message.

use std::sync::Arc;
use std::time::Duration;

use super::tls::TlsClient;

/// `[redis]` and `[redis.tls]`. `Debug` hides the URL's password.
#[derive(Clone)]
pub struct RedisSettings {
    /// With the password of `redis.password_file` spliced in, if one was given.
    pub url: String,
    pub key_prefix: String,
    /// Bound on every command, including the wait for a connection.
    pub timeout: Duration,
    pub pool_size: usize,
    /// Longest pause between reconnect attempts.
    pub reconnect_max_delay: Duration,
    /// A connection that leaves a call, then a PING, unanswered this long
    /// is replaced (see `liveness.rs`).
    pub unresponsive_timeout: Duration,
    /// How often readiness pings Redis while something is unhealthy; the
    /// pace of a half-open breaker's trial checks.
    pub probe_interval: Duration,
    /// Micro-batching: how long checks that arrive while another call is in
    /// flight wait to share one EVALSHA. Zero sends every check on its own.
    pub batch_window: Duration,
    /// Most operations sent to Redis and not yet answered; more are
    /// answered by the failure policy without being sent.
    pub max_in_flight: usize,
    /// Inline buckets are also read and written under the name earlier
    /// versions gave them (`StateKey::legacy`), so instances of both
    /// versions count together during a rolling upgrade (`wire.rs`).
    pub legacy_keys: bool,
    /// `[redis.tls]`, read and checked: set only with a `rediss` URL;
    /// `None` with such a URL: the system's roots.
    pub tls: Option<Arc<TlsClient>>,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .field("pool_size", &self.pool_size)
            .field("reconnect_max_delay", &self.reconnect_max_delay)
            .field("unresponsive_timeout", &self.unresponsive_timeout)
            .field("probe_interval", &self.probe_interval)
            .field("batch_window", &self.batch_window)
            .field("max_in_flight", &self.max_in_flight)
            .field("legacy_keys", &self.legacy_keys)
            .field("tls", &self.tls.as_ref().map(|t| t.files()))
            .finish()
    }
}

/// Where the user-info of `url` lies: from after `://` to the last `@`
/// (`None` without an `@`). The last `@`, not the first `/`: a password
/// may hold an unencoded `/`, `?` or `#`, and must still be found.
pub fn userinfo(url: &str) -> (usize, Option<usize>) {
    let start = url.find("://").map_or(0, |i| i + 3);
    (start, url[start..].rfind('@').map(|at| start + at))
}

/// `url` with the password of its user-info replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    match userinfo(url) {
        (start, Some(at)) if url[start..at].contains(':') => {
            let user = url[start..at].split_once(':').map_or("", |(user, _)| user);
            format!("{}{user}:***{}", &url[..start], &url[at..])
        }
        _ => url.to_string(),
    }
}
