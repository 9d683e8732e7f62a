//! Slow and idle clients against the real server on port 0: every shape of
//! slow connection is closed by its timeout, a well-behaved client is served
//! quickly while thousands of slow ones are open, connections beyond
//! `server.max_connections` are refused while existing ones keep working,
//! and SIGTERM does not wait for idle keep-alive connections.

use crate::support;

use std::time::{Duration, Instant};

use ratekeeper::config::{Overrides, Settings};
use support::TestApp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Settings on port 0 with these `[server]` keys (name, value).
fn settings(server: &[(&str, &str)]) -> Settings {
    let vars = server
        .iter()
        .map(|(k, v)| {
            (
                format!("RATEKEEPER_SERVER__{}", k.to_ascii_uppercase()),
                v.to_string(),
            )
        })
        .collect();
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".into()),
        ..Default::default()
    };
    let env = config::Environment::default().source(Some(vars));
    Settings::load_from(&overrides, env).expect("test settings are valid")
}

const SHORT: &[(&str, &str)] = &[
    ("header_read_timeout", "1s"),
    ("body_read_timeout", "1s"),
    ("keepalive_timeout", "3s"),
];

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_string()
}

/// Reads one HTTP/1.1 response (head and Content-Length body) and returns
/// (status, body); `None` if the connection closed first.
async fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status = head.get(9..12)?.parse().ok()?;
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).to_string();
            return Some((status, body));
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Waits until the server closes the connection (EOF or reset), reading
/// and discarding anything it sends; returns what it sent.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> Result<String, String> {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    };
    match tokio::time::timeout(limit, read_all).await {
        Ok(()) => Ok(String::from_utf8_lossy(&seen).to_string()),
        Err(_) => Err(format!(
            "still open after {limit:?}; received {:?}",
            String::from_utf8_lossy(&seen)
        )),
    }
}

const CHECK_BODY: &str = r#"{"key":"slow-clients","limit":1000000,"window":"1m"}"#;

fn check_request(host: &str) -> String {
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{CHECK_BODY}",
        CHECK_BODY.len()
    )
}

