//! Settings, layered: `config/default.toml` (compiled in) → `--config FILE`
//! → `RATEKEEPER_<SECTION>__<KEY>` environment variables → CLI flags.
//!
//! Every key is read and checked on its own so that one run reports every
//! bad or unknown key at once, instead of stopping at the first.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use config::{Config, Environment, File, FileFormat, Map, Value, ValueKind};

use crate::domain::{Bounds, parse_duration_us};
use crate::domain::{FailureMode, FailurePolicy};
use crate::limiter::breaker::BreakerConfig;

/// The reference configuration: every key with its default and a comment.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub limits: Bounds,
    /// `None` runs the embedded store.
    pub redis: Option<RedisSettings>,
    pub failure: FailurePolicy,
    /// When a failure domain's circuit breaker opens. Its `trial_interval`
    /// is `redis.probe_interval`, set when the application is built.
    pub breaker: BreakerConfig,
    /// Entries of the local deny cache; 0 turns it off.
    pub deny_cache_capacity: usize,
    pub memory: MemorySettings,
    pub log: LogSettings,
    /// `RATEKEEPER_*` environment variables that are not of the
    /// `RATEKEEPER_<SECTION>__<KEY>` shape and were ignored (logged at debug
    /// once telemetry is up).
    pub ignored_env: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    pub shutdown_timeout: Duration,
    /// A request head (line and headers) must arrive within this, counted
    /// from the connection's start or from the first byte of a later request.
    pub header_read_timeout: Duration,
    /// A request body must arrive whole within this after its head.
    pub body_read_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub keepalive_timeout: Duration,
    /// A connection whose client reads nothing of a response for this long
    /// is closed.
    pub write_timeout: Duration,
    /// Connections beyond this are refused at once.
    pub max_connections: usize,
}

/// Redis settings. `Debug` hides the URL's password.
#[derive(Clone)]
pub struct RedisSettings {
    /// With the password of `redis.password_file` spliced in, if one was given.
    pub url: String,
    pub key_prefix: String,
    pub timeout: Duration,
    pub pool_size: usize,
    pub reconnect_max_delay: Duration,
    pub probe_interval: Duration,
    /// Micro-batching window; zero turns batching off.
    pub batch_window: Duration,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .field("pool_size", &self.pool_size)
            .field("reconnect_max_delay", &self.reconnect_max_delay)
            .field("probe_interval", &self.probe_interval)
            .field("batch_window", &self.batch_window)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct MemorySettings {
    pub sweep_interval: Duration,
    /// At most about this many keys; new keys beyond it get the failure policy.
    pub max_keys: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Auto,
    Pretty,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: String,
}

/// Whether an environment variable is configuration: `RATEKEEPER_` then
/// `<SECTION>__<KEY>`. Kubernetes injects `RATEKEEPER_SERVICE_HOST`,
/// `RATEKEEPER_PORT_8080_TCP_ADDR` and the like for a Service named
/// `ratekeeper`; they have no `__` and must not stop the service. A typo of
/// the documented shape (`RATEKEEPER_REDIS__TMEOUT`) still is an error.
fn is_config_var(name: &str) -> bool {
    name.strip_prefix("RATEKEEPER_")
        .and_then(|rest| rest.split_once("__"))
        .is_some_and(|(section, key)| {
            let word = |s: &str| {
                !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            };
            word(section) && word(key)
        })
}

/// `url` with the password of its user-info replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme_end + i);
    match url[scheme_end..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &url[scheme_end..scheme_end + at];
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!(
                "{}{user}:***{}",
                &url[..scheme_end],
                &url[scheme_end + at..]
            )
        }
        None => url.to_string(),
    }
}

/// Values given on the command line; they override every other layer.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub listen: Option<String>,
    pub redis_url: Option<String>,
    pub failure_mode: Option<String>,
}

/// Every problem found, one line each.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .problems.join("\n  - "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

