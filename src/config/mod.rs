//! Settings, layered: `config/default.toml` (compiled in) → `--config FILE`
//! → `RATEKEEPER_<SECTION>__<KEY>` environment variables → CLI flags.
//!
//! Every key is read and checked on its own so that one run reports every
//! bad or unknown key at once, instead of stopping at the first.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use config::{Config, Environment, File, FileFormat};

mod reader;
mod redis;
mod sections;
#[cfg(test)]
mod tests;

use reader::Reader;
use redis::read_redis;
pub use redis::{RedisSettings, redact_url};
use sections::{int_in, parse_listen, read_auth, read_breaker, read_grpc, read_limits};

use crate::domain::Bounds;
use crate::domain::forward::IpNet;
use crate::domain::{FailureMode, FailurePolicy};
use crate::limiter::breaker::BreakerConfig;

/// The reference configuration: every key with its default and a comment.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub limits: Bounds,
    /// `limits.max_batch`: most checks in one `POST /v1/checks`. Beside
    /// `limits` rather than in it: the domain validates a check against
    /// [`Bounds`], and a batch is only the HTTP transport's envelope.
    pub max_batch: usize,
    /// `limits.max_lease_keys`: most (policy, key) pairs whose rate is
    /// tracked for hot-key leasing (`limiter::lease`); 0: nothing leases.
    pub max_lease_keys: usize,
    /// The policies file; `None`: checks carry their own limits.
    pub policies_file: Option<PathBuf>,
    /// How often the policies file is re-hashed in case a change event was
    /// missed (a backstop: changes are normally seen at once).
    pub policies_poll_interval: Duration,
    /// Where the Envoy RLS v3 gRPC server listens; `None`: off.
    pub grpc_listen: Option<SocketAddr>,
    /// The gRPC listener's bounds.
    pub grpc: GrpcSettings,
    /// envoyproxy/ratelimit YAML: a file or a directory of files.
    pub rls_config: Option<PathBuf>,
    /// `None` runs the embedded store.
    pub redis: Option<RedisSettings>,
    pub failure: FailurePolicy,
    /// When a failure domain's circuit breaker opens. Its `trial_interval`
    /// is `redis.probe_interval`, set when the application is built.
    pub breaker: BreakerConfig,
    /// Counters per heavy-hitters sketch and slice (`top.capacity`; 0:
    /// off), and the most sketches at once (`top.max_sets`).
    pub top: TopSettings,
    /// Entries of the local deny cache; 0 turns it off.
    pub deny_cache_capacity: usize,
    pub memory: MemorySettings,
    pub log: LogSettings,
    pub auth: AuthSettings,
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
    /// Peers whose `X-Forwarded-For`/`X-Real-IP` are believed by
    /// `/v1/auth` (empty: nobody's).
    pub trusted_proxies: Vec<IpNet>,
}

/// The gRPC listener's bounds (`[grpc]` but `listen`).
#[derive(Debug, Clone)]
pub struct GrpcSettings {
    /// Connections beyond this are closed at once (an HTTP/2 GOAWAY).
    pub max_connections: usize,
    /// A new connection must start its first call within this.
    pub handshake_timeout: Duration,
    /// A connection with no call in progress is closed after this.
    pub idle_timeout: Duration,
}

/// Bearer-token authentication (`[auth]`).
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// Lines of `<scope> <token>`; `None`: no authentication.
    pub tokens_file: Option<PathBuf>,
    /// `/metrics` needs a token too (any scope).
    pub protect_metrics: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct TopSettings {
    pub capacity: usize,
    pub max_sets: usize,
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

/// Values given on the command line; they override every other layer.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub listen: Option<String>,
    pub redis_url: Option<String>,
    pub failure_mode: Option<String>,
    pub policies_file: Option<String>,
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
    "server.trusted_proxies",
    "limits.max_key_bytes",
    "limits.max_sliding_log_limit",
    "limits.max_limits_per_check",
    "limits.max_wait",
    "limits.max_waiters",
    "limits.max_waiters_per_key",
    "limits.max_batch",
    "limits.max_lease_keys",
    "limits.max_lease_ttl",
    "limits.max_reservation_ttl",
    "limits.max_concurrency",
    "policies.file",
    "policies.poll_interval",
    "grpc.listen",
    "grpc.max_connections",
    "grpc.handshake_timeout",
    "grpc.idle_timeout",
    "rls.config",
    "redis.url",
    "redis.password_file",
    "redis.key_prefix",
    "redis.timeout",
    "redis.pool_size",
    "redis.reconnect_max_delay",
    "redis.unresponsive_timeout",
    "redis.probe_interval",
    "redis.batch_window",
    "redis.max_in_flight",
    "redis.legacy_keys",
    "redis.tls.ca_file",
    "redis.tls.cert_file",
    "redis.tls.key_file",
    "redis.tls.server_name",
    "failure.mode",
    "failure.closed_retry_after",
    "breaker.consecutive_failures",
    "breaker.failure_ratio",
    "breaker.interval",
    "breaker.min_calls",
    "breaker.open_for",
    "top.capacity",
    "top.max_sets",
    "deny_cache.capacity",
    "memory.sweep_interval",
    "memory.max_keys",
    "log.format",
    "log.level",
    "auth.tokens_file",
    "auth.protect_metrics",
];