/// Sends `bytes` one at a time, `gap` apart, until done or the server
/// closes the connection (then the write fails, which is the point).
async fn trickle(stream: &mut TcpStream, bytes: &[u8], gap: Duration) {
    for byte in bytes {
        if stream.write_all(&[*byte]).await.is_err() {
            return;
        }
        tokio::time::sleep(gap).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slow_shape_is_closed_by_its_timeout() {
    let app = TestApp::spawn(settings(SHORT)).await;
    let host = addr(&app);
    let limit = Duration::from_secs(4);
    let post_head = |extra: &str| {
        format!(
            "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}\r\n"
        )
    };

    // Header-phase shapes: closed without an answer.
    let header_shapes: Vec<(&str, Vec<u8>, bool)> = vec![
        ("never sends a byte", Vec::new(), false),
        ("half a request line", b"GET /heal".to_vec(), false),
        (
            "headers trickled",
            format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n").into_bytes(),
            true,
        ),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for (name, bytes, trickled) in header_shapes {
        let host = host.clone();
        tasks.spawn(async move {
            let mut stream = TcpStream::connect(&host).await.unwrap();
            let started = Instant::now();
            if trickled {
                trickle(&mut stream, &bytes, Duration::from_millis(100)).await;
            } else {
                stream.write_all(&bytes).await.unwrap();
            }
            let sent = until_closed(&mut stream, limit).await;
            let sent = sent.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(sent.is_empty(), "{name}: answered {sent:?}");
            (name, started.elapsed())
        });
    }

    // Body-phase shapes: answered 408 with our JSON body, then closed.
    let body_shapes: Vec<(&str, String, Vec<u8>, bool)> = vec![
        (
            "body trickled",
            post_head(&format!("Content-Length: {}\r\n", CHECK_BODY.len())),
            CHECK_BODY.as_bytes().to_vec(),
            true,
        ),
        (
            "unterminated chunked body",
            post_head("Transfer-Encoding: chunked\r\n"),
            b"5\r\n{\"key\r\n".to_vec(),
            false,
        ),
        (
            "Content-Length larger than the body",
            post_head("Content-Length: 100\r\n"),
            b"{\"key\":".to_vec(),
            false,
        ),
    ];
    for (name, head, body, trickled) in body_shapes {
        let host = host.clone();
        tasks.spawn(async move {
            let mut stream = TcpStream::connect(&host).await.unwrap();
            let started = Instant::now();
            stream.write_all(head.as_bytes()).await.unwrap();
            if trickled {
                trickle(&mut stream, &body, Duration::from_millis(100)).await;
            } else {
                stream.write_all(&body).await.unwrap();
            }
            let answer = until_closed(&mut stream, limit).await;
            let answer = answer.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                answer.starts_with("HTTP/1.1 408"),
                "{name}: answered {answer:?}"
            );
            assert!(
                answer.contains(r#""code":"request_timeout""#),
                "{name}: not our JSON error: {answer:?}"
            );
            (name, started.elapsed())
        });
    }

    // Idle keep-alive: still usable after the header timeout (the two
    // timeouts are separate), closed after the keep-alive timeout.
    let host2 = host.clone();
    tasks.spawn(async move {
        let mut stream = TcpStream::connect(&host2).await.unwrap();
        stream
            .write_all(check_request(&host2).as_bytes())
            .await
            .unwrap();
        assert_eq!(read_response(&mut stream).await.unwrap().0, 200);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        stream
            .write_all(check_request(&host2).as_bytes())
            .await
            .unwrap();
        let second = read_response(&mut stream).await;
        assert_eq!(
            second.map(|r| r.0),
            Some(200),
            "idle for 1.5s (header timeout 1s, keep-alive 3s): still served"
        );
        let started = Instant::now();
        let sent = until_closed(&mut stream, Duration::from_secs(6)).await;
        assert_eq!(sent, Ok(String::new()), "idle keep-alive");
        ("idle keep-alive", started.elapsed())
    });

    while let Some(result) = tasks.join_next().await {
        let (name, took) = result.unwrap();
        println!("{name}: closed after {took:?}");
    }
    app.stop().await;
}

fn raise_own_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    assert!(
        hard >= 5_000,
        "this test opens ~4 100 descriptors; the hard limit is {hard}"
    );
}

/// `ratekeeper_connections`, read over a fresh connection that the server
/// closes after answering (so the count is the others plus this one). Not
/// through the pooled HTTP client: when its idle connection is not back in
/// the pool yet, it opens a spare one that sits silent until
/// `header_read_timeout` and would be counted as a client still open.
async fn open_connections(app: &TestApp) -> i64 {
    let host = addr(app);
    let mut stream = TcpStream::connect(&host).await.unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (status, text) = read_response(&mut stream).await.expect("a /metrics answer");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix("ratekeeper_connections{listener=\"http\"} "))
        .expect("ratekeeper_connections in /metrics")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_stay_fast_while_2000_slow_connections_are_open_and_then_closed() {
    raise_own_fd_limit();
    let app = TestApp::spawn(settings(&[
        ("header_read_timeout", "2s"),
        ("body_read_timeout", "2s"),
        ("keepalive_timeout", "2s"),
    ]))
    .await;
    let host = addr(&app);

    // 2 000 slow connections of four shapes. The trickled ones send a byte
    // a second from one task, so they stay in the header/body phase.
    let mut slow = Vec::new();
    for i in 0..2_000 {
        let mut stream = TcpStream::connect(&host).await.unwrap();
        let opening: &[u8] = match i % 4 {
            0 => b"",
            1 => b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
            2 => b"POST /v1/check HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
            _ => b"GE",
        };
        stream.write_all(opening).await.unwrap();
        slow.push(stream);
    }
    let trickler = tokio::spawn(async move {
        for _ in 0..30 {
            for stream in slow.iter_mut().skip(1).step_by(2) {
                let _ = stream.try_write(b"a");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        slow
    });
    let open = open_connections(&app).await;
    assert!(open >= 2_000, "only {open} connections open");

    // One well-behaved keep-alive client.
    let mut client = TcpStream::connect(&host).await.unwrap();
    client.set_nodelay(true).unwrap();
    let request = check_request(&host);
    let mut latencies = Vec::new();
    for _ in 0..1_000 {
        let started = Instant::now();
        client.write_all(request.as_bytes()).await.unwrap();
        let (status, _) = read_response(&mut client).await.expect("a response");
        latencies.push(started.elapsed());
        assert_eq!(status, 200);
    }
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    let p50 = latencies[latencies.len() / 2];
    println!("with 2000 slow connections open: p50 {p50:?}, p99 {p99:?}");
    assert!(p99 < Duration::from_millis(10), "p99 {p99:?}");
    drop(client);

    // The slow ones are closed by the timeouts, not by us: the trickler
    // still holds every client socket open.
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut open = open_connections(&app).await;
    while open > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        open = open_connections(&app).await;
    }
    assert!(open <= 1, "{open} connections still open");
    trickler.abort();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_are_bounded_to_64_kib() {
    let app = TestApp::spawn(settings(&[])).await;
    let host = addr(&app);
    for (size, status) in [(60 * 1024, 200), (70 * 1024, 431)] {
        let mut stream = TcpStream::connect(&host).await.unwrap();
        let head = format!(
            "GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Big: {}\r\n\r\n",
            "a".repeat(size)
        );
        // The server may answer 431 and close before it has read it all.
        let _ = stream.write_all(head.as_bytes()).await;
        let response = read_response(&mut stream).await.map(|r| r.0);
        assert_eq!(response, Some(status), "a {size}-byte header");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_is_closed_by_the_write_timeout() {
    let app = TestApp::spawn(settings(&[("write_timeout", "1s")])).await;
    let host = addr(&app);
    // Pipelined requests for a 1.4 MB asset, answers never read: the
    // kernel's buffers fill and the server's writes stop making progress.
    let mut reader = TcpStream::connect(&host).await.unwrap();
    let request = format!("GET /docs/swagger-ui-bundle.js HTTP/1.1\r\nHost: {host}\r\n\r\n");
    reader
        .write_all(request.repeat(50).as_bytes())
        .await
        .unwrap();
    assert_eq!(open_connections(&app).await, 2, "the reader and /metrics");
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut open = open_connections(&app).await;
    while open > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        open = open_connections(&app).await;
    }
    assert_eq!(open, 1, "the non-reading client is still connected");
    drop(reader);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_refused_while_existing_ones_are_served() {
    let app = TestApp::spawn(settings(&[("max_connections", "4")])).await;
    let host = addr(&app);

    let mut client = TcpStream::connect(&host).await.unwrap();
    let request = check_request(&host);
    client.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut client).await.unwrap().0, 200);
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(&host).await.unwrap());
    }
    // Beyond the cap, 16 connections are kept for probes (tests/
    // waiters_cap.rs); fill them, so what comes next is refused.
    let mut reserve = Vec::new();
    for _ in 0..16 {
        reserve.push(TcpStream::connect(&host).await.unwrap());
    }
    // Accepting is asynchronous: give the server a moment to count them.
    tokio::time::sleep(Duration::from_millis(200)).await;

    for _ in 0..3 {
        let mut extra = TcpStream::connect(&host).await.unwrap();
        let answer = until_closed(&mut extra, Duration::from_secs(2))
            .await
            .expect("refused connections are closed at once");
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
        assert!(answer.contains(r#""code":"overloaded""#), "{answer:?}");
    }

    // The existing keep-alive client is still served...
    client.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut client).await.unwrap().0, 200);
    // ...and reads the counters over the same connection.
    let metrics = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n");
    client.write_all(metrics.as_bytes()).await.unwrap();
    let (status, text) = read_response(&mut client).await.unwrap();
    assert_eq!(status, 200);
    // The 4 under the cap, and those of the reserve that their 1 s head
    // deadline has not closed yet.
    let open: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("ratekeeper_connections{listener=\"http\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((4..=20).contains(&open), "{text}");
    assert!(
        text.contains("ratekeeper_connections_refused_total{listener=\"http\"} 3"),
        "{text}"
    );

    // Once one closes, a new connection is served again.
    drop(reserve);
    drop(idle.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = TcpStream::connect(&host).await.unwrap();
    again.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut again).await.unwrap().0, 200);
    app.stop().await;
}

/// The binary with long shutdown, header and body timeouts; returns it and
/// its address.
fn spawn_binary() -> (support::binary::KillOnDrop, String) {
    support::binary::serve(&[
        ("RATEKEEPER_SERVER__SHUTDOWN_TIMEOUT", "30s"),
        ("RATEKEEPER_SERVER__HEADER_READ_TIMEOUT", "30s"),
        ("RATEKEEPER_SERVER__BODY_READ_TIMEOUT", "30s"),
    ])
}

#[test]
fn sigterm_lets_an_in_flight_request_finish() {
    use std::io::{Read, Write};
    let (mut child, host) = spawn_binary();
    let mut stream = std::net::TcpStream::connect(&host).unwrap();
    let (first, rest) = CHECK_BODY.split_at(10);
    write!(
        stream,
        "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{first}",
        CHECK_BODY.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(support::send_signal(child.0.id(), support::Signal::SIGTERM));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );
    stream.write_all(rest.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.to_ascii_lowercase().contains("connection: close"),
        "a draining server says it closes: {response}"
    );
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigterm_closes_idle_and_half_sent_connections_at_once() {
    use std::io::{Read, Write};
    let (mut child, host) = spawn_binary();

    // Three keep-alive connections, each idle after one answered request.
    let mut kept = Vec::new();
    for _ in 0..3 {
        let mut stream = std::net::TcpStream::connect(&host).unwrap();
        write!(stream, "GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut buf = [0u8; 512];
        let n = stream.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        kept.push(stream);
    }
    // One that never sent a byte, one halfway through its request line.
    kept.push(std::net::TcpStream::connect(&host).unwrap());
    let mut half = std::net::TcpStream::connect(&host).unwrap();
    half.write_all(b"GET /heal").unwrap();
    kept.push(half);
    std::thread::sleep(Duration::from_millis(100));

    assert!(support::send_signal(child.0.id(), support::Signal::SIGTERM));
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(1),
            "still running 1s after SIGTERM with no request in progress (shutdown_timeout 30s)"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    println!("exited {:?} after SIGTERM", signalled.elapsed());
}
