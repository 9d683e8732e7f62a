//! Network helpers for tests: fresh client addresses, calendar-minute
//! windows, and a hand-written HTTP/1.1 request.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A loopback address (127.x.y.z) no other test, or run this minute, sends
/// from: limits keyed by client address then start from nothing. x.y is
/// this process's id (mod 65 536), z a counter from 2: distinct within a
/// process by construction (a hash of the two once mapped z = 0, 1 and 2
/// all to 2, and a test's two addresses shared one limit), and never
/// 127.0.0.1.
pub fn fresh_loopback() -> std::net::IpAddr {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);
    let z = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    assert!(
        z >= 2,
        "more than 254 fresh loopback addresses in one process"
    );
    let [_, _, x, y] = std::process::id().to_be_bytes();
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, x, y, z))
}

/// Windows that are calendar minutes: a sequence that must stay inside one
/// starts no later than `latest` into a minute, or waits for the next.
pub async fn early_in_a_minute(latest: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = now.as_millis() % 60_000;
    if into > latest.as_millis() {
        tokio::time::sleep(Duration::from_millis((60_000 - into + 200) as u64)).await;
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`) to
/// `addr`, written by hand: (status, body). Every step is bounded by 3 s,
/// so a server that cannot accept fails the test instead of hanging it,
/// and no pooled client can open a spare connection behind the test's back.
pub fn raw_http(addr: &str, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("read: {e}"))?;
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
