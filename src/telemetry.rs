//! Logging: human-readable on a terminal, one JSON object per line otherwise
//! (what log shippers expect from a container).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber. `RUST_LOG` overrides `log.level`.
/// Calling it twice is harmless (the second call is ignored), which tests need.
pub fn init(settings: &LogSettings) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.level));
    let filter = quiet_watcher(filter);
    let terminal = std::io::stdout().is_terminal();
    let json = match settings.format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !terminal,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(terminal);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.compact().try_init()
    };
}

/// The file watcher logs every event in a watched directory at trace. A
/// log written into the directory of the policies or tokens file would then
/// log its own writes, without end (gigabytes in minutes at `trace`), so
/// its target stops at debug unless the filter names it.
fn quiet_watcher(filter: EnvFilter) -> EnvFilter {
    if filter.to_string().contains("notify") {
        return filter;
    }
    match "notify=debug".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}
