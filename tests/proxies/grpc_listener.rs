//! The gRPC listener (`grpc.listen`) is bounded like the HTTP one, against
//! the real binary under a low open-files limit: a flood of idle gRPC
//! connections fills `grpc.max_connections` and no more, so the HTTP API
//! keeps answering and a policies reload still applies; connections that
//! never start a call, and connections idle after their calls, are closed
//! by their timeouts and counted.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use support::binary::{Served, serve_with_nofile};

/// Small enough that a few hundred connections would exhaust it.
const NOFILE: u32 = 256;

/// What an HTTP/2 client sends first: the preface, then its SETTINGS.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

const POLICY_API: &str = r#"
[policies.api]
limits = [ { name = "minute", algorithm = "fixed_window", limit = 1000, window = "1m" } ]
"#;
const POLICY_SECOND: &str = r#"
[policies.second]
limits = [ { name = "minute", algorithm = "fixed_window", limit = 1000, window = "1m" } ]
"#;

/// The value of one series of GET /metrics (0 when absent).
fn metric(served: &Served, series: &str) -> f64 {
    let (status, body) =
        support::raw_http(&served.http, "GET", "/metrics", "").expect("GET /metrics");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

fn check(served: &Served, policy: &str) -> Result<(u16, String), String> {
    let body = format!(r#"{{"policy":"{policy}","key":"k1"}}"#);
    support::raw_http(&served.http, "POST", "/v1/check", &body)
}

/// `n` connections to `addr`, each having sent the HTTP/2 preface and
/// nothing more (what the issue's attacker held), kept open by the caller.
fn flood(addr: &str, n: usize) -> Vec<TcpStream> {
    let addr: SocketAddr = addr.parse().unwrap();
    (0..n)
        .filter_map(|_| {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
            let _ = s.write_all(PREFACE);
            Some(s)
        })
        .collect()
}

async fn rls_call(grpc: &str) -> Result<(), String> {
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    ask(&mut client).await
}

async fn ask(client: &mut RateLimitServiceClient<tonic::transport::Channel>) -> Result<(), String> {
    let request = RateLimitRequest {
        domain: "none".into(),
        ..Default::default()
    };
    let call = client.should_rate_limit(request);
    match tokio::time::timeout(Duration::from_secs(3), call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(format!("call: {status}")),
        Err(_) => Err("call: no answer within 3 s".into()),
    }
}

fn write_policies(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_flood_of_idle_grpc_connections_leaves_the_http_api_and_reloads_working() {
    let dir = support::fresh_dir("grpc-flood");
    let policies = dir.join("policies.toml");
    write_policies(&policies, POLICY_API);
    let served = serve_with_nofile(
        NOFILE,
        &[
            ("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0"),
            ("RATEKEEPER_POLICIES__FILE", policies.to_str().unwrap()),
        ],
    );
    let grpc = served.grpc.clone().expect("the gRPC listener is logged");
    // Envoy's connection, made before the flood, must keep being served.
    let mut envoy = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    ask(&mut envoy).await.unwrap();

    // More connections than the process has file descriptors.
    let held = flood(&grpc, NOFILE as usize + 100);
    std::thread::sleep(Duration::from_millis(500));

    let healthz = support::raw_http(&served.http, "GET", "/healthz", "");
    assert!(
        matches!(healthz, Ok((200, _))),
        "GET /healthz during the flood: {healthz:?}"
    );
    let answered = check(&served, "api");
    assert!(
        matches!(answered, Ok((200, _))),
        "POST /v1/check during the flood: {answered:?}"
    );
    ask(&mut envoy).await.expect("an existing gRPC connection");

    // A reload needs a file descriptor for the file (and the watcher's).
    assert!(check(&served, "second").is_ok_and(|(s, _)| s != 200));
    write_policies(&policies, &format!("{POLICY_API}{POLICY_SECOND}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match check(&served, "second") {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "the new policy did not apply during the flood: {other:?}; log: {:?}",
                served.log().iter().rev().take(5).collect::<Vec<_>>()
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    let open = metric(&served, "ratekeeper_connections{listener=\"grpc\"}");
    let refused = metric(
        &served,
        "ratekeeper_connections_refused_total{listener=\"grpc\"}",
    );
    assert!(open >= 1.0 && open < f64::from(NOFILE), "open: {open}");
    assert!(
        refused >= held.len() as f64 - open,
        "refused {refused} of {} (open {open})",
        held.len()
    );
    // The startup check saw the small limit and said what it did.
    let lowered = served
        .log()
        .into_iter()
        .any(|l| l.contains("WARN") && l.contains("grpc.max_connections"));
    assert!(lowered, "no warning about the caps: {:?}", served.log());

    // Once the flood is gone, new gRPC connections are served again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(error) = rls_call(&grpc).await {
        assert!(Instant::now() < deadline, "a new gRPC connection: {error}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads until the server closes the connection; what it sent, or `None`
/// if it was still open after `limit`.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => return Some(seen),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(seen),
        }
    }
    None
}

/// The types of the HTTP/2 frames in `bytes`, in order.
fn frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while bytes.len() >= 9 {
        let length = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        types.push(bytes[3]);
        bytes = &bytes[(9 + length).min(bytes.len())..];
    }
    types
}

const GOAWAY: u8 = 7;

/// An HTTP/2 PING frame (8 bytes of opaque data).
const PING: &[u8] = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00rk-ping!";

// Two workers: the client's connection task must run (and see the GOAWAY)
// while this thread blocks on its raw sockets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_call_and_idle_ones_are_closed_and_counted() {
    let served = serve_with_nofile(
        1024,
        &[
            ("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0"),
            ("RATEKEEPER_GRPC__HANDSHAKE_TIMEOUT", "1s"),
            ("RATEKEEPER_GRPC__IDLE_TIMEOUT", "2s"),
        ],
    );
    let grpc = served.grpc.clone().unwrap();
    let addr: SocketAddr = grpc.parse().unwrap();
    let limit = Duration::from_secs(6);

    // Sends nothing at all.
    let mut silent = TcpStream::connect(addr).unwrap();
    // Sends the preface, then only pings: bytes, but never a call.
    let mut pinging = TcpStream::connect(addr).unwrap();
    pinging.write_all(PREFACE).unwrap();
    let pinger = {
        let mut writer = pinging.try_clone().unwrap();
        std::thread::spawn(move || {
            while writer.write_all(PING).is_ok() {
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    // A real client: one call, then nothing.
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    ask(&mut client).await.unwrap();

    let silent_closed = closed_within(&mut silent, limit);
    assert!(
        silent_closed.is_some(),
        "a silent connection held past {limit:?}"
    );
    let sent = closed_within(&mut pinging, limit).expect("a pinging connection held");
    pinger.join().unwrap();
    // Ended gracefully: told to go away, not just dropped.
    assert!(
        frame_types(&sent).contains(&GOAWAY),
        "{:?}",
        frame_types(&sent)
    );

    let timed_out = |timeout: &str| {
        metric(
            &served,
            &format!(
                "ratekeeper_connections_timed_out_total{{listener=\"grpc\",timeout=\"{timeout}\"}}"
            ),
        )
    };
    // At least: on a loaded machine the real client's own connection may
    // also pass the 1 s handshake deadline before its first call.
    assert!(timed_out("head") >= 2.0);
    let deadline = Instant::now() + limit;
    while timed_out("idle") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the idle client's connection was not closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The GOAWAY ends the idle connection, well before the forced close.
    let deadline = Instant::now() + Duration::from_secs(4);
    while metric(&served, "ratekeeper_connections{listener=\"grpc\"}") > 0.0 {
        assert!(
            Instant::now() < deadline,
            "the idle connection outlived its GOAWAY"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Told to go away, the client takes a new connection for its next
    // call: none is lost.
    ask(&mut client).await.expect("a call after the idle close");
}

/// One HTTP/2 connection that opens `streams` requests and resets each at
/// once, all in one write (CVE-2023-44487, "rapid reset"): h2 answers with
/// a GOAWAY and logs a warning.
fn rapid_reset(addr: SocketAddr, streams: u32) {
    let mut bytes = PREFACE.to_vec();
    for i in 0..streams {
        let id = (2 * i + 1).to_be_bytes();
        // HEADERS, END_HEADERS: :method POST, :scheme http, :path / (HPACK
        // static table entries 3, 6 and 4).
        bytes.extend_from_slice(&[0, 0, 3, 1, 4]);
        bytes.extend_from_slice(&id);
        bytes.extend_from_slice(&[0x83, 0x86, 0x84]);
        // RST_STREAM, CANCEL.
        bytes.extend_from_slice(&[0, 0, 4, 3, 0]);
        bytes.extend_from_slice(&id);
        bytes.extend_from_slice(&[0, 0, 0, 8]);
    }
    let mut stream = TcpStream::connect(addr).unwrap();
    let _ = stream.write_all(&bytes);
    assert!(
        closed_within(&mut stream, Duration::from_secs(5)).is_some(),
        "the server kept a rapid-reset connection open"
    );
}

#[tokio::test]
async fn rapid_reset_warnings_are_counted_and_rarely_logged() {
    let served = serve_with_nofile(1024, &[("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0")]);
    let addr: SocketAddr = served.grpc.clone().unwrap().parse().unwrap();
    let connections = 40;
    for _ in 0..connections {
        rapid_reset(addr, 100);
    }
    // The last log lines are written by the time /metrics answers below,
    // give or take a moment for the pipe.
    let counted = metric(&served, "ratekeeper_http2_warnings_total");
    std::thread::sleep(Duration::from_millis(300));
    let logged = served
        .log()
        .into_iter()
        .filter(|l| l.contains("\"level\":\"WARN\"") && l.contains("\"target\":\"h2::"))
        .count();
    assert!(
        counted >= f64::from(connections),
        "{counted} warnings counted for {connections} connections"
    );
    // One per 10 s; the test takes a few seconds at most.
    assert!(
        (1..=2).contains(&logged),
        "{logged} h2 warning lines logged for {connections} connections"
    );
    let healthz = support::raw_http(&served.http, "GET", "/healthz", "");
    assert!(matches!(healthz, Ok((200, _))), "{healthz:?}");
}

/// With tokens, only authorised calls keep a connection open: a client
/// whose every call is refused (UNAUTHENTICATED) is closed by the handshake
/// deadline like one that makes none, so unauthenticated clients cannot
/// hold `grpc.max_connections` by calling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_do_not_keep_a_connection_open() {
    let dir = support::fresh_dir("grpc-tokens");
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "check rk-grpc-listener-test-token-0123456789\n").unwrap();
    let tokens = tokens.to_str().unwrap().to_string();
    let served = serve_with_nofile(
        1024,
        &[
            ("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0"),
            ("RATEKEEPER_GRPC__HANDSHAKE_TIMEOUT", "1s"),
            ("RATEKEEPER_AUTH__TOKENS_FILE", &tokens),
        ],
    );
    let grpc = served.grpc.clone().unwrap();
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    // A refused call every 200 ms for 3 s: three handshake deadlines.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let refused = ask(&mut client).await.unwrap_err();
        assert!(
            refused.contains("Unauthenticated") || refused.contains("bearer"),
            "{refused}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let head = metric(
        &served,
        "ratekeeper_connections_timed_out_total{listener=\"grpc\",timeout=\"head\"}",
    );
    assert!(head >= 1.0, "the refused client's connection stayed open");
}

/// A `ShouldRateLimit` stream `id` whose message declares `declared` bytes
/// and sends one: HEADERS (HPACK literals without indexing), then DATA
/// without END_STREAM.
fn slow_call(id: u32, declared: u32) -> Vec<u8> {
    const PATH: &[u8] = b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let mut block = vec![0x83, 0x86, 0x04, PATH.len() as u8];
    block.extend_from_slice(PATH);
    block.extend_from_slice(&[0x0f, 0x10, 16]);
    block.extend_from_slice(b"application/grpc");
    block.extend_from_slice(&[0x00, 2]);
    block.extend_from_slice(b"te");
    block.push(8);
    block.extend_from_slice(b"trailers");
    let mut bytes = vec![0, 0, block.len() as u8, 1, 4];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(&block);
    // DATA: the 5-byte gRPC prefix declaring the length, and one byte.
    bytes.extend_from_slice(&[0, 0, 6, 0, 0]);
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&declared.to_be_bytes());
    bytes.push(0x0a);
    bytes
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Calls that declare a large message and send a byte of it hold no more
/// memory than the read slots allow, and are answered (OVER_LIMIT, as
/// `overloaded`) rather than kept; a real call during the flood is
/// answered too, never with an error. Before, tonic reserved each declared
/// length up front: about 100 MB per connection of 256 such streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_calls_hold_bounded_memory_and_are_answered() {
    let served = serve_with_nofile(1024, &[("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0")]);
    let grpc = served.grpc.clone().unwrap();
    let addr: SocketAddr = grpc.parse().unwrap();
    let pid = served.child.0.id();
    let before = rss_kib(pid);
    let mut flood = Vec::new();
    for _ in 0..16 {
        let mut bytes = PREFACE.to_vec();
        for i in 0..100 {
            bytes.extend(slow_call(2 * i + 1, 64 * 1024 - 16));
        }
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(&bytes).unwrap();
        flood.push(stream);
    }
    std::thread::sleep(Duration::from_millis(500));
    let during = rss_kib(pid);
    // 1 600 streams × 64 KiB would be 100 MiB; 256 read slots hold 16.
    let grown = during.saturating_sub(before);
    assert!(grown < 48 * 1024, "RSS grew {grown} KiB");
    // A real call meanwhile gets an answer, not an error.
    assert_eq!(rls_call(&grpc).await, Ok(()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(
        &served,
        "ratekeeper_rls_request_errors_total{reason=\"overloaded\"}",
    ) < 1.0
    {
        assert!(Instant::now() < deadline, "no slow call was answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(flood);
}

/// At SIGTERM the gRPC listener drains like the HTTP one: an open
/// connection is told to go away (GOAWAY) before it closes, so Envoy sends
/// its next call elsewhere instead of finding the connection cut (which it
/// answers by its failure mode: by default, the request passes).
#[test]
fn shutdown_sends_goaway_on_open_grpc_connections() {
    let served = serve_with_nofile(1024, &[("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0")]);
    let addr: SocketAddr = served.grpc.clone().unwrap().parse().unwrap();
    let mut open = TcpStream::connect(addr).unwrap();
    open.write_all(PREFACE).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = served.child.0.id();
    assert!(support::send_signal(pid, support::Signal::SIGTERM));
    // Read for 3 s: a graceful HTTP/2 shutdown sends GOAWAY, then waits
    // for the client's PING ack, which this raw client never sends.
    open.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (mut sent, mut buf) = (Vec::new(), [0u8; 4096]);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) && !frame_types(&sent).contains(&GOAWAY) {
        match open.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => sent.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    assert!(
        frame_types(&sent).contains(&GOAWAY),
        "{:?}",
        frame_types(&sent)
    );
}
