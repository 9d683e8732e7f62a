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

/// Copies `certs`' CA and client certificate into `live` the way a
/// Secret update lands: each file written aside, then renamed over.
fn install(certs: &Certs, live: &std::path::Path) {
    for (from, to) in [
        (certs.crt("ca"), "ca.crt"),
        (certs.crt("client"), "client.crt"),
        (certs.key("client"), "client.key"),
    ] {
        let aside = live.join(format!(".{to}.new"));
        std::fs::copy(from, &aside).unwrap();
        std::fs::rename(&aside, live.join(to)).unwrap();
    }
}

async fn wait_for_metric(app: &TestApp, series: &str, at_least: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.metric(series).await < at_least {
        assert!(
            Instant::now() < deadline,
            "{series} never reached {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks flow while the CA and the client certificate are replaced: a
/// bad file is refused and the last good one kept (a reconnection still
/// succeeds), then a server restarted with a new CA is reached with the
/// new files, without restarting the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_and_client_certificate_rotate_while_checks_flow() {
    let (old, new) = (Certs::new("rotate-old"), Certs::new("rotate-new"));
    let live = crate::support::fresh_dir("tls-live");
    install(&old, &live);
    let mut redis = TlsRedis::start(&old, "server", true);
    let port = redis.tls_port;
    let vars = [
        ("TLS__CA_FILE", live.join("ca.crt")),
        ("TLS__CERT_FILE", live.join("client.crt")),
        ("TLS__KEY_FILE", live.join("client.key")),
    ];
    let vars: Vec<(&str, &std::path::Path)> = vars.iter().map(|(k, p)| (*k, p.as_path())).collect();
    let app = Arc::new(TestApp::spawn(tls_settings(&redis.url(), &vars).unwrap()).await);
    let ok = r#"ratekeeper_reloads_total{file="tls",result="ok"}"#;
    let error = r#"ratekeeper_reloads_total{file="tls",result="error"}"#;
    assert_eq!(app.metric(ok).await, 1.0, "the startup load");
    assert_eq!(app.metric(error).await, 0.0);
    // Checks flow throughout, counted as answered or degraded.
    let counts = Arc::new([
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    ]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flow = {
        let (app, counts, stop) = (app.clone(), counts.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (body, _) = check_once(&app).await;
                let degraded = body["degraded"] == true;
                counts[degraded as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    assert_answered(&app).await;

    // A broken CA file: refused, counted; the last good CA stays, and a
    // reconnection (Redis restarted) still succeeds with it.
    std::fs::write(live.join("ca.crt"), "-----BEGIN CERTIFICATE-----\n%%\n").unwrap();
    wait_for_metric(&app, error, 1.0).await;
    redis.server.restart();
    wait_answered(&app).await;

    // The new CA and client certificate, then the server moves to them.
    install(&new, &live);
    wait_for_metric(&app, ok, 2.0).await;
    drop(redis);
    let _redis = TlsRedis::start_on(&new, "server", true, port);
    let rotated = Instant::now();
    wait_answered(&app).await;
    eprintln!(
        "MEASURED rotation: answered again {:?} after the server's restart",
        rotated.elapsed()
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flow.await.unwrap();
    let [answered, degraded] = [0, 1].map(|i| counts[i].load(std::sync::atomic::Ordering::Relaxed));
    eprintln!(
        "MEASURED rotation: {answered} checks answered by Redis, {degraded} degraded (the restarts)"
    );
    assert!(answered > 0);
}

/// Waits up to 10 s for a check answered by Redis.
async fn wait_answered(app: &TestApp) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (body, _) = check_once(app).await;
        if body["degraded"] == false {
            return;
        }
        assert!(Instant::now() < deadline, "not answered again: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A 3-primary cluster with `tls-cluster yes`, reached by
/// `rediss-cluster://` naming one node: the other nodes, discovered, are
/// reached over TLS too, and keys on every primary are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_go_over_tls_to_every_primary_of_a_cluster() {
    let certs = Certs::new("cluster");
    let cluster = crate::support::RedisCluster::start_tls(3, &certs);
    let app = TestApp::spawn(settings_for(&cluster.tls_url(), &certs, false)).await;
    let mut answered_by = std::collections::BTreeSet::new();
    for i in 0..30 {
        let key = format!("{}-{i}", unique_key("tls-cluster"));
        let (status, body) = app
            .check(json!({"key": key, "limit": 10, "window": "1m"}))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["degraded"], false, "{body}");
        let slot = fred::util::redis_keyslot(key.as_bytes());
        answered_by.extend(cluster.owner_of(slot));
    }
    assert_eq!(
        answered_by.len(),
        3,
        "keys on every primary: {answered_by:?}"
    );
}

/// The 400-caller exactness test over TLS: two instances on one TLS
/// Redis, 400 concurrent checks of limit 100 on one key, each algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_over_tls_allow_exactly_the_limit() {
    let certs = Certs::new("exact");
    let redis = TlsRedis::start(&certs, "server", true);
    let mut config = settings_for(&redis.url(), &certs, true);
    let r = config.redis.as_mut().unwrap();
    r.timeout = Duration::from_secs(5);
    config.deny_cache.capacity = 0;
    let apps = [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ];
    crate::concurrency::every_algorithm_allows_exactly_the_limit(&apps).await;
}

/// Sentinel over TLS: `rediss-sentinel://` reaches the sentinels over TLS
/// and the primary they name over TLS too (one setting covers both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_go_over_tls_through_sentinel() {
    let certs = Certs::new("sentinel");
    let group = crate::support::SentinelGroup::start_tls(3, &certs);
    let app = TestApp::spawn(settings_for(&group.tls_url(), &certs, false)).await;
    assert_answered(&app).await;
    // The check reached the primary over its TLS port.
    let clients = group.primary.cli(&["client", "list"]);
    let (primary_tls, _) = group.tls_nodes.unwrap();
    assert!(
        clients.contains(&format!("laddr=127.0.0.1:{primary_tls}")),
        "{clients}"
    );
}

/// Hostname verification is on: a `server_name` the certificate does not
/// hold is named; one it holds (`localhost`, the URL naming an IP) works.
#[tokio::test]
async fn the_server_name_is_verified() {
    let certs = Certs::new("names");
    let redis = TlsRedis::start(&certs, "server", false);
    let ca = certs.crt("ca");
    for (name, works) in [("localhost", true), ("other.example", false)] {
        let vars = [
            ("TLS__CA_FILE", ca.as_path()),
            ("TLS__SERVER_NAME", std::path::Path::new(name)),
        ];
        let app = TestApp::spawn(tls_settings(&redis.url(), &vars).unwrap()).await;
        if works {
            assert_answered(&app).await;
        } else {
            assert_named_tls_failure(&app, "redis.tls.server_name").await;
        }
    }
}
