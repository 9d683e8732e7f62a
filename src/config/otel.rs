//! `[otel]`: OpenTelemetry traces over OTLP. Off by default. The standard
//! `OTEL_*` variables are read the way other OpenTelemetry SDKs read them,
//! and each takes precedence over its key here: an exporter endpoint in the
//! environment turns traces on, unless `OTEL_SDK_DISABLED=true`.

use std::time::Duration;

use super::reader::{Reader, int_in};
pub use crate::telemetry::otel::{OtelSettings, OtlpProtocol, SamplerSettings};

/// Where a variable comes from: the process's environment, or a test's map.
pub type OtelEnv<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(super) fn read_otel(r: &mut Reader, env: OtelEnv) -> Option<OtelSettings> {
    let enabled = r.boolean("otel.enabled");
    let endpoint = r.parse("otel.endpoint", |s| Ok(s.to_string()));
    let protocol = r.parse("otel.protocol", parse_protocol);
    let service_name = r.parse("otel.service_name", |s| Ok(s.to_string()));
    let sampler = r.parse("otel.sampler", |s| Ok(s.to_string()));
    let sampler_arg = r.parse("otel.sampler_arg", |s| Ok(s.to_string()));
    let queue_size = r.count("otel.queue_size", 1, 1_000_000);
    let batch_size = r.count("otel.batch_size", 1, 100_000);
    let schedule_delay = r.duration("otel.schedule_delay");
    let export_timeout = r.duration("otel.export_timeout");
    let key_hash_secret_file = r.path("otel.key_hash_secret_file");
    let mut env = Env {
        get: env,
        problems: Vec::new(),
    };
    let mut settings = OtelSettings {
        enabled: enabled?,
        endpoint: endpoint?,
        protocol: protocol?,
        service_name: service_name?,
        sampler: SamplerSettings {
            parent_based: true,
            ratio: 1.0,
        },
        queue_size: queue_size?,
        batch_size: batch_size?,
        schedule_delay: schedule_delay?,
        export_timeout: export_timeout?,
        key_hash_secret_file: key_hash_secret_file?,
    };
    env.exporter(&mut settings);
    env.batching(&mut settings);
    let name = env.var("OTEL_TRACES_SAMPLER").unwrap_or(sampler?);
    let arg = env.var("OTEL_TRACES_SAMPLER_ARG").unwrap_or(sampler_arg?);
    match parse_sampler(name.trim(), arg.trim()) {
        Ok(sampler) => settings.sampler = sampler,
        Err(m) => env.problem("otel.sampler", m),
    }
    for (key, m) in env.problems {
        r.problem(&key, m);
    }
    Some(settings)
}

/// The standard variables, each over its key, and what was wrong with them.
struct Env<'a> {
    get: OtelEnv<'a>,
    problems: Vec<(String, String)>,
}

