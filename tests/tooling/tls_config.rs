//! `[redis.tls]` settings the binary cannot honour stop it with exit 64,
//! naming the key, whether they come from the config file, the
//! environment or `--redis-url`: never a silent downgrade to plaintext.

use std::path::Path;
use std::process::Output;

use crate::support;

use support::binary::ratekeeper;
use support::tls::Certs;

/// Runs `ratekeeper serve` with `args` and `env`; asserts exit 64 and that
/// stderr names `key` with `says`; returns stderr.
fn refused(args: &[&str], env: &[(&str, &Path)], key: &str, says: &str) -> String {
    let mut command = ratekeeper();
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    let Output { status, stderr, .. } = command.output().unwrap();
    let stderr = String::from_utf8(stderr).unwrap();
    assert_eq!(status.code(), Some(64), "{args:?} {env:?}: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} not named: {stderr}"));
    assert!(line.contains(says), "{key}: {line}");
    stderr
}

#[test]
fn tls_settings_with_a_plain_url_are_refused_from_every_layer() {
    let certs = Certs::new("cfg-plain");
    let ca = certs.crt("ca");
    let says = "does not use TLS";
    // The config file.
    let file = certs.dir.join("plain.toml");
    let toml = format!(
        "[redis]\nurl = \"redis://127.0.0.1:6379\"\n[redis.tls]\nca_file = \"{}\"\n",
        ca.display()
    );
    std::fs::write(&file, toml).unwrap();
    let config = ["--config", file.to_str().unwrap()];
    refused(&config, &[], "redis.tls.ca_file", says);
    // The environment, with the URL there too.
    let url = Path::new("redis://127.0.0.1:6379");
    let env = [
        ("RATEKEEPER_REDIS__URL", url),
        ("RATEKEEPER_REDIS__TLS__SERVER_NAME", Path::new("localhost")),
    ];
    refused(&[], &env, "redis.tls.server_name", says);
    // --redis-url over a TLS key from the environment.
    let env = [("RATEKEEPER_REDIS__TLS__CA_FILE", ca.as_path())];
    let flag = ["--redis-url", "redis://127.0.0.1:6379"];
    refused(&flag, &env, "redis.tls.ca_file", says);
    // No URL at all (the embedded store).
    refused(&[], &env, "redis.tls.ca_file", says);
}

#[test]
fn unusable_tls_files_and_names_are_refused_naming_the_key() {
    let certs = Certs::new("cfg-files");
    let other = Certs::new("cfg-other");
    let url = ["--redis-url", "rediss://127.0.0.1:6380"];
    let var = |key: &str| format!("RATEKEEPER_REDIS__TLS__{key}");
    let (ca, crt, key) = (certs.crt("ca"), certs.crt("client"), certs.key("client"));
    let (ca_var, crt_var, key_var) = (var("CA_FILE"), var("CERT_FILE"), var("KEY_FILE"));
    // A certificate without its key, and the reverse.
    let env = [(ca_var.as_str(), ca.as_path()), (crt_var.as_str(), &crt)];
    refused(
        &url,
        &env,
        "redis.tls.key_file",
        "must be set with cert_file",
    );
    let env = [(ca_var.as_str(), ca.as_path()), (key_var.as_str(), &key)];
    refused(
        &url,
        &env,
        "redis.tls.cert_file",
        "must be set with key_file",
    );
    // A CA file missing, not PEM, or holding no certificate.
    let missing = certs.dir.join("missing.pem");
    refused(
        &url,
        &[(&ca_var, &missing)],
        "redis.tls.ca_file",
        "cannot read",
    );
    let garbage = certs.dir.join("garbage.pem");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    refused(&url, &[(&ca_var, &garbage)], "redis.tls.ca_file", "PEM");
    let empty = certs.dir.join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    refused(
        &url,
        &[(&ca_var, &empty)],
        "redis.tls.ca_file",
        "no PEM CERTIFICATE",
    );
    // A key that is not the certificate's: named, its bytes never shown.
    let wrong_key = other.key("client");
    let env = [
        (ca_var.as_str(), ca.as_path()),
        (crt_var.as_str(), &crt),
        (key_var.as_str(), &wrong_key),
    ];
    let stderr = refused(&url, &env, "redis.tls.key_file", "is not the key of");
    let pem = std::fs::read_to_string(&wrong_key).unwrap();
    let body = pem.lines().nth(1).unwrap();
    assert!(!stderr.contains(body), "the key leaked: {stderr}");
    // A certificate given as the key.
    let env = [
        (ca_var.as_str(), ca.as_path()),
        (crt_var.as_str(), &crt),
        (key_var.as_str(), &crt),
    ];
    refused(&url, &env, "redis.tls.key_file", "no PEM private key");
    // A server name that is no name.
    let env = [(var("SERVER_NAME"), Path::new("not a name!"))];
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    refused(&url, &env, "redis.tls.server_name", "not a valid DNS name");
}

