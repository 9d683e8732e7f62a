//! The command line: `ratekeeper serve`, `openapi`, `script`, `override`, `block`, `unblock`, `audit`,
//! `policies check` and `healthcheck`; and the operator's client
//! subcommands for a running instance ([`remote`]): `check`, `reset`,
//! `policies show` and `top`.

mod client;
mod healthcheck;
pub mod remote;
mod tenants;
mod top;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::app::{Application, StartError, shutdown_signal};
use crate::config::{LogFormat, Overrides, Settings};

/// sysexits.h EX_USAGE: the configuration is wrong.
const EX_USAGE: u8 = 64;

/// A rate-limit decision service over HTTP, backed by Redis or an embedded store.
#[derive(Debug, Parser)]
#[command(name = "ratekeeper", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service until SIGINT or SIGTERM.
    ///
    /// Every flag is also a config key, settable in the --config file and as
    /// `RATEKEEPER_<SECTION>__<KEY>` (e.g. `RATEKEEPER_REDIS__URL`). Flags win over
    /// the environment, which wins over the file, which wins over defaults.
    Serve(ServeArgs),
    /// Print the OpenAPI document (YAML), as committed in openapi.yaml.
    Openapi,
    /// Print the exact Lua script ratekeeper runs on Redis: one script for
    /// every call (a check, a reset, a refund, a batch of them), e.g. to
    /// pre-load it or to benchmark it on its own. Its KEYS and ARGV are
    /// documented in src/store/redis/wire.rs.
    Script {
        /// Print the same code as the Redis function library ratekeeper
        /// loads (FUNCTION LOAD; its first line names the library and its
        /// one function), called with FCALL and the same keys and arguments.
        #[arg(long)]
        function: bool,
    },
    /// Policies: `check` a file offline, or `show` those of a running instance.
    Policies {
        #[command(subcommand)]
        command: PoliciesCommand,
    },
    /// Exit 0 if GET /healthz answers 200 within 2 s: the container
    /// HEALTHCHECK, which needs no curl in the image. It reads the same
    /// configuration as `serve` (--config, RATEKEEPER_*), so it probes the
    /// port the service listens on.
    Healthcheck {
        /// A TOML file layered over the defaults, as for `serve`.
        #[arg(long, value_name = "FILE", env = "RATEKEEPER_CONFIG")]
        config: Option<PathBuf>,
        /// Probe this URL instead of the configured server.listen.
        #[arg(long)]
        url: Option<String>,
    },
    /// Who a running instance is limiting right now: GET /v1/top as a
    /// table that refreshes (needs the admin scope when tokens are on).
    /// Counts are this instance's own; see docs/observability.md to merge
    /// instances.
    Top(top::TopArgs),
    /// Check a key on a running instance (POST /v1/check): spends --cost
    /// (default 1; 0 only asks). Exits 0 when allowed, 3 when denied.
    Check(client::CheckArgs),
    /// Reset a key's limits on a running instance (POST /v1/reset; the
    /// admin scope when tokens are on).
    Reset(client::ResetArgs),
    /// A key's runtime override of a policy's limits on a running instance
    /// (/v1/overrides; the admin scope when tokens are on).
    Override {
        #[command(subcommand)]
        command: tenants::OverrideCommand,
    },
    /// Block a key on a running instance: every check of it denied
    /// (PUT /v1/blocks; the admin scope when tokens are on).
    Block(tenants::BlockArgs),
    /// Unblock a key (DELETE /v1/blocks).
    Unblock(tenants::UnblockArgs),
    /// The last changes to overrides, blocks and exemptions (GET /v1/audit).
    Audit(tenants::AuditArgs),
}