const KNOWN_KEYS: &[&str] = &[
    "server.listen",
    "server.shutdown_timeout",
    "server.header_read_timeout",
    "server.body_read_timeout",
    "server.keepalive_timeout",
    "server.write_timeout",
    "server.max_connections",
    "limits.max_key_bytes",
    "limits.max_sliding_log_limit",
    "redis.url",
    "redis.password_file",
    "redis.key_prefix",
    "redis.timeout",
    "redis.pool_size",
    "redis.reconnect_max_delay",
    "redis.probe_interval",
    "redis.batch_window",
    "failure.mode",
    "failure.closed_retry_after",
    "breaker.consecutive_failures",
    "breaker.failure_ratio",
    "breaker.interval",
    "breaker.min_calls",
    "breaker.open_for",
    "deny_cache.capacity",
    "memory.sweep_interval",
    "memory.max_keys",
    "log.format",
    "log.level",
];

impl Settings {
    /// Loads every layer, reading the environment of this process.
    /// `RATEKEEPER_CONFIG` names the config file (the CLI reads it), so it is
    /// not a setting.
    pub fn load(overrides: &Overrides) -> Result<Settings, ConfigError> {
        let (vars, ignored): (Vec<_>, Vec<_>) = std::env::vars()
            .filter(|(name, _)| name.starts_with("RATEKEEPER_") && name != "RATEKEEPER_CONFIG")
            .partition(|(name, _)| is_config_var(name));
        let env = Environment::default().source(Some(vars.into_iter().collect()));
        let mut settings = Self::load_from(overrides, env)?;
        settings.ignored_env = ignored.into_iter().map(|(name, _)| name).collect();
        Ok(settings)
    }

    /// Loads with an explicit environment (tests pass a map).
    pub fn load_from(overrides: &Overrides, env: Environment) -> Result<Settings, ConfigError> {
        let fail = |problem: String| ConfigError {
            problems: vec![problem],
        };
        let mut builder =
            Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
        if let Some(path) = &overrides.config_file {
            if !path.is_file() {
                return Err(fail(format!("--config {}: no such file", path.display())));
            }
            builder = builder.add_source(File::from(path.as_path()).format(FileFormat::Toml));
        }
        builder = builder.add_source(
            env.prefix("RATEKEEPER")
                .prefix_separator("_")
                .separator("__"),
        );
        for (key, value) in [
            ("server.listen", &overrides.listen),
            ("redis.url", &overrides.redis_url),
            ("failure.mode", &overrides.failure_mode),
        ] {
            if let Some(value) = value {
                builder = builder
                    .set_override(key, value.as_str())
                    .map_err(|e| fail(e.to_string()))?;
            }
        }
        let config = builder.build().map_err(|e| fail(e.to_string()))?;
        Self::from_config(&config)
    }

