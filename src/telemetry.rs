//! Logging: human-readable on a terminal, one JSON object per line otherwise
//! (what log shippers expect from a container).

use std::io::IsTerminal;

use tracing::Level;
use tracing_subscriber::filter::{FilterExt, FilterFn, LevelFilter, filter_fn};
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry};

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber. `RUST_LOG` overrides `log.level`.
/// Calling it twice is harmless (the second call is ignored), which tests need.
pub fn init(settings: &LogSettings) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.level));
    let watcher_named = filter.to_string().contains("notify");
    let filter = filter.and(no_watcher_trace(watcher_named));
    let terminal = std::io::stdout().is_terminal();
    let json = match settings.format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !terminal,
    };
    let layer = tracing_subscriber::fmt::layer().with_ansi(terminal);
    let layer: Box<dyn Layer<Registry> + Send + Sync> = if json {
        Box::new(layer.json().flatten_event(true))
    } else {
        Box::new(layer.compact())
    };
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .try_init();
}

/// The file watcher logs every event in a watched directory at trace. A
/// log written into the directory of the policies or tokens file would then
/// log its own writes, without end (gigabytes in minutes at `trace`), so
/// its trace lines are dropped unless the filter names it. A cap, not a
/// level: it never lets through anything the filter would not.
fn no_watcher_trace(watcher_named: bool) -> FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    // The hint keeps the filter's own maximum level (the `and` takes the
    // lower of the two), so `log` records below it stay cheap to skip.
    filter_fn(move |meta| {
        watcher_named || *meta.level() != Level::TRACE || !meta.target().starts_with("notify")
    })
    .with_max_level_hint(LevelFilter::TRACE)
}
