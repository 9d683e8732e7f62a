//! Logging: human-readable on a terminal, one JSON object per line otherwise
//! (what log shippers expect from a container).

pub mod otel;
mod throttle;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::filter::{FilterExt, FilterFn, LevelFilter, filter_fn};
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry};

pub use throttle::LogThrottle;

/// Installs the global subscriber: `level` is a tracing filter (`log.level`;
/// `RUST_LOG` overrides it), `json` is `Some(true)` for JSON lines,
/// `Some(false)` for pretty lines, `None` for JSON unless stdout is a
/// terminal. Plain values, so that logging knows nothing of the config.
/// `traces` is the OpenTelemetry layer when traces are on
/// ([`otel::start`]). Calling it twice is harmless (the second call is
/// ignored), which tests need.
pub fn init(level: &str, json: Option<bool>, traces: Option<otel::OtelLayer>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let watcher_named = filter.to_string().contains("notify");
    let filter = filter
        .and(no_watcher_trace(watcher_named))
        .and(Http2Cap(LogThrottle::new(HTTP2_LOG_INTERVAL)));
    let terminal = std::io::stdout().is_terminal();
    let json = json.unwrap_or(!terminal);
    let layer = tracing_subscriber::fmt::layer().with_ansi(terminal);
    let layer: Box<dyn Layer<Registry> + Send + Sync> = if json {
        Box::new(layer.json().flatten_event(true))
    } else {
        Box::new(layer.compact())
    };
    // One list, as each boxed layer is a layer of the bare registry.
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = Vec::with_capacity(2);
    layers.extend(traces);
    layers.push(Box::new(layer.with_filter(filter)));
    let _ = tracing_subscriber::registry()
        .with(layers)
        .with(CountHttp2.with_filter(OnlyHttp2Warnings))
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

/// Warnings of the HTTP/2 layer seen since the process started (the
/// `ratekeeper_http2_warnings_total` metric reads it).
static HTTP2_WARNINGS: AtomicU64 = AtomicU64::new(0);

/// At most one HTTP/2 warning line per this long reaches the log.
const HTTP2_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How many warnings the HTTP/2 layer (the `h2` crate) has logged, or
/// would have, since the process started.
pub fn http2_warnings() -> u64 {
    HTTP2_WARNINGS.load(Ordering::Relaxed)
}

/// The h2 crate warns once per connection that goes over one of its
/// limits (reset streams: rapid reset, and the like): a client that opens
/// such connections in a loop writes the log at its own pace (5 689 lines
/// in 35 s in the issue). These are its only warnings.
fn is_http2_warning(meta: &Metadata<'_>) -> bool {
    *meta.level() <= Level::WARN && (meta.target() == "h2" || meta.target().starts_with("h2::"))
}

/// Lets the first HTTP/2 warning of every [`HTTP2_LOG_INTERVAL`] through
/// to the log; the rest are only counted (by [`CountHttp2`]). Other events
/// pass untouched. A cap, not a level: it never lets through anything the
/// filter before it would not (it comes last in the `and`).
struct Http2Cap(LogThrottle);

impl<S> Filter<S> for Http2Cap {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        if !is_http2_warning(meta) {
            return true;
        }
        self.0.admit().is_some()
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // Asked per event for the h2 warnings only; fixed for the rest.
        if is_http2_warning(meta) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
}

/// Enables [`CountHttp2`] for the h2 warnings only, whatever the log level.
struct OnlyHttp2Warnings;

impl<S> Filter<S> for OnlyHttp2Warnings {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        is_http2_warning(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if is_http2_warning(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::WARN)
    }
}

/// Counts every h2 warning, logged or not.
struct CountHttp2;

impl<S: tracing::Subscriber> Layer<S> for CountHttp2 {
    fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
        HTTP2_WARNINGS.fetch_add(1, Ordering::Relaxed);
    }
}