    fn from_config(config: &Config) -> Result<Settings, ConfigError> {
        let mut r = Reader {
            config,
            problems: Vec::new(),
        };
        r.unknown_keys();
        // Read every key before assembling, so every problem is collected.
        let server = (
            r.parse("server.listen", |s| {
                s.parse::<SocketAddr>()
                    .map_err(|_| "must be an address with a port, e.g. 127.0.0.1:8080".into())
            }),
            r.duration("server.shutdown_timeout"),
            r.duration("server.header_read_timeout"),
            r.duration("server.body_read_timeout"),
            r.duration("server.keepalive_timeout"),
            r.duration("server.write_timeout"),
            r.parse("server.max_connections", |s| int_in(s, 1, 10_000_000)),
        );
        let limits = (
            r.parse("limits.max_key_bytes", |s| int_in(s, 1, 65_536)),
            // A sliding log's memory no longer grows with its limit (at most 127
            // entries), so any valid limit may be allowed.
            r.parse("limits.max_sliding_log_limit", |s| {
                int_in(s, 1, crate::domain::MAX_LIMIT)
            }),
        );
        let redis = read_redis(&mut r);
        let failure = (
            r.parse("failure.mode", |s| match s {
                "open" => Ok(FailureMode::Open),
                "closed" => Ok(FailureMode::Closed),
                "local" => Ok(FailureMode::Local),
                _ => Err("must be \"open\", \"closed\" or \"local\"".into()),
            }),
            r.duration("failure.closed_retry_after"),
        );
        let breaker = read_breaker(&mut r);
        let deny_cache_capacity = r.parse("deny_cache.capacity", |s| int_in(s, 0, 100_000_000));
        let sweep_interval = r.duration("memory.sweep_interval");
        let max_keys = r.parse("memory.max_keys", |s| int_in(s, 64, 1_000_000_000));
        let log = (
            r.parse("log.format", |s| match s {
                "auto" => Ok(LogFormat::Auto),
                "pretty" => Ok(LogFormat::Pretty),
                "json" => Ok(LogFormat::Json),
                _ => Err("must be \"auto\", \"pretty\" or \"json\"".into()),
            }),
            r.parse("log.level", |s| {
                tracing_subscriber::EnvFilter::try_new(s)
                    .map(|_| s.to_string())
                    .map_err(|e| format!("is not a valid tracing filter: {e}"))
            }),
        );

        let assembled = (|| {
            Some(Settings {
                server: ServerSettings {
                    listen: server.0?,
                    shutdown_timeout: server.1?,
                    header_read_timeout: server.2?,
                    body_read_timeout: server.3?,
                    keepalive_timeout: server.4?,
                    write_timeout: server.5?,
                    max_connections: server.6? as usize,
                },
                limits: Bounds {
                    max_key_bytes: limits.0? as usize,
                    max_sliding_log_limit: limits.1?,
                },
                redis: redis?,
                failure: FailurePolicy {
                    mode: failure.0?,
                    closed_retry_after: failure.1?,
                },
                breaker: breaker?,
                deny_cache_capacity: deny_cache_capacity? as usize,
                memory: MemorySettings {
                    sweep_interval: sweep_interval?,
                    max_keys: max_keys? as usize,
                },
                log: LogSettings {
                    format: log.0?,
                    level: log.1?,
                },
                ignored_env: Vec::new(),
            })
        })();
        match assembled {
            Some(settings) if r.problems.is_empty() => Ok(settings),
            _ => Err(ConfigError {
                problems: r.problems,
            }),
        }
    }
}

/// The `[redis]` section: `Some(None)` when the URL is empty (embedded store),
/// `None` when any key is invalid.
fn read_redis(r: &mut Reader) -> Option<Option<RedisSettings>> {
    let url = r.parse_secret("redis.url", redact_url, |s| {
        if s.is_empty() {
            return Ok(String::new());
        }
        let schemes = [
            "redis://",
            "rediss://",
            "redis-cluster://",
            "redis-sentinel://",
            "redis+unix://",
        ];
        if !schemes.iter().any(|p| s.starts_with(p)) {
            return Err(
                "must be empty or a redis://, rediss://, redis-cluster:// or redis-sentinel:// URL"
                    .into(),
            );
        }
        // Let the client library judge the URL, so a URL accepted here is
        // one it can use.
        // fred's message may quote parts of the URL: never echo it.
        fred::prelude::Config::from_url(s)
            .map(|_| s.to_string())
            .map_err(|_| {
                "is not a usable Redis URL; use redis://[user[:password]@]host:port[/db], \
                 rediss://, redis-cluster:// or redis-sentinel://"
                    .into()
            })
    });
    let password_file = r.parse("redis.password_file", |s| Ok(s.to_string()));
    let key_prefix = r.parse("redis.key_prefix", |s| {
        if s.contains(['{', '}']) || s.len() > 64 {
            Err("must be at most 64 bytes without '{' or '}' (they would move the hash tag)".into())
        } else {
            Ok(s.to_string())
        }
    });
    let timeout = r.duration("redis.timeout");
    let pool_size = r.parse("redis.pool_size", |s| int_in(s, 1, 64));
    let reconnect_max_delay = r.duration("redis.reconnect_max_delay");
    let probe_interval = r.duration("redis.probe_interval");
    let batch_window = r.parse("redis.batch_window", |s| {
        let us = parse_duration_us(s)?;
        (us <= 10_000)
            .then(|| Duration::from_micros(us))
            .ok_or_else(|| "must be at most 10ms (e.g. \"50us\"); 0us turns batching off".into())
    });
    let url = with_password_file(r, url?, password_file?)?;
    let settings = RedisSettings {
        url,
        key_prefix: key_prefix?,
        timeout: timeout?,
        pool_size: pool_size? as usize,
        reconnect_max_delay: reconnect_max_delay?,
        probe_interval: probe_interval?,
        batch_window: batch_window?,
    };
    Some((!settings.url.is_empty()).then_some(settings))
}

