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
use crate::limiter::{FailureMode, FailurePolicy};

/// The reference configuration: every key with its default and a comment.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub limits: Bounds,
    /// `None` runs the embedded store.
    pub redis: Option<RedisSettings>,
    pub failure: FailurePolicy,
    /// Entries of the local deny cache; 0 turns it off.
    pub deny_cache_capacity: usize,
    pub memory: MemorySettings,
    pub log: LogSettings,
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

#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub url: String,
    pub key_prefix: String,
    pub timeout: Duration,
    pub pool_size: usize,
    pub reconnect_max_delay: Duration,
    pub probe_interval: Duration,
    /// Micro-batching window; zero turns batching off.
    pub batch_window: Duration,
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
    "redis.key_prefix",
    "redis.timeout",
    "redis.pool_size",
    "redis.reconnect_max_delay",
    "redis.probe_interval",
    "redis.batch_window",
    "failure.mode",
    "failure.closed_retry_after",
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
        let vars = std::env::vars()
            .filter(|(name, _)| name != "RATEKEEPER_CONFIG")
            .collect();
        Self::load_from(overrides, Environment::default().source(Some(vars)))
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
            r.parse("limits.max_sliding_log_limit", |s| int_in(s, 1, 10_000_000)),
        );
        let redis = read_redis(&mut r);
        let failure = (
            r.parse("failure.mode", |s| match s {
                "open" => Ok(FailureMode::Open),
                "closed" => Ok(FailureMode::Closed),
                _ => Err("must be \"open\" or \"closed\"".into()),
            }),
            r.duration("failure.closed_retry_after"),
        );
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
                deny_cache_capacity: deny_cache_capacity? as usize,
                memory: MemorySettings {
                    sweep_interval: sweep_interval?,
                    max_keys: max_keys? as usize,
                },
                log: LogSettings {
                    format: log.0?,
                    level: log.1?,
                },
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
    let url = r.parse("redis.url", |s| {
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
            return Err("must be empty or a redis://, rediss:// or redis-cluster:// URL".into());
        }
        // Let the client library judge the URL, so a URL accepted here is
        // one it can use.
        fred::prelude::Config::from_url(s)
            .map(|_| s.to_string())
            .map_err(|e| {
                format!(
                    "is not a usable Redis URL ({e}); use redis://, rediss:// or redis-cluster://"
                )
            })
    });
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
    let settings = RedisSettings {
        url: url?,
        key_prefix: key_prefix?,
        timeout: timeout?,
        pool_size: pool_size? as usize,
        reconnect_max_delay: reconnect_max_delay?,
        probe_interval: probe_interval?,
        batch_window: batch_window?,
    };
    Some((!settings.url.is_empty()).then_some(settings))
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
