//! Tests of the settings loader.

use super::reader::flatten;
use super::*;
use crate::domain::FailureMode;
use std::collections::HashMap;
use std::time::Duration;

fn env(vars: &[(&str, &str)]) -> Environment {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Environment::default().source(Some(map))
}

#[test]
fn defaults_load_and_mean_the_embedded_store() {
    let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
    assert!(s.redis.is_none());
    assert_eq!(s.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(s.failure.mode, FailureMode::Open);
    assert_eq!(s.limits.bounds.max_key_bytes, 512);
    let server = &s.server;
    assert_eq!(
        (
            server.header_read_timeout,
            server.body_read_timeout,
            server.keepalive_timeout,
            server.write_timeout,
            server.max_connections,
        ),
        (
            Duration::from_secs(10),
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(10),
            10_000
        )
    );
}

#[test]
fn env_then_cli_override_the_file() {
    let vars = [
        ("RATEKEEPER_REDIS__URL", "redis://127.0.0.1:7000"),
        ("RATEKEEPER_REDIS__TIMEOUT", "50ms"),
    ];
    let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
    let redis = s.redis.unwrap();
    assert_eq!(
        (redis.url.as_str(), redis.timeout),
        ("redis://127.0.0.1:7000", Duration::from_millis(50))
    );

    let cli = Overrides {
        redis_url: Some("redis://127.0.0.1:7001".into()),
        failure_mode: Some("closed".into()),
        ..Default::default()
    };
    let s = Settings::load_from(&cli, env(&vars)).unwrap();
    assert_eq!(s.redis.unwrap().url, "redis://127.0.0.1:7001");
    assert_eq!(s.failure.mode, FailureMode::Closed);
}

#[test]
fn reports_every_bad_key_at_once() {
    let vars = [
        ("RATEKEEPER_REDIS__TIMEOUT", "50"),
        ("RATEKEEPER_SERVER__LISTEN", "nowhere"),
        ("RATEKEEPER_FAILURE__MODE", "maybe"),
        ("RATEKEEPER_REDIS__TMEOUT", "1s"),
    ];
    let err = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
    let text = err.to_string();
    for key in [
        "redis.timeout",
        "server.listen",
        "failure.mode",
        "redis.tmeout: unknown key",
    ] {
        assert!(text.contains(key), "{key} missing from:\n{text}");
    }
    assert_eq!(err.problems.len(), 4);
}

#[test]
fn only_variables_of_the_documented_shape_are_configuration() {
    for name in [
        "RATEKEEPER_REDIS__URL",
        "RATEKEEPER_SERVER__SHUTDOWN_TIMEOUT",
        "RATEKEEPER_REDIS__TMEOUT",
    ] {
        assert!(is_config_var(name), "{name}");
    }
    // What Kubernetes injects for a Service named `ratekeeper`.
    for name in [
        "RATEKEEPER_SERVICE_HOST",
        "RATEKEEPER_SERVICE_PORT_HTTP",
        "RATEKEEPER_PORT",
        "RATEKEEPER_PORT_8080_TCP_ADDR",
        "RATEKEEPER_CONFIG",
        "RATEKEEPER___X",
    ] {
        assert!(!is_config_var(name), "{name}");
    }
}

#[test]
fn a_bad_redis_url_is_reported_without_its_password() {
    let vars = [("RATEKEEPER_REDIS__URL", "redis://bob:hunter2@host:notaport")];
    let text = Settings::load_from(&Overrides::default(), env(&vars))
        .unwrap_err()
        .to_string();
    assert!(text.contains("redis.url"), "{text}");
    assert!(text.contains("bob:***@host"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
    assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    // A password with an unencoded '/', '?' or '#' does not parse as a URL,
    // which is exactly when it would be echoed.
    assert_eq!(
        redact_url("redis://:pa/ss@host:6379"),
        "redis://:***@host:6379"
    );
    assert_eq!(redact_url("redis://u:a?b#c@host/0"), "redis://u:***@host/0");
    assert_eq!(redact_url("redis://bob@host"), "redis://bob@host");
}

#[test]
fn the_password_file_is_spliced_into_the_url_and_hidden_from_debug() {
    let dir = std::env::temp_dir().join(format!("rk-pw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("password");
    std::fs::write(&file, "p@ss:w/rd\n").unwrap();
    let path = file.to_str().unwrap();
    let vars = [
        ("RATEKEEPER_REDIS__URL", "redis://app@127.0.0.1:6379/0"),
        ("RATEKEEPER_REDIS__PASSWORD_FILE", path),
    ];
    let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
    let redis = s.redis.unwrap();
    assert_eq!(redis.url, "redis://app:p%40ss%3Aw%2Frd@127.0.0.1:6379/0");
    let parsed = fred::prelude::Config::from_url(&redis.url).unwrap();
    assert_eq!(parsed.password.as_deref(), Some("p@ss:w/rd"));
    assert!(!format!("{redis:?}").contains("p%40ss"));

    let both = [
        ("RATEKEEPER_REDIS__URL", "redis://app:other@127.0.0.1:6379"),
        ("RATEKEEPER_REDIS__PASSWORD_FILE", path),
    ];
    let text = Settings::load_from(&Overrides::default(), env(&both))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("one place") && !text.contains("other"),
        "{text}"
    );
    let missing = [
        ("RATEKEEPER_REDIS__URL", "redis://127.0.0.1:6379"),
        ("RATEKEEPER_REDIS__PASSWORD_FILE", "/nonexistent/pw"),
    ];
    let text = Settings::load_from(&Overrides::default(), env(&missing))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("redis.password_file: cannot read /nonexistent/pw"),
        "{text}"
    );
    // Read like the watched files: a FIFO would hang startup, and a link
    // to /dev/zero would read until memory ran out.
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for (path, why) in [
        (fifo.to_str().unwrap(), "is a FIFO"),
        ("/dev/zero", "it must be a regular file"),
    ] {
        let bad = [
            ("RATEKEEPER_REDIS__URL", "redis://127.0.0.1:6379"),
            ("RATEKEEPER_REDIS__PASSWORD_FILE", path),
        ];
        let text = Settings::load_from(&Overrides::default(), env(&bad))
            .unwrap_err()
            .to_string();
        assert!(text.contains(why), "{text}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn local_failure_mode_and_breaker_keys() {
    let vars = [
        ("RATEKEEPER_FAILURE__MODE", "local"),
        ("RATEKEEPER_BREAKER__CONSECUTIVE_FAILURES", "3"),
        ("RATEKEEPER_BREAKER__FAILURE_RATIO", "0.25"),
    ];
    let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
    assert_eq!(s.failure.mode, FailureMode::Local);
    assert_eq!(
        (s.breaker.consecutive_failures, s.breaker.failure_ratio),
        (3, 0.25)
    );
    assert_eq!(s.breaker.min_calls, 20);

    let bad = [
        ("RATEKEEPER_BREAKER__FAILURE_RATIO", "1.5"),
        ("RATEKEEPER_BREAKER__MIN_CALLS", "0"),
        ("RATEKEEPER_BREAKER__OPEN_FOR", "0s"),
    ];
    let err = Settings::load_from(&Overrides::default(), env(&bad)).unwrap_err();
    assert_eq!(err.problems.len(), 3, "{err}");
}

#[test]
fn declared_keys_match_the_reference_file() {
    let config = Config::builder()
        .add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml))
        .build()
        .unwrap();
    let mut found = Vec::new();
    flatten("", &config.cache.clone().into_table().unwrap(), &mut found);
    found.sort();
    let declared: Vec<String> = Settings::declared_keys()
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, declared);
}

/// The readers ask for every key whatever became of the others, so a key
/// of a broken section is never also taken for unknown.
#[test]
fn every_key_is_asked_for_even_when_each_is_bad() {
    let vars: Vec<(String, &str)> = Settings::declared_keys()
        .iter()
        .map(|key| {
            let var = format!("RATEKEEPER_{}", key.to_uppercase().replace('.', "__"));
            (var, "?bad?")
        })
        .collect();
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let err = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
    let text = err.to_string();
    assert!(!text.contains("unknown key"), "{text}");
    // Keys that take any string (a prefix, a password file) are no problem.
    assert!(err.problems.len() > 40, "{text}");
}

/// Unknown keys are listed first, as they were when a hand-kept list
/// was checked before any key was read.
#[test]
fn unknown_keys_come_first_and_every_one_is_named() {
    let vars = [
        ("RATEKEEPER_SERVER__LISTEN", "nowhere"),
        ("RATEKEEPER_REDIS__TLS__CA_FLE", "x"),
        ("RATEKEEPER_NOPE__KEY", "1"),
    ];
    let err = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
    assert_eq!(err.problems.len(), 3, "{err}");
    assert!(err.problems[0].ends_with(": unknown key"), "{err}");
    assert!(err.problems[1].ends_with(": unknown key"), "{err}");
    assert!(err.problems[2].starts_with("server.listen:"), "{err}");
}

#[test]
fn trusted_proxies_default_empty_and_read_from_the_environment() {
    let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
    assert!(s.server.trusted_proxies.is_empty());
    let vars = [(
        "RATEKEEPER_SERVER__TRUSTED_PROXIES",
        "10.0.0.0/8, ::1 ,127.0.0.1",
    )];
    let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
    let shown: Vec<String> = s
        .server
        .trusted_proxies
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(shown, ["10.0.0.0/8", "::1/128", "127.0.0.1/32"]);
    let vars = [("RATEKEEPER_SERVER__TRUSTED_PROXIES", "10.0.0.0/33")];
    let err = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
    assert!(err.to_string().contains("server.trusted_proxies"), "{err}");
}

#[test]
fn auth_keys_from_the_environment() {
    let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
    assert!(s.auth.tokens_file.is_none());
    assert!(!s.auth.protect_metrics);
    let vars = [
        (
            "RATEKEEPER_AUTH__TOKENS_FILE",
            "/run/secrets/ratekeeper/tokens",
        ),
        ("RATEKEEPER_AUTH__PROTECT_METRICS", "true"),
    ];
    let s = Settings::load_from(&Overrides::default(), env(&vars)).unwrap();
    let file = s.auth.tokens_file.as_deref().unwrap();
    assert_eq!(file, std::path::Path::new("/run/secrets/ratekeeper/tokens"));
    assert!(s.auth.protect_metrics);
    // Protecting /metrics without tokens would protect nothing.
    let vars = [("RATEKEEPER_AUTH__PROTECT_METRICS", "true")];
    let err = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
    assert!(err.to_string().contains("needs auth.tokens_file"), "{err}");
    let vars = [("RATEKEEPER_AUTH__PROTECT_METRICS", "yes")];
    let err = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
    assert!(err.to_string().contains("auth.protect_metrics"), "{err}");
}

#[test]
fn max_wait_and_max_waiters_default_and_are_bounded() {
    let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
    assert_eq!(
        (s.limits.bounds.max_wait_ms, s.limits.bounds.max_waiters),
        (10_000, 5_000)
    );
    let s = Settings::load_from(
        &Overrides::default(),
        env(&[
            ("RATEKEEPER_LIMITS__MAX_WAIT", "0s"),
            ("RATEKEEPER_LIMITS__MAX_WAITERS", "0"),
        ]),
    )
    .unwrap();
    assert_eq!(
        (s.limits.bounds.max_wait_ms, s.limits.bounds.max_waiters),
        (0, 0)
    );
    let error = Settings::load_from(
        &Overrides::default(),
        env(&[
            ("RATEKEEPER_LIMITS__MAX_WAIT", "2h"),
            ("RATEKEEPER_LIMITS__MAX_WAITERS", "-1"),
        ]),
    )
    .unwrap_err();
    let problems = error.problems.join("\n");
    assert!(problems.contains("limits.max_wait"), "{problems}");
    assert!(problems.contains("must be at most 1h"), "{problems}");
    assert!(problems.contains("limits.max_waiters"), "{problems}");
}

#[test]
fn max_waiters_per_key_defaults_to_a_thousand_and_is_bounded() {
    let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
    assert_eq!(s.limits.bounds.max_waiters_per_key, 1_000);
    let vars = [("RATEKEEPER_LIMITS__MAX_WAITERS_PER_KEY", "-1")];
    let error = Settings::load_from(&Overrides::default(), env(&vars)).unwrap_err();
    let problems = error.problems.join("\n");
    assert!(
        problems.contains("limits.max_waiters_per_key"),
        "{problems}"
    );
}

#[test]
fn the_grpc_listener_bounds_default_and_are_checked() {
    let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
    assert_eq!(s.grpc.max_connections, 1_000);
    assert_eq!(s.grpc.handshake_timeout, Duration::from_secs(10));
    assert_eq!(s.grpc.idle_timeout, Duration::from_secs(300));
    let bad = [
        ("RATEKEEPER_GRPC__MAX_CONNECTIONS", "0"),
        ("RATEKEEPER_GRPC__HANDSHAKE_TIMEOUT", "10"),
        ("RATEKEEPER_GRPC__IDLE_TIMEOUT", "soon"),
    ];
    let err = Settings::load_from(&Overrides::default(), env(&bad)).unwrap_err();
    assert_eq!(err.problems.len(), 3, "{err}");
}

#[test]
fn max_batch_defaults_to_a_hundred_and_is_bounded() {
    let s = Settings::load_from(&Overrides::default(), env(&[])).unwrap();
    assert_eq!(s.limits.max_batch, 100);
    let s = Settings::load_from(
        &Overrides::default(),
        env(&[("RATEKEEPER_LIMITS__MAX_BATCH", "1")]),
    )
    .unwrap();
    assert_eq!(s.limits.max_batch, 1);
    for bad in ["0", "1001", "ten"] {
        let error = Settings::load_from(
            &Overrides::default(),
            env(&[("RATEKEEPER_LIMITS__MAX_BATCH", bad)]),
        )
        .unwrap_err();
        let problems = error.problems.join("\n");
        assert!(problems.contains("limits.max_batch"), "{bad}: {problems}");
    }
}