/// `examples/tls-redis/run.sh`: certificates, a TLS-only Redis with client
/// certificates required, ratekeeper with the example's config, one check
/// answered by Redis.
#[test]
fn the_tls_example_runs() {
    let work = support::fresh_dir("tls-example");
    let port = support::free_port().to_string();
    let listen = format!("127.0.0.1:{}", support::free_port());
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("bash")
        .arg(format!("{root}/examples/tls-redis/run.sh"))
        .env("RATEKEEPER", env!("CARGO_BIN_EXE_ratekeeper"))
        .env("REDIS_TLS_PORT", &port)
        .env("LISTEN", &listen)
        .env("WORK", &work)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(work.join("ratekeeper.log")).unwrap_or_default();
    assert!(out.status.success(), "{stdout}\n{log}");
    assert!(stdout.contains(r#""status":"ready""#), "{stdout}\n{log}");
    assert!(stdout.contains(r#""allowed":true"#), "{stdout}\n{log}");
    assert!(stdout.contains(r#""degraded":false"#), "{stdout}\n{log}");
}

/// `[server.tls]` and `[grpc.tls]`: what cannot be served stops startup
/// (exit 64) naming the key, never a listener silently in plaintext; a key
/// file's bytes are never printed.
#[test]
fn listener_tls_that_cannot_be_served_is_refused_naming_the_key() {
    let certs = Certs::new("cfg-listener");
    let other = Certs::new("cfg-listener-other");
    let (crt, key, ca) = (certs.crt("server"), certs.key("server"), certs.crt("ca"));
    let missing = certs.dir.join("missing.pem");
    let other_key = other.key("server");
    for section in ["SERVER", "GRPC"] {
        let var = |k: &str| format!("RATEKEEPER_{section}__TLS__{k}");
        let name = |k: &str| format!("{}.tls.{k}", section.to_lowercase());
        let (cert_var, key_var, ca_var) =
            (var("CERT_FILE"), var("KEY_FILE"), var("CLIENT_CA_FILE"));
        let grpc: &[(&str, &Path)] = if section == "GRPC" {
            &[("RATEKEEPER_GRPC__LISTEN", Path::new("127.0.0.1:0"))]
        } else {
            &[]
        };
        fn joined<'a>(
            a: &[(&'a str, &'a Path)],
            b: &[(&'a str, &'a Path)],
        ) -> Vec<(&'a str, &'a Path)> {
            [a, b].concat()
        }
        let only_cert = joined(grpc, &[(&cert_var, &crt)]);
        refused(
            &[],
            &only_cert,
            &name("key_file"),
            "must be set with cert_file",
        );
        let only_key = joined(grpc, &[(&key_var, &key)]);
        refused(
            &[],
            &only_key,
            &name("cert_file"),
            "must be set with key_file",
        );
        let only_ca = joined(grpc, &[(&ca_var, &ca)]);
        refused(
            &[],
            &only_ca,
            &name("client_ca_file"),
            "needs cert_file and key_file",
        );
        let wrong_key = joined(grpc, &[(&cert_var, &crt), (&key_var, &other_key)]);
        let stderr = refused(&[], &wrong_key, &name("key_file"), "is not the key of");
        let secret = std::fs::read_to_string(other.key("server")).unwrap();
        let body = secret.lines().nth(1).unwrap();
        assert!(!stderr.contains(body), "a key's bytes were printed");
        let cert_as_key = joined(grpc, &[(&cert_var, &crt), (&key_var, &crt)]);
        refused(
            &[],
            &cert_as_key,
            &name("key_file"),
            "holds no PEM private key",
        );
        let gone = joined(grpc, &[(&cert_var, &missing), (&key_var, &key)]);
        refused(&[], &gone, &name("cert_file"), "cannot read");
        let bad_ca = joined(
            grpc,
            &[(&cert_var, &crt), (&key_var, &key), (&ca_var, &key)],
        );
        refused(&[], &bad_ca, &name("client_ca_file"), "no PEM CERTIFICATE");
    }
}
