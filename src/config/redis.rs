//! Reading the `[redis]` and `[redis.tls]` sections into the store's
//! [`RedisSettings`], and keeping the password out of every message.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use super::reader::Reader;
use crate::domain::parse_duration_us;
use crate::store::redis::RedisSettings;
use crate::store::redis::settings::{redact_url, userinfo};
use crate::store::redis::tls::{TlsClient, TlsFiles, url_uses_tls};

/// The `[redis]` section: `Some(None)` when the URL is empty (embedded store),
/// `None` when any key is invalid.
pub(super) fn read_redis(r: &mut Reader) -> Option<Option<RedisSettings>> {
    let url = r.parse_secret("redis.url", redact_url, parse_url);
    let password_file = r.parse("redis.password_file", |s| Ok(s.to_string()));
    let key_prefix = r.parse("redis.key_prefix", |s| {
        if s.contains(['{', '}']) || s.len() > 64 {
            Err("must be at most 64 bytes without '{' or '}' (they would move the hash tag)".into())
        } else {
            Ok(s.to_string())
        }
    });
    let timeout = r.duration("redis.timeout");
    let pool_size = r.count("redis.pool_size", 1, 64);
    let reconnect_max_delay = r.duration("redis.reconnect_max_delay");
    // Below ~100 ms the kernel's TCP_USER_TIMEOUT would cut connections
    // over a single lost packet's retransmission.
    let unresponsive_timeout = r.parse("redis.unresponsive_timeout", |s| {
        within(s, 100_000..=600_000_000, "must be from 100ms to 10m")
    });
    let probe_interval = r.duration("redis.probe_interval");
    let batch_window = r.parse("redis.batch_window", |s| {
        let why = "must be at most 10ms (e.g. \"50us\"); 0us turns batching off";
        within(s, 0..=10_000, why)
    });
    let max_in_flight = r.count("redis.max_in_flight", 1, 1_000_000);
    let legacy_keys = r.boolean("redis.legacy_keys");
    let tls = read_tls(r, url.as_deref());
    let url = with_password_file(r, url?, password_file?)?;
    let settings = RedisSettings {
        url,
        key_prefix: key_prefix?,
        timeout: timeout?,
        pool_size: pool_size?,
        reconnect_max_delay: reconnect_max_delay?,
        unresponsive_timeout: unresponsive_timeout?,
        probe_interval: probe_interval?,
        batch_window: batch_window?,
        max_in_flight: max_in_flight?,
        legacy_keys: legacy_keys?,
        tls: tls?,
    };
    Some((!settings.url.is_empty()).then_some(settings))
}

/// A duration whose microseconds lie in `range`.
fn within(s: &str, range: RangeInclusive<u64>, why: &str) -> Result<Duration, String> {
    let us = parse_duration_us(s)?;
    range
        .contains(&us)
        .then(|| Duration::from_micros(us))
        .ok_or_else(|| why.into())
}

/// `redis.url`: empty, or a URL of a known scheme that the client library
/// accepts. Its messages never quote the URL: the caller shows it redacted.
fn parse_url(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    let schemes = [
        "redis://",
        "rediss://",
        "redis-cluster://",
        "rediss-cluster://",
        "redis-sentinel://",
        "rediss-sentinel://",
    ];
    if !schemes.iter().any(|p| s.starts_with(p)) {
        return Err("must be empty or a redis[s]://, redis[s]-cluster:// or \
             redis[s]-sentinel:// URL"
            .into());
    }
    // Let the client library judge the URL, so a URL accepted here is
    // one it can use; without the TLS `s`, as the store hands it over
    // (it sets TLS up itself: `store::redis::client`).
    // fred's message may quote parts of the URL: never echo it.
    let plain = s.replacen("rediss", "redis", url_uses_tls(s) as usize);
    fred::prelude::Config::from_url(&plain)
        .map(|_| s.to_string())
        .map_err(|_| {
            "is not a usable Redis URL; use redis://[user[:password]@]host:port[/db], \
             rediss://, redis-cluster:// or redis-sentinel://"
                .into()
        })
}

/// `[redis.tls]`: refused with a URL without TLS (never a silent
/// downgrade) or without a URL, and its files read and checked now, so a
/// bad one stops startup naming its key; with a `rediss` URL and no
/// settings, the system's roots. `Some(None)`: no TLS.
fn read_tls(r: &mut Reader, url: Option<&str>) -> Option<Option<Arc<TlsClient>>> {
    // Every key asked for before any `?`: one left unasked would be unknown.
    let ca_file = r.path("redis.tls.ca_file");
    let cert_file = r.path("redis.tls.cert_file");
    let key_file = r.path("redis.tls.key_file");
    let server_name = r.parse("redis.tls.server_name", |s| {
        Ok::<_, String>((!s.is_empty()).then(|| s.to_string()))
    });
    let files = TlsFiles {
        ca_file: ca_file?,
        cert_file: cert_file?,
        key_file: key_file?,
        server_name: server_name?,
    };
    let url = url?;
    let mut refuse = |key: &str, m: &str| {
        r.problem(key, m);
        None
    };
    let set = files != TlsFiles::default();
    if !set && !url_uses_tls(url) {
        return Some(None);
    }
    if !url_uses_tls(url) {
        let key = files
            .paths()
            .first()
            .map_or("redis.tls.server_name", |(k, _)| k);
        return refuse(
            key,
            "is set, but redis.url does not use TLS: use rediss://, rediss-cluster:// or \
             rediss-sentinel://, or remove the [redis.tls] settings",
        );
    }
    match (&files.cert_file, &files.key_file) {
        (Some(_), None) => return refuse("redis.tls.key_file", "must be set with cert_file"),
        (None, Some(_)) => return refuse("redis.tls.cert_file", "must be set with key_file"),
        _ => {}
    }
    match TlsClient::load(files) {
        Ok(client) => Some(Some(Arc::new(client))),
        Err(e) => refuse(e.key, &e.message),
    }
}

/// Splices the password read from `redis.password_file` into the URL, so it
/// never has to appear in the environment or on a command line (`ps`).
fn with_password_file(r: &mut Reader, url: String, path: String) -> Option<String> {
    if path.is_empty() || url.is_empty() {
        return Some(url);
    }
    let mut problem = |m: String| {
        r.problem("redis.password_file", m);
        None
    };
    // The watched files' reader: a FIFO here would hang startup, and a
    // link to /dev/zero would read until memory ran out.
    let bytes = match crate::watch::read::read_regular(std::path::Path::new(&path), 64 * 1024) {
        Ok(bytes) => bytes,
        Err(e) => return problem(format!("cannot read {path}: {e}")),
    };
    let password = match String::from_utf8(bytes) {
        Ok(text) => text.trim_end_matches(['\r', '\n']).to_string(),
        Err(_) => return problem(format!("{path} is not UTF-8")),
    };
    if password.is_empty() {
        return problem(format!("{path} is empty"));
    }
    let password = percent_encode(&password);
    Some(match userinfo(&url) {
        (start, Some(at)) if url[start..at].contains(':') => {
            return problem("redis.url has a password too: give it in one place".into());
        }
        (_, Some(at)) => format!("{}:{password}{}", &url[..at], &url[at..]),
        (start, None) => format!("{}:{password}@{}", &url[..start], &url[start..]),
    })
}

/// Percent-encodes everything but RFC 3986's unreserved characters; the
/// Redis client decodes the URL's password again.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
