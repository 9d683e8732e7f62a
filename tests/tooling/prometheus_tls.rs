//! Prometheus scraping `/metrics` over HTTPS with a client certificate:
//! the shipped `deploy/prometheus/scrape-tls.yml` run by a real Prometheus
//! (Debian's) against the real binary with `[server.tls]` and
//! `client_ca_file`, only the address, the files and the name changed.

use std::time::{Duration, Instant};

use crate::prometheus_support::Prometheus;
use crate::support;

use support::binary::serve_logged;
use support::path_str;
use support::tls::Certs;

const SCRAPE: &str = include_str!("../../deploy/prometheus/scrape-tls.yml");

/// `text` with each pair replaced; each must be there.
fn substitute(text: &str, pairs: &[(&str, String)]) -> String {
    pairs.iter().fold(text.to_string(), |out, (from, to)| {
        assert!(out.contains(from), "scrape-tls.yml no longer has `{from}`");
        out.replace(from, to)
    })
}

#[tokio::test]
async fn prometheus_scrapes_metrics_over_https_with_a_client_certificate() {
    let certs = Certs::new("prometheus-tls");
    let (cert, key, ca) = (certs.crt("server"), certs.key("server"), certs.crt("ca"));
    let served = serve_logged(&[
        ("RATEKEEPER_SERVER__TLS__CERT_FILE", path_str(&cert)),
        ("RATEKEEPER_SERVER__TLS__KEY_FILE", path_str(&key)),
        ("RATEKEEPER_SERVER__TLS__CLIENT_CA_FILE", path_str(&ca)),
    ]);
    let file = |path: std::path::PathBuf| path_str(&path).to_string();
    let config = substitute(
        SCRAPE,
        &[
            ("scrape_interval: 15s", "scrape_interval: 1s".into()),
            ("ratekeeper:8080", served.http.clone()),
            (
                "server_name: ratekeeper.internal",
                "server_name: localhost".into(),
            ),
            ("/etc/prometheus/ratekeeper/ca.crt", file(certs.crt("ca"))),
            (
                "/etc/prometheus/ratekeeper/client.crt",
                file(certs.crt("client")),
            ),
            (
                "/etc/prometheus/ratekeeper/client.key",
                file(certs.key("client")),
            ),
        ],
    );
    let prometheus = Prometheus::start(&config).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let up = prometheus.query(r#"up{job="ratekeeper"}"#).await.unwrap();
        let open = prometheus
            .query(r#"ratekeeper_connections{listener="http"}"#)
            .await
            .unwrap();
        if up.first().is_some_and(|s| s.value == 1.0) && !open.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape over HTTPS within 30 s: up = {up:?}\n{}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Every handshake succeeded: Prometheus presented its certificate.
    let refused = prometheus
        .query(r#"ratekeeper_tls_handshake_failures_total{reason="client_certificate"}"#)
        .await
        .unwrap();
    // (The series exists from startup, so an empty answer is a wrong query.)
    assert!(!refused.is_empty(), "no such series");
    assert!(refused.iter().all(|s| s.value == 0.0), "{refused:?}");
}