/// Splices the password read from `redis.password_file` into the URL, so it
/// never has to appear in the environment or on a command line (`ps`).
fn with_password_file(r: &mut Reader, url: String, path: String) -> Option<String> {
    if path.is_empty() || url.is_empty() {
        return Some(url);
    }
    let mut problem = |m: String| {
        r.problems.push(format!("redis.password_file: {m}"));
        None
    };
    let password = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim_end_matches(['\r', '\n']).to_string(),
        Err(e) => return problem(format!("cannot read {path}: {e}")),
    };
    if password.is_empty() {
        return problem(format!("{path} is empty"));
    }
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let (user, host) = match authority.rfind('@') {
        Some(at) if authority[..at].contains(':') => {
            return problem("redis.url has a password too: give it in one place".into());
        }
        Some(at) => (&authority[..at], &authority[at + 1..]),
        None => ("", authority),
    };
    Some(format!(
        "{}{user}:{}@{host}{}",
        &url[..scheme_end],
        percent_encode(&password),
        &url[authority_end..]
    ))
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

/// The `[breaker]` section; `None` when any key is invalid.
fn read_breaker(r: &mut Reader) -> Option<BreakerConfig> {
    let consecutive = r.parse("breaker.consecutive_failures", |s| int_in(s, 1, 1_000_000));
    let ratio = r.parse("breaker.failure_ratio", |s| match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err("must be a number above 0 and at most 1, e.g. 0.5".into()),
    });
    let interval = r.duration("breaker.interval");
    let min_calls = r.parse("breaker.min_calls", |s| int_in(s, 1, 1_000_000));
    let open_for = r.duration("breaker.open_for");
    Some(BreakerConfig {
        consecutive_failures: consecutive? as u32,
        failure_ratio: ratio?,
        interval: interval?,
        min_calls: min_calls? as u32,
        open_for: open_for?,
        ..BreakerConfig::default()
    })
}

fn int_in(s: &str, min: u64, max: u64) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!("must be a whole number from {min} to {max}")),
    }
}

/// Reads keys one by one, collecting problems instead of stopping.
struct Reader<'a> {
    config: &'a Config,
    problems: Vec<String>,
}