impl Settings {
    /// Loads every layer, reading the environment of this process.
    /// `RATEKEEPER_CONFIG` names the config file (the CLI reads it), so it is
    /// not a setting.
    pub fn load(overrides: &Overrides) -> Result<Settings, ConfigError> {
        let (env, ignored) = process_env();
        let mut settings = Self::load_from(overrides, env)?;
        settings.ignored_env = ignored;
        Ok(settings)
    }

    /// Only `server.listen`, from the same layers as [`load`](Self::load):
    /// what `ratekeeper healthcheck` needs. It reads nothing else, so a
    /// probe does not fail over a secret it has no business reading (a
    /// `redis.password_file` mounted only for the service, say).
    pub fn listen_address(overrides: &Overrides) -> Result<SocketAddr, ConfigError> {
        let config = layers(overrides, process_env().0)?;
        let mut r = Reader {
            config: &config,
            problems: Vec::new(),
        };
        r.parse("server.listen", parse_listen).ok_or(ConfigError {
            problems: r.problems,
        })
    }

    /// Loads with an explicit environment (tests pass a map).
    pub fn load_from(overrides: &Overrides, env: Environment) -> Result<Settings, ConfigError> {
        Self::from_config(&layers(overrides, env)?)
    }

    fn from_config(config: &Config) -> Result<Settings, ConfigError> {
        let mut r = Reader {
            config,
            problems: Vec::new(),
        };
        r.unknown_keys();
        // Read every key before assembling, so every problem is collected.
        let server = (
            r.parse("server.listen", parse_listen),
            r.duration("server.shutdown_timeout"),
            r.duration("server.header_read_timeout"),
            r.duration("server.body_read_timeout"),
            r.duration("server.keepalive_timeout"),
            r.duration("server.write_timeout"),
            r.parse("server.max_connections", |s| int_in(s, 1, 10_000_000)),
            r.list("server.trusted_proxies", |s| s.parse::<IpNet>()),
        );
        let limits = read_limits(&mut r);
        let (limits, max_batch, max_lease_keys) = limits;
        let policies_file = r.parse("policies.file", |s| {
            Ok::<_, String>((!s.is_empty()).then(|| PathBuf::from(s)))
        });
        let policies_poll_interval = r.duration("policies.poll_interval");
        let grpc_listen = r.parse("grpc.listen", |s| {
            (!s.is_empty())
                .then(|| {
                    s.parse::<SocketAddr>()
                        .map_err(|e| format!("is not host:port ({e})"))
                })
                .transpose()
        });
        let grpc = read_grpc(&mut r);
        let rls_config = r.parse("rls.config", |s| {
            Ok::<_, String>((!s.is_empty()).then(|| PathBuf::from(s)))
        });
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
        let top = (
            r.parse("top.capacity", |s| int_in(s, 0, 65_536)),
            r.parse("top.max_sets", |s| int_in(s, 1, 100_000)),
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

        let auth = read_auth(&mut r);

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
                    trusted_proxies: server.7?,
                },
                limits: limits?,
                max_batch: max_batch? as usize,
                max_lease_keys: max_lease_keys? as usize,
                policies_file: policies_file?,
                policies_poll_interval: policies_poll_interval?,
                grpc_listen: grpc_listen?,
                grpc: grpc?,
                rls_config: rls_config?,
                redis: redis?,
                failure: FailurePolicy {
                    mode: failure.0?,
                    closed_retry_after: failure.1?,
                },
                breaker: breaker?,
                top: TopSettings {
                    capacity: top.0? as usize,
                    max_sets: top.1? as usize,
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
                auth: auth?,
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

/// The configuration layers, merged: defaults, file, environment, flags.
fn layers(overrides: &Overrides, env: Environment) -> Result<Config, ConfigError> {
    let fail = |problem: String| ConfigError {
        problems: vec![problem],
    };
    let mut builder = Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
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
        ("policies.file", &overrides.policies_file),
    ] {
        if let Some(value) = value {
            builder = builder
                .set_override(key, value.as_str())
                .map_err(|e| fail(e.to_string()))?;
        }
    }
    let config = builder.build().map_err(|e| fail(e.to_string()))?;
    Ok(config)
}

/// The process's `RATEKEEPER_<SECTION>__<KEY>` variables as a config
/// source, and the names of the other `RATEKEEPER_*` variables it ignored.
fn process_env() -> (Environment, Vec<String>) {
    let (vars, ignored): (Vec<_>, Vec<_>) = std::env::vars()
        .filter(|(name, _)| name.starts_with("RATEKEEPER_") && name != "RATEKEEPER_CONFIG")
        .partition(|(name, _)| is_config_var(name));
    let env = Environment::default().source(Some(vars.into_iter().collect()));
    (env, ignored.into_iter().map(|(name, _)| name).collect())
}