#[derive(Debug, Subcommand)]
pub enum PoliciesCommand {
    /// Validate a policies file as `serve` would load it, with the configured
    /// bounds (limits.max_limits_per_check, ...): print a one-line summary and
    /// exit 0, or print every problem with its line and column and exit 64.
    Check {
        /// The policies file.
        file: PathBuf,
        /// A TOML file layered over the defaults, as for `serve`.
        #[arg(long, value_name = "FILE", env = "RATEKEEPER_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Show the policies a running instance has in force (GET
    /// /v1/policies; the admin scope when tokens are on).
    Show(client::ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML file layered over the defaults (see config/default.toml).
    #[arg(long, value_name = "FILE", env = "RATEKEEPER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [config: server.listen, default 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Use Redis at this URL; without it, the embedded in-memory store
    /// [config: redis.url].
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Answer when the store is unreachable: open allows, closed denies,
    /// local limits per instance from an embedded store
    /// [config: failure.mode, default open].
    #[arg(long, value_enum)]
    pub failure_mode: Option<FailureModeArg>,
    /// Named policies, watched and reloaded on change and on SIGHUP
    /// [config: policies.file].
    #[arg(long, value_name = "FILE")]
    pub policies: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FailureModeArg {
    Open,
    Closed,
    Local,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            config_file: self.config.clone(),
            listen: self.listen.clone(),
            redis_url: self.redis_url.clone(),
            failure_mode: self.failure_mode.map(|m| match m {
                FailureModeArg::Open => "open".to_string(),
                FailureModeArg::Closed => "closed".to_string(),
                FailureModeArg::Local => "local".to_string(),
            }),
            policies_file: self.policies.clone(),
        }
    }
}

/// The runtime's worker threads `serve` asks for (`server.worker_threads`),
/// read before the runtime exists; `None` for tokio's default, for every
/// other command, and when the settings do not load (then `serve` says why
/// and exits 64, as ever).
pub fn worker_threads(cli: &Cli) -> Option<usize> {
    match &cli.command {
        Command::Serve(args) => {
            Settings::load(&args.overrides())
                .ok()?
                .server
                .worker_threads
        }
        _ => None,
    }
}

/// Runs the parsed command and returns the process exit code.
pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Openapi => {
            print!("{}", crate::http::openapi::yaml());
            ExitCode::SUCCESS
        }
        Command::Serve(args) => serve(args).await,
        Command::Top(args) => remote_exit(top::run(args).await.map(|()| 0)),
        Command::Check(args) => remote_exit(client::check(args).await),
        Command::Reset(args) => remote_exit(client::reset(args).await),
        Command::Override { command } => remote_exit(tenants::run_override(command).await),
        Command::Block(args) => remote_exit(tenants::block(args).await),
        Command::Unblock(args) => remote_exit(tenants::unblock(args).await),
        Command::Audit(args) => remote_exit(tenants::audit(args).await),
        Command::Policies {
            command: PoliciesCommand::Show(args),
        } => remote_exit(client::show(args).await),
        Command::Script { function } => {
            match function {
                true => print!("{}", crate::store::scripts::LIBRARY.1),
                false => print!("{}", crate::store::scripts::OPS.as_str()),
            }
            ExitCode::SUCCESS
        }
        Command::Policies {
            command: PoliciesCommand::Check { file, config },
        } => check_policies(&file, config),
        Command::Healthcheck { config, url } => healthcheck::run(config, url).await,
    }
}

/// The exit code of a client subcommand, its error said on stderr.
fn remote_exit(result: Result<u8, remote::RemoteError>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("ratekeeper: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// `ratekeeper policies check FILE`.
fn check_policies(file: &std::path::Path, config: Option<PathBuf>) -> ExitCode {
    let settings = match Settings::load(&Overrides {
        config_file: config,
        ..Overrides::default()
    }) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("ratekeeper: {error}");
            return ExitCode::from(EX_USAGE);
        }
    };
    match crate::policies::load(file, &settings.limits.bounds) {
        Ok(set) => {
            let limits: usize = set.iter().map(|p| p.limits.len()).sum();
            let overrides: usize = set.iter().map(|p| p.overrides.len()).sum();
            let names: Vec<&str> = set.iter().map(|p| &*p.name).collect();
            let levels: Vec<&str> = set.hierarchies().map(|h| &*h.name).collect();
            let with_levels = match levels.is_empty() {
                true => String::new(),
                false => format!(" and {} with levels ({})", levels.len(), levels.join(", ")),
            };
            println!(
                "{}: ok: {} policies ({}){with_levels}, {limits} limits, {overrides} overrides; \
                 sha256 {}",
                file.display(),
                set.len(),
                names.join(", "),
                set.sha256
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("ratekeeper: {error}");
            ExitCode::from(EX_USAGE)
        }
    }
}

/// Traces and their layer, when `[otel]` (or the `OTEL_*` variables) turned
/// them on.
fn start_traces(
    otel: &crate::telemetry::otel::OtelSettings,
) -> Result<
    Option<(
        crate::telemetry::otel::Traces,
        crate::telemetry::otel::OtelLayer,
    )>,
    crate::telemetry::otel::OtelError,
> {
    otel.enabled
        .then(|| crate::telemetry::otel::start(otel))
        .transpose()
}

async fn serve(args: ServeArgs) -> ExitCode {
    let settings = match Settings::load(&args.overrides()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("ratekeeper: {error}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let json = match settings.log.format {
        LogFormat::Json => Some(true),
        LogFormat::Pretty => Some(false),
        LogFormat::Auto => None,
    };
    let (traces, layer) = match start_traces(&settings.otel) {
        Ok(started) => started.unzip(),
        Err(error) => {
            eprintln!("ratekeeper: {error}");
            return ExitCode::from(EX_USAGE);
        }
    };
    crate::telemetry::init(&settings.log.level, json, layer);
    let shutdown = shutdown_signal();
    for name in &settings.ignored_env {
        tracing::debug!(
            variable = %name,
            "ignoring {name}: not of the RATEKEEPER_<SECTION>__<KEY> shape, so not configuration"
        );
    }
    let app = match Application::build(settings).await {
        Ok(app) => app,
        // The configuration names a file that is wrong: EX_USAGE.
        Err(
            error @ (StartError::Policies(_)
            | StartError::Tokens(_)
            | StartError::Rls(_)
            | StartError::Tenants(_)),
        ) => {
            tracing::error!(%error, "cannot start: {error}");
            eprintln!("ratekeeper: {error}");
            return ExitCode::from(EX_USAGE);
        }
        Err(error) => {
            tracing::error!(%error, "cannot start");
            return ExitCode::FAILURE;
        }
    };
    let stopped = app.run_until_stopped(shutdown).await;
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    match stopped {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "server error");
            ExitCode::FAILURE
        }
    }
}
