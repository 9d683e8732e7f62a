//! Settings, layered: `config/default.toml` (compiled in) → `--config FILE`
//! → `RATEKEEPER_<SECTION>__<KEY>` environment variables → CLI flags.
//!
//! [`Settings`] mirrors the file: one struct per section, each filled by
//! one reader that names each of its keys once (`sections.rs`,
//! `limits.rs`, `redis.rs`). Every key is read and checked on its own so
//! that one run reports every bad or unknown key at once, instead of
//! stopping at the first; the keys the readers ask for are the known keys
//! ([`Settings::declared_keys`]), so "unknown" needs no list of its own.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use config::{Config, Environment, File, FileFormat};

mod limits;
mod listener_tls;
mod otel;
mod reader;
mod redis;
mod sections;
#[cfg(test)]
mod tests;

pub use crate::store::redis::RedisSettings;
pub use crate::store::redis::settings::redact_url;
pub use crate::tenants::TenantsSettings;
pub use limits::{DenyCacheSettings, LimitsSettings, MemorySettings, TopSettings};
pub use otel::{OtelEnv, OtelSettings, OtlpProtocol, SamplerSettings};
use reader::Reader;
pub use sections::{
    AuthSettings, GrpcSettings, LogFormat, LogSettings, PoliciesSettings, RlsSettings,
    ServerSettings,
};

use crate::domain::FailurePolicy;
use crate::limiter::breaker::BreakerConfig;

/// The reference configuration: every key with its default and a comment.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// Every section of the file, one field each, in the file's order.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub limits: LimitsSettings,
    pub policies: PoliciesSettings,
    pub grpc: GrpcSettings,
    pub rls: RlsSettings,
    pub tenants: TenantsSettings,
    /// `None` runs the embedded store.
    pub redis: Option<RedisSettings>,
    pub failure: FailurePolicy,
    /// When a failure domain's circuit breaker opens. Its `trial_interval`
    /// is `redis.probe_interval`, set when the application is built.
    pub breaker: BreakerConfig,
    pub top: TopSettings,
    pub deny_cache: DenyCacheSettings,
    pub memory: MemorySettings,
    pub auth: AuthSettings,
    pub log: LogSettings,
    /// `[otel]` with the standard `OTEL_*` variables applied.
    pub otel: OtelSettings,
    /// `RATEKEEPER_*` environment variables that are not of the
    /// `RATEKEEPER_<SECTION>__<KEY>` shape and were ignored (logged at debug
    /// once telemetry is up).
    pub ignored_env: Vec<String>,
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

impl Settings {
    /// Loads every layer, reading the environment of this process.
    /// `RATEKEEPER_CONFIG` names the config file (the CLI reads it), so it is
    /// not a setting.
    pub fn load(overrides: &Overrides) -> Result<Settings, ConfigError> {
        let (env, ignored) = process_env();
        let otel_env = |name: &str| std::env::var(name).ok();
        let mut settings = Self::load_with(overrides, env, &otel_env)?;
        settings.ignored_env = ignored;
        Ok(settings)
    }

    /// Where `ratekeeper healthcheck` probes: `server.listen`, and how the
    /// listener speaks ([`ProbeTls`]), from the same layers as
    /// [`load`](Self::load). It reads nothing else (not even the
    /// certificate), so a probe does not fail over a secret it has no
    /// business reading (a `redis.password_file` mounted only for the
    /// service, say).
    pub fn probe_target(overrides: &Overrides) -> Result<(SocketAddr, ProbeTls), ConfigError> {
        let config = layers(overrides, process_env().0)?;
        let mut r = Reader::new(&config);
        let listen = r.parse("server.listen", sections::parse_listen);
        let [cert_key, _, ca_key] = crate::tls::server::Listener::Http.keys();
        let cert = r.path(cert_key);
        let client_ca = r.path(ca_key);
        // No check for unknown keys: every other key was left unasked.
        let (Some(listen), Some(cert), Some(client_ca)) = (listen, cert, client_ca) else {
            return Err(r.problems_only());
        };
        let tls = match (cert, client_ca) {
            (None, _) => ProbeTls::Off,
            (Some(_), None) => ProbeTls::Tls,
            (Some(_), Some(_)) => ProbeTls::Mutual,
        };
        Ok((listen, tls))
    }

    /// Loads with an explicit environment (tests pass a map), and no
    /// `OTEL_*` variables.
    pub fn load_from(overrides: &Overrides, env: Environment) -> Result<Settings, ConfigError> {
        Self::load_with(overrides, env, &|_| None)
    }

    /// Loads with explicit `RATEKEEPER_*` and `OTEL_*` environments.
    pub fn load_with(
        overrides: &Overrides,
        env: Environment,
        otel_env: OtelEnv,
    ) -> Result<Settings, ConfigError> {
        let config = layers(overrides, env)?;
        let mut r = Reader::new(&config);
        let settings = read_settings(&mut r, otel_env);
        r.finish(settings)
    }

    /// Every key the readers ask for, `section.key`: the one declaration
    /// of the known keys (`config/default.toml` and `docs/configuration.md`
    /// are held to it by tests). Any other key is an error.
    pub fn declared_keys() -> BTreeSet<&'static str> {
        let defaults = Config::builder()
            .add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml))
            .build()
            .expect("config/default.toml parses");
        let mut r = Reader::new(&defaults);
        let _ = read_settings(&mut r, &|_| None);
        r.asked().clone()
    }
}

/// Every section, each by its own reader; all are read before any is
/// judged, so one run reports every problem.
fn read_settings(r: &mut Reader, otel_env: OtelEnv) -> Option<Settings> {
    let server = sections::read_server(r);
    let limits = limits::read_limits(r);
    let policies = sections::read_policies(r);
    let grpc = sections::read_grpc(r);
    let rls = sections::read_rls(r);
    let tenants = sections::read_tenants(r);
    let redis = redis::read_redis(r);
    let failure = limits::read_failure(r);
    let breaker = limits::read_breaker(r);
    let top = limits::read_top(r);
    let deny_cache = limits::read_deny_cache(r);
    let memory = limits::read_memory(r);
    let auth = sections::read_auth(r);
    let log = sections::read_log(r);
    let otel = otel::read_otel(r, otel_env);
    Some(Settings {
        server: server?,
        limits: limits?,
        policies: policies?,
        grpc: grpc?,
        rls: rls?,
        tenants: tenants?,
        redis: redis?,
        failure: failure?,
        breaker: breaker?,
        top: top?,
        deny_cache: deny_cache?,
        memory: memory?,
        auth: auth?,
        log: log?,
        otel: otel?,
        ignored_env: Vec::new(),
    })
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

/// How the HTTP listener speaks, for the healthcheck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeTls {
    Off,
    Tls,
    /// TLS with `client_ca_file`: the probe has no client certificate.
    Mutual,
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
