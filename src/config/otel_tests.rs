//! `[otel]` and the standard `OTEL_*` variables over it.

use std::collections::HashMap;
use std::time::Duration;

use config::Environment;

use super::{OtelSettings, OtlpProtocol, SamplerSettings};
use crate::config::{ConfigError, Overrides, Settings};

/// The settings with `RATEKEEPER_*` variables `file` and `OTEL_*` `otel`.
fn load(file: &[(&str, &str)], otel: &[(&str, &str)]) -> Result<OtelSettings, ConfigError> {
    let map: HashMap<String, String> = file
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let env = Environment::default().source(Some(map));
    let otel: HashMap<String, String> = otel
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let get = |name: &str| otel.get(name).cloned();
    Settings::load_with(&Overrides::default(), env, &get).map(|s| s.otel)
}

#[test]
fn traces_are_off_by_default_with_the_specifications_defaults() {
    let s = load(&[], &[]).unwrap();
    assert!(!s.enabled);
    assert_eq!(s.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(s.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!(s.service_name, "ratekeeper");
    assert_eq!(
        s.sampler,
        SamplerSettings {
            parent_based: true,
            ratio: 1.0
        }
    );
    assert_eq!((s.queue_size, s.batch_size), (2048, 512));
    assert_eq!(s.schedule_delay, Duration::from_secs(5));
    assert_eq!(s.export_timeout, Duration::from_secs(10));
    assert!(s.key_hash_secret_file.is_none());
}

#[test]
fn an_endpoint_in_the_environment_turns_traces_on_unless_the_sdk_is_disabled() {
    let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/");
    let s = load(&[], &[base]).unwrap();
    assert!(s.enabled);
    assert_eq!(s.endpoint, "http://collector:4318/v1/traces");
    let per_signal = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:9/custom");
    assert_eq!(
        load(&[], &[base, per_signal]).unwrap().endpoint,
        "http://c:9/custom"
    );
    let grpc = ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let s = load(
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), grpc],
    )
    .unwrap();
    assert_eq!(
        (s.protocol, s.endpoint.as_str()),
        (OtlpProtocol::Grpc, "http://c:4317")
    );
    for off in [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_TRACES_EXPORTER", "none"),
    ] {
        assert!(
            !load(&[("RATEKEEPER_OTEL__ENABLED", "true")], &[base, off])
                .unwrap()
                .enabled
        );
    }
}

#[test]
fn the_standard_variables_win_over_the_keys() {
    let file = [
        ("RATEKEEPER_OTEL__SERVICE_NAME", "from-file"),
        ("RATEKEEPER_OTEL__SAMPLER", "always_on"),
        ("RATEKEEPER_OTEL__QUEUE_SIZE", "10"),
    ];
    let otel = [
        ("OTEL_SERVICE_NAME", "from-env"),
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "20"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
    ];
    let s = load(&file, &otel).unwrap();
    assert_eq!(s.service_name, "from-env");
    assert_eq!(
        s.sampler,
        SamplerSettings {
            parent_based: false,
            ratio: 0.25
        }
    );
    assert_eq!(s.queue_size, 20);
    assert_eq!(s.schedule_delay, Duration::from_millis(100));
    assert_eq!(s.export_timeout, Duration::from_millis(2500));
    assert_eq!(load(&file, &[]).unwrap().service_name, "from-file");
    let bsp = load(&[], &[("OTEL_BSP_EXPORT_TIMEOUT", "1500")]).unwrap();
    assert_eq!(bsp.export_timeout, Duration::from_millis(1500));
}

#[test]
fn bad_values_are_refused_and_an_https_collector_is_never_downgraded() {
    let problems = |file: &[(&str, &str)], otel: &[(&str, &str)]| {
        load(file, otel).unwrap_err().problems.join("\n")
    };
    let https = problems(
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://u:secret@c:4318")],
    );
    assert!(
        https.contains("https:// collectors are not supported"),
        "{https}"
    );
    assert!(!https.contains("secret"), "{https}");
    let userinfo = problems(
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://u:secret@c:4318")],
    );
    assert!(
        userinfo.contains("must not carry credentials"),
        "{userinfo}"
    );
    assert!(!userinfo.contains("secret"), "{userinfo}");
    let ratio = problems(
        &[],
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ],
    );
    assert!(ratio.contains("from 0 to 1"), "{ratio}");
    let json = problems(&[], &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
    assert!(json.contains("http/json is not supported"), "{json}");
    let unknown = problems(&[("RATEKEEPER_OTEL__SAMPLER", "sometimes")], &[]);
    assert!(unknown.contains("otel.sampler"), "{unknown}");
    let queue = problems(&[], &[("OTEL_BSP_MAX_QUEUE_SIZE", "0")]);
    assert!(queue.contains("OTEL_BSP_MAX_QUEUE_SIZE"), "{queue}");
}
