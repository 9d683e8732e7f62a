//! OpenTelemetry traces (`[otel]`, docs/observability.md "Traces"): our
//! `tracing` spans of target [`TARGET`] become OpenTelemetry spans through
//! `tracing-opentelemetry`, and leave over OTLP through `queue`.
//!
//! Nothing here runs unless traces are on: [`start`] sets `EDGE`, and
//! without it the edge builds no span, so every stage below finds none.

mod queue;
mod settings;
mod spans;

use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry::trace::{SpanContext, TracerProvider as _};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use sha2::{Digest, Sha256};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, filter_fn};
use tracing_subscriber::registry::Registry;

pub use spans::{
    Sampled, Server, Traced, batch_call, current_link, record_batch_size, record_check,
    record_failure, sample, server_span, stage, store_call,
};

pub use settings::{OtelSettings, OtlpProtocol, SamplerSettings};

/// The target of every span we make, and the only one exported: other
/// crates' spans (hyper's, tonic's) stay out of the traces.
pub const TARGET: &str = "ratekeeper::trace";

/// What the edge needs per request; set once, by [`start`].
static EDGE: OnceLock<Edge> = OnceLock::new();

struct Edge {
    sampler: RootSampler,
    /// The HMAC key for `ratekeeper.key_hash`; `None`: keys are never
    /// exported, not even hashed.
    key_secret: Option<Vec<u8>>,
}

/// The specification's samplers, decided at the edge before any span is
/// built (the SDK's sampler is then always on: it only sees what we keep).
struct RootSampler {
    parent_based: bool,
    ratio: f64,
}

impl RootSampler {
    fn sample(&self, parent: &SpanContext) -> bool {
        match (self.parent_based, parent.is_valid()) {
            (true, true) => parent.is_sampled(),
            // traceidratio decides on the trace id, as every SDK does, so
            // services at the same ratio keep the same traces whole.
            (false, true) => self.by_trace_id(parent.trace_id()),
            (_, false) => self.root(),
        }
    }

    /// The specification's TraceIdRatioBased: the trace id's last 8 bytes
    /// (less one bit) under the ratio's share of 2^63.
    fn by_trace_id(&self, id: opentelemetry::trace::TraceId) -> bool {
        let bytes = id.to_bytes();
        let low = u64::from_be_bytes(bytes[8..].try_into().expect("8 bytes")) >> 1;
        self.ratio >= 1.0 || (low as f64) < self.ratio * (1u64 << 63) as f64
    }

    /// The decision for a request without a valid parent.
    fn root(&self) -> bool {
        self.ratio >= 1.0 || (self.ratio > 0.0 && fastrand::f64() < self.ratio)
    }
}

impl Edge {
    /// HMAC-SHA256 of `key` under the operator's secret, its first 16 bytes
    /// in hex: the same key gives the same hash on every instance sharing
    /// the secret, and nobody without it can test a guess.
    fn key_hash(&self, key: &str) -> Option<String> {
        let secret = self.key_secret.as_ref()?;
        let mut block = [0u8; 64];
        if secret.len() > 64 {
            block[..32].copy_from_slice(&Sha256::digest(secret));
        } else {
            block[..secret.len()].copy_from_slice(secret);
        }
        let pad = |byte: u8| block.map(|b| b ^ byte);
        let inner = Sha256::new()
            .chain_update(pad(0x36))
            .chain_update(key.as_bytes())
            .finalize();
        let outer = Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize();
        Some(outer[..16].iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// Why traces could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error("otel: cannot build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("otel.key_hash_secret_file: {0}")]
    Secret(String),
}

/// Running traces: flushes what is queued when stopped.
pub struct Traces {
    provider: SdkTracerProvider,
    stop: queue::Stop,
}

impl Traces {
    /// Sends what is queued (within the export timeout), then stops.
    pub async fn shutdown(self) {
        let _ = self.provider.shutdown();
        self.stop.flush().await;
    }
}

/// The layer that turns our spans into OpenTelemetry spans.
pub type OtelLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// Starts the exporter and its task on the current runtime, and sets the
/// edge's sampler: from here on, sampled requests are traced.
pub fn start(settings: &OtelSettings) -> Result<(Traces, OtelLayer), OtelError> {
    let key_secret = match &settings.key_hash_secret_file {
        Some(path) => Some(read_secret(path)?),
        None => None,
    };
    let mut exporter = exporter(settings)?;
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .build();
    opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
    let (processor, stop) = queue::start(
        exporter,
        queue::Batching {
            capacity: settings.queue_size,
            batch_size: settings.batch_size,
            delay: settings.schedule_delay,
            timeout: settings.export_timeout,
        },
    );
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("ratekeeper");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(
            filter_fn(|meta| meta.target() == TARGET).with_max_level_hint(LevelFilter::INFO),
        );
    let SamplerSettings {
        parent_based,
        ratio,
    } = settings.sampler;
    let _ = EDGE.set(Edge {
        sampler: RootSampler {
            parent_based,
            ratio,
        },
        key_secret,
    });
    Ok((Traces { provider, stop }, Box::new(layer)))
}

fn exporter(settings: &OtelSettings) -> Result<opentelemetry_otlp::SpanExporter, OtelError> {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let built = match settings.protocol {
        OtlpProtocol::Grpc => builder
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.export_timeout)
            .build(),
        OtlpProtocol::HttpProtobuf => builder
            .with_http()
            .with_http_client(
                reqwest::Client::builder()
                    .timeout(settings.export_timeout)
                    .connect_timeout(settings.export_timeout.min(Duration::from_secs(5)))
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| OtelError::Exporter(e.to_string()))?,
            )
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.export_timeout)
            .build(),
    };
    built.map_err(|e| OtelError::Exporter(e.to_string()))
}

/// The HMAC key: the file's bytes, surrounding whitespace trimmed, at least
/// 16 of them. Never logged.
fn read_secret(path: &std::path::Path) -> Result<Vec<u8>, OtelError> {
    let bytes = crate::watch::read::read_regular(path, 4096)
        .map_err(|e| OtelError::Secret(format!("{}: {e}", path.display())))?;
    let secret = bytes.trim_ascii().to_vec();
    if secret.len() < 16 {
        return Err(OtelError::Secret(format!(
            "{}: the secret must be at least 16 bytes",
            path.display()
        )));
    }
    Ok(secret)
}

/// Spans exported, failed (refused by the collector or cut at the export
/// timeout) and dropped at a full queue since the process started.
pub fn span_counts() -> [u64; 3] {
    [
        queue::EXPORTED.load(Ordering::Relaxed),
        queue::FAILED.load(Ordering::Relaxed),
        queue::DROPPED.load(Ordering::Relaxed),
    ]
}

#[cfg(test)]
mod tests;
