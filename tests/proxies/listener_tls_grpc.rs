//! TLS on ratekeeper's gRPC listener (`[grpc.tls]`), with the real binary:
//! the handshake's bounds (its timeout, the connection cap) and a
//! certificate rotation. The HTTP listener's are in `listener_tls`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::listener_tls::{closed_unanswered, curl, mounted, renew};
use crate::support;

use support::binary::{Served, serve_logged};
use support::path_str;
use support::tls::{Certs, der_of, peer_of};

/// The service with `[grpc.tls]` from `cert` and `key`, and `more`; its
/// gRPC address.
fn serve_grpc_tls(cert: &Path, key: &Path, more: &[(&str, &str)]) -> (Served, String) {
    let grpc = format!("127.0.0.1:{}", support::free_port());
    let mut env = vec![
        ("RATEKEEPER_GRPC__LISTEN", grpc.as_str()),
        ("RATEKEEPER_GRPC__TLS__CERT_FILE", path_str(cert)),
        ("RATEKEEPER_GRPC__TLS__KEY_FILE", path_str(key)),
    ];
    env.extend_from_slice(more);
    (serve_logged(&env), grpc)
}

/// One sample of the plaintext HTTP listener's `/metrics`; every series
/// asked for exists from startup, so a missing one is a wrong name.
fn metric(served: &Served, series: &str) -> f64 {
    let (code, body, err) = curl(&[&format!("http://{}/metrics", served.http)]);
    assert_eq!(code, 0, "{err}");
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no series {series}"))
}

const OPEN: &str = r#"ratekeeper_connections{listener="grpc"}"#;

/// A client that never starts its handshake is closed at
/// `grpc.handshake_timeout` and counted as a timeout (tonic drops the
/// handshake rather than failing it).
#[tokio::test]
async fn on_grpc_a_silent_handshake_is_closed_at_the_handshake_timeout_and_counted() {
    let certs = Certs::new("grpc-slow");
    let (cert, key) = (certs.crt("server"), certs.key("server"));
    let timeout = [("RATEKEEPER_GRPC__HANDSHAKE_TIMEOUT", "1s")];
    let (served, grpc) = serve_grpc_tls(&cert, &key, &timeout);
    let mut silent = tokio::net::TcpStream::connect(&grpc).await.unwrap();
    let started = Instant::now();
    closed_unanswered(&mut silent, Duration::from_secs(10)).await;
    assert!(started.elapsed() >= Duration::from_millis(900));
    let series = r#"ratekeeper_tls_handshake_failures_total{listener="grpc",reason="timeout"}"#;
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&served, series) < 1.0 || metric(&served, OPEN) > 0.0 {
        assert!(Instant::now() < deadline, "never counted, or still open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metric(&served, series), 1.0);
}

/// A connection over `grpc.max_connections` is closed without the
/// plaintext GOAWAY a TLS client could not read.
#[tokio::test]
async fn on_grpc_with_tls_a_connection_over_the_cap_is_closed_unanswered() {
    let certs = Certs::new("grpc-cap");
    let (served, grpc) = serve_grpc_tls(
        &certs.crt("server"),
        &certs.key("server"),
        &[
            ("RATEKEEPER_GRPC__HANDSHAKE_TIMEOUT", "30s"),
            ("RATEKEEPER_GRPC__MAX_CONNECTIONS", "1"),
        ],
    );
    // Holds the one place while it lasts (30 s: longer than the test).
    let _silent = tokio::net::TcpStream::connect(&grpc).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&served, OPEN) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the held connection is never counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut over = tokio::net::TcpStream::connect(&grpc).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut over, b"\x16\x03\x01")
        .await
        .unwrap();
    closed_unanswered(&mut over, Duration::from_secs(10)).await;
    let refused = r#"ratekeeper_connections_refused_total{listener="grpc"}"#;
    assert_eq!(metric(&served, refused), 1.0);
}

/// `[grpc.tls]` follows its files as `[server.tls]` does: a renewed
/// certificate reaches the gRPC listener's next handshakes, counted as a
/// reload of `grpc_tls`.
#[tokio::test]
async fn a_rotated_grpc_certificate_reaches_new_handshakes() {
    let certs = Certs::new("grpc-rotate");
    let (cert, key) = mounted(&certs);
    let (served, grpc) = serve_grpc_tls(&cert, &key, &[]);
    let ca = certs.crt("ca");
    let first = peer_of(&grpc, &ca).await.unwrap();
    assert_eq!(first, der_of(&certs.crt("server")));
    let renewed = renew(&certs, &cert, &key);
    let deadline = Instant::now() + Duration::from_secs(10);
    while peer_of(&grpc, &ca).await.unwrap() != renewed {
        let late = "no new handshake got the new certificate";
        assert!(Instant::now() < deadline, "{late}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One at startup, one or more for the rotation.
    let ok = r#"ratekeeper_reloads_total{file="grpc_tls",result="ok"}"#;
    assert!(metric(&served, ok) >= 2.0);
}
