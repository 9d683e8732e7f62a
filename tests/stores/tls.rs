//! `rediss://` against real redis-servers with TLS ports, certificates
//! made by openssl: checks over TLS, client certificates, each TLS failure
//! named (metric kind and /readyz reason), and never a password in clear.

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::tls::{Certs, TlsRedis, settings_for, tls_settings};
use crate::support::{RedisServer, TestApp, unique_key};

async fn check_once(app: &TestApp) -> (Value, Duration) {
    let key = unique_key("tls");
    let started = Instant::now();
    let (status, body) = app
        .check(json!({"key": key, "limit": 10, "window": "1m"}))
        .await;
    assert_eq!(status, 200, "{body}");
    (body, started.elapsed())
}

/// A check answered by Redis (not by the failure policy).
async fn assert_answered(app: &TestApp) {
    let (body, _) = check_once(app).await;
    assert_eq!(body["degraded"], false, "{body}");
    assert_eq!(body["allowed"], true, "{body}");
}

/// Checks are answered by the failure policy within `timeout` and a
/// margin, and the failure is named `tls` in the metric and in /readyz,
/// with a message that says what to fix (`hint`). Returns the slowest
/// check's time.
async fn assert_named_tls_failure(app: &TestApp, hint: &str) -> Duration {
    let mut slowest = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (body, took) = check_once(app).await;
        assert_eq!(body["degraded"], true, "{body}");
        slowest = slowest.max(took);
        let readyz = app.get("/readyz").await;
        let status = readyz.status();
        let readyz: Value = readyz.json().await.unwrap();
        let errors = app
            .metric(r#"ratekeeper_store_errors_total{kind="tls"}"#)
            .await;
        if status == 503 && readyz["reason"]["kind"] == "tls" && errors > 0.0 {
            let message = readyz["reason"]["message"].as_str().unwrap();
            assert!(message.contains(hint), "{hint}: {readyz}");
            // redis.timeout is 100ms; the rest is a busy 2-core machine.
            assert!(slowest < Duration::from_millis(500), "{slowest:?}");
            return slowest;
        }
        assert!(
            Instant::now() < deadline,
            "no tls failure named: {readyz}, errors {errors}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn checks_go_over_tls_to_a_single_server() {
    let certs = Certs::new("single");
    let redis = TlsRedis::start(&certs, "server", false);
    let app = TestApp::spawn(settings_for(&redis.url(), &certs, false)).await;
    assert_answered(&app).await;
    assert_eq!(app.get("/readyz").await.status(), 200);
    let connected = redis.server.cli(&["info", "clients"]);
    assert!(connected.contains("connected_clients:"), "{connected}");
}

#[tokio::test]
async fn mtls_takes_the_right_client_certificate_and_is_refused_without_one() {
    let certs = Certs::new("mtls");
    let redis = TlsRedis::start(&certs, "server", true);
    let with = TestApp::spawn(settings_for(&redis.url(), &certs, true)).await;
    assert_answered(&with).await;
    let without = TestApp::spawn(settings_for(&redis.url(), &certs, false)).await;
    let slowest = assert_named_tls_failure(&without, "redis.tls.cert_file").await;
    eprintln!("MEASURED no client certificate: slowest degraded check {slowest:?}");
}

#[tokio::test]
async fn a_server_signed_by_another_ca_is_named() {
    let ours = Certs::new("ours");
    let theirs = Certs::new("theirs");
    let redis = TlsRedis::start(&theirs, "server", false);
    let app = TestApp::spawn(settings_for(&redis.url(), &ours, false)).await;
    let slowest = assert_named_tls_failure(&app, "redis.tls.ca_file").await;
    eprintln!("MEASURED wrong CA: slowest degraded check {slowest:?}");
}

#[tokio::test]
async fn an_expired_server_certificate_is_named() {
    let certs = Certs::new("expired");
    certs.sign("old", -1);
    let redis = TlsRedis::start(&certs, "old", false);
    let app = TestApp::spawn(settings_for(&redis.url(), &certs, false)).await;
    let slowest = assert_named_tls_failure(&app, "expired").await;
    eprintln!("MEASURED expired certificate: slowest degraded check {slowest:?}");
}

#[tokio::test]
async fn rediss_to_a_plaintext_port_is_named() {
    let certs = Certs::new("plain");
    let redis = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let app = TestApp::spawn(settings_for(&url, &certs, false)).await;
    let slowest = assert_named_tls_failure(&app, "plaintext").await;
    eprintln!("MEASURED plaintext port: slowest degraded check {slowest:?}");
}

/// The defect this fixes: a `rediss://` URL connected in plaintext and
/// sent `AUTH user <password>` in clear. A listener that records every
/// byte must see a TLS handshake and never the password.
#[tokio::test]
async fn a_fake_server_never_receives_the_password_in_clear() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let record = record.clone();
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = stream.read(&mut buf) {
                    record.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    let certs = Certs::new("fake");
    let password = "hunter2-never-in-clear";
    let url = format!("rediss://alice:{password}@127.0.0.1:{port}");
    let app = TestApp::spawn(settings_for(&url, &certs, false)).await;
    for _ in 0..3 {
        let (body, _) = check_once(&app).await;
        assert_eq!(body["degraded"], true, "{body}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "the client connected");
    // A TLS record of type handshake (22), version 3.x: a ClientHello.
    assert_eq!(
        &seen[..2],
        &[0x16, 0x03],
        "{:?}",
        &seen[..16.min(seen.len())]
    );
    let text = String::from_utf8_lossy(&seen);
    assert!(!text.contains(password), "password sent in clear");
    assert!(!text.contains("AUTH") && !text.contains("alice"), "{text}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains(password));
    let readyz = app.get("/readyz").await.text().await.unwrap();
    assert!(!readyz.contains(password), "{readyz}");
}

/// An ACL user over TLS: the user in the URL, the password from
/// `redis.password_file`.
#[tokio::test]
async fn an_acl_user_works_over_tls() {
    let certs = Certs::new("acl");
    let redis = TlsRedis::start(&certs, "server", false);
    let reply = redis.server.cli(&[
        "acl",
        "setuser",
        "alice",
        "on",
        ">s3cret/pw",
        "~*",
        "&*",
        "+@all",
    ]);
    assert_eq!(reply, "OK");
    let password = certs.dir.join("password");
    std::fs::write(&password, "s3cret/pw\n").unwrap();
    let url = format!("rediss://alice@127.0.0.1:{}", redis.tls_port);
    let ca = certs.crt("ca");
    let vars = [("TLS__CA_FILE", ca.as_path()), ("PASSWORD_FILE", &password)];
    let settings = tls_settings(&url, &vars).unwrap();
    let app = TestApp::spawn(settings).await;
    assert_answered(&app).await;
    let who = redis.server.cli(&["client", "list"]);
    assert!(who.contains("user=alice"), "{who}");
}