impl Reader<'_> {
    fn parse<T>(&mut self, key: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let result = self
            .config
            .get_string(key)
            .map_err(|e| format!("cannot be read: {e}"))
            .and_then(|raw| parse(raw.trim()).map_err(|m| format!("{m} (got {raw:?})")));
        result
            .map_err(|m| self.problems.push(format!("{key}: {m}")))
            .ok()
    }

    /// Like [`parse`](Self::parse), but a problem quotes `shown(raw)`
    /// rather than the raw value (for values that may hold a password).
    fn parse_secret<T>(
        &mut self,
        key: &str,
        shown: impl Fn(&str) -> String,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let result = self
            .config
            .get_string(key)
            .map_err(|_| "cannot be read as a string".to_string())
            .and_then(|raw| parse(raw.trim()).map_err(|m| format!("{m} (got {:?})", shown(&raw))));
        result
            .map_err(|m| self.problems.push(format!("{key}: {m}")))
            .ok()
    }

    fn duration(&mut self, key: &str) -> Option<Duration> {
        self.parse(key, |s| match parse_duration_us(s) {
            Ok(0) => Err("must be longer than zero".into()),
            Ok(us) => Ok(Duration::from_micros(us)),
            Err(m) => Err(m),
        })
    }

    fn unknown_keys(&mut self) {
        let known: BTreeSet<&str> = KNOWN_KEYS.iter().copied().collect();
        let mut found = Vec::new();
        if let Ok(table) = self.config.cache.clone().into_table() {
            flatten("", &table, &mut found);
        }
        for key in found {
            if !known.contains(key.as_str()) {
                self.problems.push(format!("{key}: unknown key"));
            }
        }
    }
}

