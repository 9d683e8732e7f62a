//! TLS and mTLS on ratekeeper's own HTTP listener (`[server.tls]`), with
//! the real binary and real clients: curl, and a rustls client that holds
//! one connection across a certificate rotation. Handshake failures are
//! counted by why (`ratekeeper_tls_handshake_failures_total`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support;

use support::binary::{Served, ratekeeper, serve_logged};
use support::path_str;
use support::tls::{Certs, TlsConnection, der_of};

/// curl with `args`: (exit code, stdout, stderr).
pub(crate) fn curl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5"])
        .args(args)
        .output()
        .expect("curl runs (apt-get install -y curl)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The service with `[server.tls]` set to `cert`/`key` (and `client_ca`).
fn serve_tls(cert: &Path, key: &Path, client_ca: Option<&Path>, more: &[(&str, &str)]) -> Served {
    let mut env = vec![
        ("RATEKEEPER_SERVER__TLS__CERT_FILE", path_str(cert)),
        ("RATEKEEPER_SERVER__TLS__KEY_FILE", path_str(key)),
    ];
    if let Some(ca) = client_ca {
        env.push(("RATEKEEPER_SERVER__TLS__CLIENT_CA_FILE", path_str(ca)));
    }
    env.extend_from_slice(more);
    serve_logged(&env)
}

/// The server's certificate and key copied to a directory of their own,
/// as a mounted Secret's (`tls.crt`, `tls.key`), with a renewed pair signed
/// beside them for [`renew`].
pub(crate) fn mounted(certs: &Certs) -> (PathBuf, PathBuf) {
    certs.sign("renewed", 30);
    let dir = certs.dir.join("mounted");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(certs.crt("server"), &cert).unwrap();
    std::fs::copy(certs.key("server"), &key).unwrap();
    (cert, key)
}

/// Replaces the [`mounted`] pair with the renewed one as a Secret's files
/// change, each by a rename (the key first); the renewed certificate, DER.
pub(crate) fn renew(certs: &Certs, cert: &Path, key: &Path) -> Vec<u8> {
    let staged = cert.with_file_name("staged");
    for (from, to) in [(certs.key("renewed"), key), (certs.crt("renewed"), cert)] {
        std::fs::copy(from, &staged).unwrap();
        std::fs::rename(&staged, to).unwrap();
    }
    der_of(&certs.crt("renewed"))
}

/// Reads `stream` until it is closed, within `limit`: nothing may come
/// first (a TLS listener writes nothing before the client's hello, and
/// nothing in the clear to one it refuses).
pub(crate) async fn closed_unanswered(stream: &mut tokio::net::TcpStream, limit: Duration) {
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(limit, tokio::io::AsyncReadExt::read(stream, &mut buf))
        .await
        .unwrap_or_else(|_| panic!("not closed within {limit:?}"));
    assert!(matches!(read, Ok(0) | Err(_)), "answered: {read:?}");
}

/// The port of `host:port`.
fn port(addr: &str) -> &str {
    addr.rsplit(':').next().unwrap()
}

/// One sample of `/metrics` over HTTPS (with `client` for mTLS).
fn sample(served: &Served, ca: &Certs, client: bool, series: &str) -> f64 {
    let url = format!("https://localhost:{}/metrics", port(&served.http));
    let (cert, key) = (ca.crt("client"), ca.key("client"));
    let mut args = vec![
        "--cacert".to_string(),
        path_str(&ca.crt("ca")).to_string(),
        url,
    ];
    if client {
        args.extend([
            "--cert".into(),
            path_str(&cert).into(),
            "--key".into(),
            path_str(&key).into(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, body, err) = curl(&args);
    assert_eq!(code, 0, "{err}");
    // Every series asked for exists from startup: a missing one is a
    // wrong name, never a zero.
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{body}"))
}

const CHECK: &str = r#"{"key":"tls-k","limit":1,"window":"1h"}"#;

#[test]
fn curl_checks_over_https_and_plaintext_to_the_tls_port_is_refused_and_counted() {
    let certs = Certs::new("https");
    let served = serve_tls(&certs.crt("server"), &certs.key("server"), None, &[]);
    let line = served.log().join("\n");
    assert!(line.contains(r#""tls":"tls""#), "{line}");
    let url = format!("https://localhost:{}/v1/check", port(&served.http));
    let ca_file = certs.crt("ca");
    let ca = path_str(&ca_file);
    let post = [
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        CHECK,
    ];
    let with = |extra: &[&str]| {
        let mut args = vec!["--cacert", ca, url.as_str()];
        args.extend_from_slice(extra);
        curl(&args)
    };
    let (code, body, err) = with(&post);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["allowed"], true, "{body}");
    let (_, body, _) = with(&post);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["allowed"], false, "the same counter: {body}");

    // A client that does not trust the CA refuses us; plaintext to the TLS
    // port gets no HTTP answer.
    let (code, _, _) = curl(&[url.as_str()]);
    assert_ne!(code, 0, "curl trusted a certificate it has no CA for");
    let plain = format!("http://127.0.0.1:{}/healthz", port(&served.http));
    let (code, body, _) = curl(&[plain.as_str()]);
    assert!(
        code != 0 && !body.contains("ok"),
        "plaintext answered: {body}"
    );
    let protocol = r#"ratekeeper_tls_handshake_failures_total{listener="http",reason="protocol"}"#;
    assert!(sample(&served, &certs, false, protocol) >= 2.0);
}

#[tokio::test]
async fn mtls_refuses_a_client_without_a_certificate_or_with_another_cas() {
    let certs = Certs::new("mtls");
    let other = Certs::in_dir(certs.dir.clone(), "other");
    let served = serve_tls(
        &certs.crt("server"),
        &certs.key("server"),
        Some(&certs.crt("ca")),
        &[],
    );
    assert!(served.log().join("\n").contains(r#""tls":"mtls""#));
    let addr = format!("127.0.0.1:{}", port(&served.http));
    let ca = certs.crt("ca");
    let none = TlsConnection::open(&addr, &ca, None).await;
    assert!(none.is_err(), "no client certificate was let in");
    let (cert, key) = (other.crt("client"), other.key("client"));
    let foreign = TlsConnection::open(&addr, &ca, Some((&cert, &key))).await;
    assert!(
        foreign.is_err(),
        "another CA's client certificate was let in"
    );
    let (cert, key) = (certs.crt("client"), certs.key("client"));
    let mut ours = TlsConnection::open(&addr, &ca, Some((&cert, &key)))
        .await
        .unwrap();
    assert_eq!(ours.get("/healthz").await.unwrap().0, 200);
    // curl too, with and without its certificate.
    let url = format!("https://localhost:{}/healthz", port(&served.http));
    let (code, _, _) = curl(&["--cacert", path_str(&ca), &url]);
    assert_ne!(code, 0, "curl without a certificate was let in");
    let series =
        r#"ratekeeper_tls_handshake_failures_total{listener="http",reason="client_certificate"}"#;
    assert!(sample(&served, &certs, true, series) >= 3.0);
}

#[tokio::test]
async fn a_rotated_certificate_reaches_new_handshakes_and_drops_no_open_connection() {
    let certs = Certs::new("rotate");
    let (cert, key) = mounted(&certs);
    let served = serve_tls(&cert, &key, None, &[]);
    let addr = format!("127.0.0.1:{}", port(&served.http));
    let ca = certs.crt("ca");
    let mut held = TlsConnection::open(&addr, &ca, None).await.unwrap();
    assert_eq!(held.peer, der_of(&certs.crt("server")));

    let renewed = renew(&certs, &cert, &key);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fresh = TlsConnection::open(&addr, &ca, None).await.unwrap();
        if fresh.peer == renewed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no new handshake got the new certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The connection opened before still works, on its old certificate.
    let (status, body) = held.get("/healthz").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let ok = r#"ratekeeper_reloads_total{file="server_tls",result="ok"}"#;
    assert!(sample(&served, &certs, false, ok) >= 2.0);
}

#[tokio::test]
async fn a_silent_handshake_is_closed_at_the_head_timeout_and_counted() {
    let certs = Certs::new("slow");
    let served = serve_tls(
        &certs.crt("server"),
        &certs.key("server"),
        None,
        &[("RATEKEEPER_SERVER__HEADER_READ_TIMEOUT", "500ms")],
    );
    let addr = format!("127.0.0.1:{}", port(&served.http));
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    closed_unanswered(&mut silent, Duration::from_secs(5)).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    let series = r#"ratekeeper_tls_handshake_failures_total{listener="http",reason="timeout"}"#;
    assert_eq!(sample(&served, &certs, false, series), 1.0);
}

/// The container's probe (`ratekeeper healthcheck`) follows `[server.tls]`
/// from the same configuration: over TLS to a TLS listener, answered 200.
/// With mTLS it has no client certificate, so it checks that the listener
/// accepts a connection (seen there as a handshake `closed`), and fails
/// once nothing listens.
#[test]
fn the_healthcheck_probes_a_tls_listener_over_tls() {
    let certs = Certs::new("probe");
    let (cert, key, ca) = (certs.crt("server"), certs.key("server"), certs.crt("ca"));
    let probe = |port: &str, mtls: bool| {
        let mut command = ratekeeper();
        command
            .arg("healthcheck")
            .env("RATEKEEPER_SERVER__LISTEN", format!("0.0.0.0:{port}"))
            .env("RATEKEEPER_SERVER__TLS__CERT_FILE", &cert)
            .env("RATEKEEPER_SERVER__TLS__KEY_FILE", &key);
        if mtls {
            command.env("RATEKEEPER_SERVER__TLS__CLIENT_CA_FILE", &ca);
        }
        command.output().unwrap()
    };
    let served = serve_tls(&cert, &key, None, &[]);
    let out = probe(port(&served.http), false);
    assert!(out.status.success(), "{out:?}");
    // The handshake, not a plaintext request, reached it: nothing refused.
    let series = r#"ratekeeper_tls_handshake_failures_total{listener="http",reason="protocol"}"#;
    assert_eq!(sample(&served, &certs, false, series), 0.0);

    let mtls = serve_tls(&cert, &key, Some(&ca), &[]);
    let mtls_port = port(&mtls.http).to_string();
    let out = probe(&mtls_port, true);
    assert!(out.status.success(), "{out:?}");
    let closed = r#"ratekeeper_tls_handshake_failures_total{listener="http",reason="closed"}"#;
    let deadline = Instant::now() + Duration::from_secs(5);
    while sample(&mtls, &certs, true, closed) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the probe's connection was never seen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(mtls);
    let out = probe(&mtls_port, true);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// The operator commands speak `https://` with `--ca-file`, and present
/// `--cert-file`/`--key-file` to a listener with mTLS; without the CA they
/// stop at once saying what is missing (exit 64).
#[test]
fn the_cli_checks_over_https_and_mtls() {
    let certs = Certs::new("cli");
    let (cert, key, ca) = (certs.crt("server"), certs.key("server"), certs.crt("ca"));
    let served = serve_tls(&cert, &key, Some(&ca), &[]);
    let url = format!("https://localhost:{}", port(&served.http));
    let check = |extra: &[&str]| {
        let out = ratekeeper()
            .args(["check", "--url", &url, "--key", "cli-k", "--limit", "5"])
            .args(["--window", "1h", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        )
    };
    let (client_cert, client_key) = (certs.crt("client"), certs.key("client"));
    let ca_arg = ["--ca-file", path_str(&ca)];
    let pair = [
        "--cert-file",
        path_str(&client_cert),
        "--key-file",
        path_str(&client_key),
    ];
    let (code, out, err) = check(&[&ca_arg[..], &pair[..]].concat());
    assert_eq!(code, Some(0), "{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["remaining"], 4, "{out}");
    // Without its certificate the listener refuses it: unreachable (69).
    let (code, _, err) = check(&ca_arg);
    assert_eq!(code, Some(69), "{err}");
    // Without the CA, nothing is sent.
    let (code, _, err) = check(&pair);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("--ca-file"), "{err}");
    // TLS material with a plaintext URL: refused, so no token goes out in
    // the clear by a slip of the scheme.
    let out = ratekeeper()
        .args([
            "check",
            "--url",
            &format!("http://{}", served.http),
            "--key",
            "k",
        ])
        .args(["--limit", "5", "--window", "1h", "--ca-file", path_str(&ca)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("use https://"), "{err}");
    // A CA that did not sign the listener's certificate: refused by us.
    let other = Certs::new("cli-other");
    let (code, _, err) =
        check(&[&["--ca-file", path_str(&other.crt("ca"))][..], &pair[..]].concat());
    assert_eq!(code, Some(69), "{err}");
    let ok =
        r#"ratekeeper_tls_handshake_failures_total{listener="http",reason="client_certificate"}"#;
    assert!(sample(&served, &certs, true, ok) >= 1.0);
}
