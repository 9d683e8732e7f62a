//! Waiters and probes under `server.max_connections`, against the real
//! server on port 0: waiting checks (each holding its connection) can take
//! at most half of the connections, so plain checks and the probes still
//! get through with the waiters at their cap; and with every connection
//! taken, a small reserve still answers `/healthz`, `/readyz` and
//! `/metrics`, and only those.

use crate::support;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::TestApp;

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

const PLAIN: &str = r#"{"key":"plain","limit":1000,"window":"1m"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_at_their_cap_leave_connections_for_probes_and_plain_checks() {
    let mut settings = support::settings(None);
    settings.server.max_connections = 40;
    // limits.max_waiters as shipped: at most half of the connections.
    let app = TestApp::spawn(settings).await;
    // Forty keys, each spent for the next 8 s, and one check waiting on
    // each: as many waiters as there are connections. A sliding log's 8 s
    // run from the spend; a window's end is epoch-aligned and could come
    // at any moment, freeing waiters before they were counted.
    let spend = |i: usize| {
        serde_json::json!({"key": format!("w{i}"), "limit": 1, "window": "8s",
                           "algorithm": "sliding_log"})
    };
    for i in 0..40 {
        let (status, body) = app.check(spend(i)).await;
        assert_eq!(status, 200, "{body}");
    }
    // One connection per request, closed after its answer.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let waiters: Vec<_> = (0..40)
        .map(|i| {
            let mut body = spend(i);
            body["wait_ms"] = 9_000.into();
            let request = client.post(app.url("/v1/check")).json(&body).send();
            tokio::spawn(request)
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(5);
    let metrics = loop {
        let text = support::raw_http(&app.base[7..], "GET", "/metrics", "").map(|(_, t)| t);
        let waiting = text.as_deref().map(|t| metric(t, "ratekeeper_waiters"));
        if waiting.is_ok_and(|w| w >= 20.0) {
            break text.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "no 20 waiters seen: {:?}",
            text.map(|t| t
                .lines()
                .filter(|l| l.contains("wait"))
                .collect::<Vec<_>>()
                .join("\n"))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(metric(&metrics, "ratekeeper_waiters"), 20.0);

    let healthz = support::raw_http(&app.base[7..], "GET", "/healthz", "");
    assert!(matches!(healthz, Ok((200, _))), "{healthz:?}");
    let plain = support::raw_http(&app.base[7..], "POST", "/v1/check", PLAIN);
    assert!(matches!(plain, Ok((200, _))), "{plain:?}");

    // The other twenty were answered at once, as if wait_ms were 0 (or,
    // the few that came while the connections were briefly all taken,
    // refused with the canned 503).
    let text = support::raw_http(&app.base[7..], "GET", "/metrics", "")
        .unwrap()
        .1;
    let at_once = metric(&text, "ratekeeper_wait_rejected_total");
    let refused = metric(
        &text,
        "ratekeeper_connections_refused_total{listener=\"http\"}",
    );
    assert_eq!(at_once + refused, 20.0, "{at_once} + {refused}");
    assert!(at_once >= 10.0, "{at_once}");
    for waiter in waiters {
        drop(waiter);
    }
}

/// `n` connections that send nothing, held by the caller.
fn hold(app: &TestApp, n: usize) -> Vec<TcpStream> {
    let addr: SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

/// Waits until the server counts at least `open` connections (the one
/// asking included), so the held ones were accepted before anyone else
/// connects; polled rather than slept, as a loaded machine may take long.
fn wait_open(app: &TestApp, open: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok((200, text)) = support::raw_http(&app.base[7..], "GET", "/metrics", "")
            && metric(&text, "ratekeeper_connections{listener=\"http\"}") >= open
        {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "not {open} open");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_connection_taken_the_probes_still_answer() {
    let mut settings = support::settings(None);
    settings.server.max_connections = 8;
    let app = TestApp::spawn(settings).await;
    let _full = hold(&app, 8);
    wait_open(&app, 9.0);

    for path in ["/healthz", "/readyz"] {
        let answer = support::raw_http(&app.base[7..], "GET", path, "");
        assert!(matches!(answer, Ok((200, _))), "{path}: {answer:?}");
    }
    // The held 8 and the one asking: once the probes' own connections,
    // closed as they were answered, are no longer counted (on a loaded
    // machine the server may see their close a moment after the client).
    let mut open = Vec::new();
    for _ in 0..20 {
        let (status, metrics) = support::raw_http(&app.base[7..], "GET", "/metrics", "").unwrap();
        assert_eq!(status, 200);
        open.push(metric(
            &metrics,
            "ratekeeper_connections{listener=\"http\"}",
        ));
        if open.last() == Some(&9.0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(open.last(), Some(&9.0), "{open:?}");
    // Everything else is refused there, as beyond the cap.
    let (status, refused) = support::raw_http(&app.base[7..], "POST", "/v1/check", PLAIN).unwrap();
    assert_eq!(status, 503, "{refused}");
    assert!(refused.contains("\"overloaded\""), "{refused}");

    // The reserve is bounded too: with it taken, probes are refused.
    let _reserve = hold(&app, 16);
    // Accepted at once (a reserve connection that sends nothing is closed
    // after 1 s, so this cannot wait long); a few tries at most.
    std::thread::sleep(Duration::from_millis(50));
    // Refused unread: read the answer without sending anything, so no
    // request is left unread at the close (a reset could beat the 503).
    // On a loaded machine the held reserve may not all be accepted yet;
    // a probe that got a reserve slot instead is closed, silent, after 1 s.
    let mut answers = Vec::new();
    for _ in 0..5 {
        let mut probe = std::net::TcpStream::connect(&app.base[7..]).unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut answer = String::new();
        let _ = std::io::Read::read_to_string(&mut probe, &mut answer);
        let refused = answer.starts_with("HTTP/1.1 503");
        answers.push(answer);
        if refused {
            break;
        }
    }
    assert!(
        answers.last().unwrap().starts_with("HTTP/1.1 503"),
        "{answers:?}"
    );
    drop(_reserve);
    std::thread::sleep(Duration::from_millis(200));
    let after = support::raw_http(&app.base[7..], "GET", "/metrics", "")
        .unwrap()
        .1;
    assert!(
        metric(
            &after,
            "ratekeeper_connections_refused_total{listener=\"http\"}"
        ) >= 2.0
    );
}
