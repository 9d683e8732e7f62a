//! The readers of the watched config files, through the real binary: a
//! FIFO as `rls.config` stops startup (exit 64) instead of hanging it, and
//! a FIFO dropped into the `rls.config` directory is refused at each
//! re-read, never waited on: SIGHUP, later edits and SIGTERM all still
//! work. (The shared reader's own cases, the policies and tokens files
//! included, are unit tests in `src/watch/read.rs` and beside each reader.)

use crate::support;

use std::time::{Duration, Instant};

use support::binary::{ratekeeper, serve};
use support::{Signal, fresh_dir, path_str, send_signal};

const DOMAIN: &str = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n";

fn mkfifo(path: &std::path::Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
}

#[test]
fn a_fifo_as_rls_config_stops_startup_with_64() {
    let dir = fresh_dir("readers-startup-fifo");
    let fifo = dir.join("rls.yaml");
    mkfifo(&fifo);
    // It used to bind HTTP and then wait for a writer forever.
    let (status, _, err) = support::binary::run(
        ratekeeper()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0")
            .env("RATEKEEPER_RLS__CONFIG", path_str(&fifo)),
    );
    assert_eq!(status, 64, "{err}");
    assert!(
        err.contains("rls.yaml: is a FIFO; it must be a regular file"),
        "{err}"
    );
}

/// The value of the metric line `series` (0 when absent).
async fn metric(addr: &str, series: &str) -> f64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Polls until `series` reaches `want`; fails after 3 s.
async fn wait_for(addr: &str, series: &str, want: f64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while metric(addr, series).await < want {
        assert!(
            Instant::now() < deadline,
            "{what}: {series} never reached {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_fifo_in_the_rls_directory_is_refused_and_reloads_go_on() {
    const ERRORS: &str = "ratekeeper_reloads_total{file=\"rls\",result=\"error\"}";
    const DOMAINS: &str = "ratekeeper_rls_domains_loaded";
    let dir = fresh_dir("readers-rls-dir-fifo");
    std::fs::write(dir.join("edge.yaml"), DOMAIN).unwrap();
    let (mut child, addr) = serve(&[
        ("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0"),
        ("RATEKEEPER_RLS__CONFIG", path_str(&dir)),
        ("RATEKEEPER_POLICIES__POLL_INTERVAL", "100ms"),
    ]);
    assert_eq!(metric(&addr, DOMAINS).await, 1.0);

    // The FIFO's version is refused (counted once), not waited on.
    mkfifo(&dir.join("evil.yaml"));
    wait_for(&addr, ERRORS, 1.0, "the FIFO").await;
    assert_eq!(
        metric(&addr, DOMAINS).await,
        1.0,
        "the config in force stays"
    );
    // SIGHUP re-judges it: refused again, and counted.
    assert!(send_signal(child.0.id(), Signal::SIGHUP));
    wait_for(&addr, ERRORS, 2.0, "SIGHUP").await;

    // Once it is gone, an edit made meanwhile applies.
    let api = DOMAIN.replace("domain: edge", "domain: api");
    std::fs::write(dir.join("api.yaml"), api).unwrap();
    std::fs::remove_file(dir.join("evil.yaml")).unwrap();
    wait_for(&addr, DOMAINS, 2.0, "the edit after the FIFO").await;

    // And SIGTERM ends it promptly (a reload blocked on the FIFO used to
    // keep the runtime from shutting down).
    assert!(send_signal(child.0.id(), Signal::SIGTERM));
    let deadline = Instant::now() + Duration::from_secs(5);
    while child.0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "SIGTERM did not end it within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
