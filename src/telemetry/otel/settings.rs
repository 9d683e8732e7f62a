//! What traces need to start, as plain values: `config` reads them
//! (`[otel]` and the `OTEL_*` variables), so that telemetry knows nothing
//! of the configuration.

use std::path::PathBuf;
use std::time::Duration;

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

/// Which requests without a sampled parent are traced, and whether a
/// parent's decision is followed (`parentbased_*`, the specification's
/// default `parentbased_always_on`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerSettings {
    pub parent_based: bool,
    /// The share of root requests traced: 0 (`always_off`), 1
    /// (`always_on`) or the `traceidratio` argument.
    pub ratio: f64,
}

/// `[otel]`, with the `OTEL_*` variables applied.
#[derive(Debug, Clone)]
pub struct OtelSettings {
    pub enabled: bool,
    /// The full URL spans are sent to: for HTTP/protobuf, the base
    /// endpoint with `/v1/traces` (unless given per signal).
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    pub service_name: String,
    pub sampler: SamplerSettings,
    /// Finished spans waiting for the exporter; past it they are dropped
    /// and counted, never waited for.
    pub queue_size: usize,
    pub batch_size: usize,
    pub schedule_delay: Duration,
    pub export_timeout: Duration,
    /// Set: the attribute `ratekeeper.key_hash`, an HMAC-SHA256 of the key
    /// under this file's secret. Unset: no trace carries anything of a key.
    pub key_hash_secret_file: Option<PathBuf>,
}