fn flatten(prefix: &str, table: &Map<String, Value>, out: &mut Vec<String>) {
    for (name, value) in table {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match &value.kind {
            ValueKind::Table(inner) => flatten(&path, inner, out),
            _ => out.push(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> Environment {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Environment::default().source(Some(map))
    }

    #[test]
    fn defaults_load_and_mean_the_embedded_store() {
        let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
        assert!(s.redis.is_none());
        assert_eq!(s.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.failure.mode, FailureMode::Open);
        assert_eq!(s.limits.max_key_bytes, 512);
        let server = &s.server;
        assert_eq!(
            (
                server.header_read_timeout,
                server.body_read_timeout,
                server.keepalive_timeout,
                server.write_timeout,
                server.max_connections,
            ),
            (
                Duration::from_secs(10),
                Duration::from_secs(10),
                Duration::from_secs(60),
                Duration::from_secs(10),
                10_000
            )
        );
    }

    #[test]
    fn env_then_cli_override_the_file() {
        let vars = [
            ("RATEKEEPER_REDIS__URL", "redis://127.0.0.1:7000"),
            ("RATEKEEPER_REDIS__TIMEOUT", "50ms"),
        ];
        let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
        let redis = s.redis.unwrap();
        assert_eq!(
            (redis.url.as_str(), redis.timeout),
            ("redis://127.0.0.1:7000", Duration::from_millis(50))
        );

        let cli = Overrides {
            redis_url: Some("redis://127.0.0.1:7001".into()),
            failure_mode: Some("closed".into()),
            ..Default::default()
        };
        let s = Settings::load_from(&cli, env(&vars)).unwrap();
        assert_eq!(s.redis.unwrap().url, "redis://127.0.0.1:7001");
        assert_eq!(s.failure.mode, FailureMode::Closed);
    }

    #[test]
    fn reports_every_bad_key_at_once() {
        let vars = [
            ("RATEKEEPER_REDIS__TIMEOUT", "50"),
            ("RATEKEEPER_SERVER__LISTEN", "nowhere"),
            ("RATEKEEPER_FAILURE__MODE", "maybe"),
            ("RATEKEEPER_REDIS__TMEOUT", "1s"),
        ];
        let err = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
        let text = err.to_string();
        for key in [
            "redis.timeout",
            "server.listen",
            "failure.mode",
            "redis.tmeout: unknown key",
        ] {
            assert!(text.contains(key), "{key} missing from:\n{text}");
        }
        assert_eq!(err.problems.len(), 4);
    }

    #[test]
    fn only_variables_of_the_documented_shape_are_configuration() {
        for name in [
            "RATEKEEPER_REDIS__URL",
            "RATEKEEPER_SERVER__SHUTDOWN_TIMEOUT",
            "RATEKEEPER_REDIS__TMEOUT",
        ] {
            assert!(is_config_var(name), "{name}");
        }
        // What Kubernetes injects for a Service named `ratekeeper`.
        for name in [
            "RATEKEEPER_SERVICE_HOST",
            "RATEKEEPER_SERVICE_PORT_HTTP",
            "RATEKEEPER_PORT",
            "RATEKEEPER_PORT_8080_TCP_ADDR",
            "RATEKEEPER_CONFIG",
            "RATEKEEPER___X",
        ] {
            assert!(!is_config_var(name), "{name}");
        }
    }

    #[test]
    fn a_bad_redis_url_is_reported_without_its_password() {
        let vars = [("RATEKEEPER_REDIS__URL", "redis://bob:hunter2@host:notaport")];
        let text = Settings::load_from(&Overrides::default(), env(&vars))
            .unwrap_err()
            .to_string();
        assert!(text.contains("redis.url"), "{text}");
        assert!(text.contains("bob:***@host"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn the_password_file_is_spliced_into_the_url_and_hidden_from_debug() {
        let dir = std::env::temp_dir().join(format!("rk-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("password");
        std::fs::write(&file, "p@ss:w/rd\n").unwrap();
        let path = file.to_str().unwrap();
        let vars = [
            ("RATEKEEPER_REDIS__URL", "redis://app@127.0.0.1:6379/0"),
            ("RATEKEEPER_REDIS__PASSWORD_FILE", path),
        ];
        let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
        let redis = s.redis.unwrap();
        assert_eq!(redis.url, "redis://app:p%40ss%3Aw%2Frd@127.0.0.1:6379/0");
        let parsed = fred::prelude::Config::from_url(&redis.url).unwrap();
        assert_eq!(parsed.password.as_deref(), Some("p@ss:w/rd"));
        assert!(!format!("{redis:?}").contains("p%40ss"));

        let both = [
            ("RATEKEEPER_REDIS__URL", "redis://app:other@127.0.0.1:6379"),
            ("RATEKEEPER_REDIS__PASSWORD_FILE", path),
        ];
        let text = Settings::load_from(&Overrides::default(), env(&both))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("one place") && !text.contains("other"),
            "{text}"
        );
        let missing = [
            ("RATEKEEPER_REDIS__URL", "redis://127.0.0.1:6379"),
            ("RATEKEEPER_REDIS__PASSWORD_FILE", "/nonexistent/pw"),
        ];
        let text = Settings::load_from(&Overrides::default(), env(&missing))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("redis.password_file: cannot read /nonexistent/pw"),
            "{text}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn local_failure_mode_and_breaker_keys() {
        let vars = [
            ("RATEKEEPER_FAILURE__MODE", "local"),
            ("RATEKEEPER_BREAKER__CONSECUTIVE_FAILURES", "3"),
            ("RATEKEEPER_BREAKER__FAILURE_RATIO", "0.25"),
        ];
        let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
        assert_eq!(s.failure.mode, FailureMode::Local);
        assert_eq!(
            (s.breaker.consecutive_failures, s.breaker.failure_ratio),
            (3, 0.25)
        );
        assert_eq!(s.breaker.min_calls, 20);

        let bad = [
            ("RATEKEEPER_BREAKER__FAILURE_RATIO", "1.5"),
            ("RATEKEEPER_BREAKER__MIN_CALLS", "0"),
            ("RATEKEEPER_BREAKER__OPEN_FOR", "0s"),
        ];
        let err = Settings::load_from(&Overrides::default(), env(&bad)).unwrap_err();
        assert_eq!(err.problems.len(), 3, "{err}");
    }

    #[test]
    fn known_keys_match_the_reference_file() {
        let config = Config::builder()
            .add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml))
            .build()
            .unwrap();
        let mut found = Vec::new();
        flatten("", &config.cache.clone().into_table().unwrap(), &mut found);
        found.sort();
        let mut known: Vec<String> = KNOWN_KEYS.iter().map(|s| s.to_string()).collect();
        known.sort();
        assert_eq!(found, known);
    }
}