impl Env<'_> {
    /// A variable that is set and not blank.
    fn var(&self, name: &str) -> Option<String> {
        (self.get)(name).filter(|v| !v.trim().is_empty())
    }

    fn problem(&mut self, key: &str, message: String) {
        self.problems.push((key.to_string(), message));
    }

    /// Whether traces are on, and where they go. `settings.endpoint` holds
    /// the file's base URL on the way in and the traces URL on the way out.
    fn exporter(&mut self, settings: &mut OtelSettings) {
        let protocol = self
            .var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| self.var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = protocol {
            match parse_protocol(p.trim()) {
                Ok(protocol) => settings.protocol = protocol,
                Err(m) => self.problem("OTEL_EXPORTER_OTLP_PROTOCOL", format!("{m} (got {p:?})")),
            }
        }
        let protocol = settings.protocol;
        settings.endpoint = if let Some(url) = self.var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            settings.enabled = true;
            url.trim().to_string()
        } else if let Some(base) = self.var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            settings.enabled = true;
            signal_url(&base, protocol)
        } else if settings.endpoint.is_empty() {
            match protocol {
                OtlpProtocol::Grpc => "http://localhost:4317".to_string(),
                OtlpProtocol::HttpProtobuf => "http://localhost:4318/v1/traces".to_string(),
            }
        } else {
            signal_url(&settings.endpoint, protocol)
        };
        let disabled = self.var("OTEL_SDK_DISABLED");
        if disabled.is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            settings.enabled = false;
        }
        match self.var("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            None | Some("otlp") => {}
            Some("none") => settings.enabled = false,
            Some(other) => self.problem(
                "OTEL_TRACES_EXPORTER",
                format!("must be \"otlp\" or \"none\" (got {other:?})"),
            ),
        }
        if settings.enabled
            && let Err(m) = check_endpoint(&settings.endpoint)
        {
            self.problem("otel.endpoint", m);
        }
    }

    /// The service's name, the queue and the export's pace.
    fn batching(&mut self, settings: &mut OtelSettings) {
        if let Some(name) = self.var("OTEL_SERVICE_NAME") {
            settings.service_name = name.trim().to_string();
        }
        if let Some(n) = self.int("OTEL_BSP_MAX_QUEUE_SIZE", 1_000_000) {
            settings.queue_size = n as usize;
        }
        if let Some(n) = self.int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 100_000) {
            settings.batch_size = n as usize;
        }
        if let Some(ms) = self.int("OTEL_BSP_SCHEDULE_DELAY", 3_600_000) {
            settings.schedule_delay = Duration::from_millis(ms);
        }
        let timeout = self
            .int("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 3_600_000)
            .or_else(|| self.int("OTEL_EXPORTER_OTLP_TIMEOUT", 3_600_000))
            .or_else(|| self.int("OTEL_BSP_EXPORT_TIMEOUT", 3_600_000));
        if let Some(ms) = timeout {
            settings.export_timeout = Duration::from_millis(ms);
        }
    }

    /// A whole number from 1 to `max` (milliseconds, for a time).
    fn int(&mut self, name: &str, max: u64) -> Option<u64> {
        let value = self.var(name)?;
        int_in(value.trim(), 1, max)
            .map_err(|m| self.problem(name, format!("{m} (got {value:?})")))
            .ok()
    }
}

fn parse_protocol(s: &str) -> Result<OtlpProtocol, String> {
    match s {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => Err("http/json is not supported: use \"grpc\" or \"http/protobuf\"".into()),
        _ => Err("must be \"grpc\" or \"http/protobuf\"".into()),
    }
}

/// A base endpoint's URL for traces: HTTP/protobuf appends `v1/traces`,
/// as the specification says for `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn signal_url(base: &str, protocol: OtlpProtocol) -> String {
    let base = base.trim();
    match protocol {
        OtlpProtocol::Grpc => base.to_string(),
        OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
    }
}

/// Only `http://`: this build has no TLS toward a collector, and a span
/// (or an `OTEL_EXPORTER_OTLP_HEADERS` token) must not go out in clear to
/// an operator who asked for `https://`. The URL is not quoted: it may
/// carry credentials.
fn check_endpoint(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Err(
            "https:// collectors are not supported yet (no TLS toward the collector): \
             send to a collector beside ratekeeper (a sidecar or node agent) over http://"
                .into(),
        );
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err("must be an http:// URL".into());
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err("must name a host: http://host:port".into());
    }
    // An export error's message quotes the URL: credentials in it would
    // reach the log.
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err("must not carry credentials (user:password@): \
             send them in OTEL_EXPORTER_OTLP_HEADERS"
            .into());
    }
    Ok(())
}

/// The specification's sampler names, with the argument of `traceidratio`
/// (a probability from 0 to 1; the others ignore it).
fn parse_sampler(name: &str, arg: &str) -> Result<SamplerSettings, String> {
    let (parent_based, root) = match name.strip_prefix("parentbased_") {
        Some(root) => (true, root),
        None => (false, name),
    };
    let ratio = match root {
        "always_on" => 1.0,
        "always_off" => 0.0,
        "traceidratio" => match arg.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => r,
            _ => {
                return Err(format!(
                    "{name} needs a sampler argument from 0 to 1 (got {arg:?})"
                ));
            }
        },
        _ => {
            return Err(format!(
                "must be always_on, always_off, traceidratio or their parentbased_ forms (got {name:?})"
            ));
        }
    };
    Ok(SamplerSettings {
        parent_based,
        ratio,
    })
}

#[cfg(test)]
#[path = "otel_tests.rs"]
mod tests;
