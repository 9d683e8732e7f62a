//! What a client's HTTP request puts into the descriptors Envoy sends, run
//! through the shipped `examples/envoy/ratelimit.yaml` and `rls.yaml` with a
//! real Envoy (1.40) and the real ratekeeper binary: header bytes that are
//! not UTF-8, an empty value, a long one, a repeated header, a header left
//! out. Each is limited like any other value, and none makes ratekeeper
//! answer an error, which Envoy (`failure_mode_deny: false`, its default)
//! would turn into no limit at all. Envoy's `ratelimit.error` counter says
//! whether it saw one.
//!
//! The requests are written byte for byte on a TCP socket (HTTP/1.1 allows
//! the bytes 0x80-0xFF in a header value; an HTTP client library would
//! refuse to send them), each test from a loopback address of its own.

use crate::servers as proxies;
use crate::support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use proxies::envoy::Envoy;
use proxies::{Upstream, substitute};
use support::binary::KillOnDrop;
use support::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EXAMPLE: &str = include_str!("../../examples/envoy/ratelimit.yaml");
const RLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/rls.yaml");
/// rls.yaml's limits, a minute each.
const PER_KEY: usize = 3;
const PER_ADDRESS: usize = 12;
/// Envoy's counter of RLS calls that ended in an error.
const ENVOY_ERRORS: &str = "cluster.app.ratelimit.error";

/// The ratekeeper binary serving rls.yaml on a free gRPC port; and that
/// port.
fn ratekeeper() -> (KillOnDrop, u16) {
    let grpc = free_port();
    let listen = format!("127.0.0.1:{grpc}");
    let env = [
        ("RATEKEEPER_GRPC__LISTEN", listen.as_str()),
        ("RATEKEEPER_RLS__CONFIG", RLS),
    ];
    let (service, _http) = support::binary::serve(&env);
    (service, grpc)
}

/// Envoy with the example, its addresses (and `more`) substituted.
async fn envoy(upstream: &Upstream, grpc: u16, more: &[(&str, String)]) -> Envoy {
    let port = free_port();
    let mut pairs = vec![
        ("port_value: 10000", format!("port_value: {port}")),
        (
            "port_value: 9000",
            format!("port_value: {}", upstream.addr.port()),
        ),
        ("port_value: 8081", format!("port_value: {grpc}")),
    ];
    pairs.extend(more.iter().cloned());
    Envoy::start(&substitute(EXAMPLE, &pairs), port).await
}

/// The status of `GET /orders/1` with the raw header lines `headers`
/// (each ending in CRLF), sent from `from`.
async fn get(envoy: &Envoy, from: IpAddr, headers: &[u8]) -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let to = SocketAddr::from(([127, 0, 0, 1], envoy.port));
    let mut stream = socket.connect(to).await.unwrap();
    let mut request = b"GET /orders/1 HTTP/1.1\r\nHost: app\r\nConnection: close\r\n".to_vec();
    request.extend_from_slice(headers);
    request.extend_from_slice(b"\r\n");
    stream.write_all(&request).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let status = response.get(9..12).expect("a status line");
    std::str::from_utf8(status).unwrap().parse().unwrap()
}

/// `X-API-Key: <value>` as a raw header line.
fn api_key(value: &[u8]) -> Vec<u8> {
    [b"X-API-Key: ", value, b"\r\n"].concat()
}

/// `n` requests from `from` with `headers`: their statuses.
async fn statuses(envoy: &Envoy, from: IpAddr, headers: &[u8], n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(get(envoy, from, headers).await);
    }
    out
}

/// The reproduction of the report: `X-API-Key: \xff\xfe` made Envoy send a
/// descriptor value that is not UTF-8; the call failed whole (INTERNAL)
/// and Envoy let every request through, even from an address over its
/// limit. Now such a key has a counter of its own, like any key, apart
/// from the UTF-8 text that looks like it (`ÿþ`) and from `%FF%FE`; and
/// the address limit holds whatever key is sent.
#[tokio::test]
async fn a_key_that_is_not_utf8_is_limited_like_any_other() {
    let upstream = Upstream::start().await;
    let (_service, grpc) = ratekeeper();
    let envoy = envoy(&upstream, grpc, &[]).await;
    let (a, b) = (support::fresh_loopback(), support::fresh_loopback());

    support::early_in_a_minute(Duration::from_millis(40_000)).await;
    let raw = api_key(b"\xff\xfe");
    let got = statuses(&envoy, a, &raw, PER_KEY + 1).await;
    assert_eq!(got, [200, 200, 200, 429], "{}", envoy.log());
    for other in [&b"\xff\xfd"[..], "ÿþ".as_bytes(), b"%FF%FE"] {
        assert_eq!(get(&envoy, a, &api_key(other)).await, 200, "{other:?}");
    }
    // Address b spends its budget without a key, then sends a key that
    // is not UTF-8: still over its address limit.
    let spent = statuses(&envoy, b, b"", PER_ADDRESS).await;
    assert!(spent.iter().all(|s| *s == 200), "{spent:?}");
    assert_eq!(get(&envoy, b, &api_key(b"\xaa\xbb")).await, 429);
    assert_eq!(envoy.counter(ENVOY_ERRORS).await, 0, "{}", envoy.log());
    assert_eq!(upstream.seen(), PER_KEY + 3 + PER_ADDRESS);
}

/// The rest of what a client's headers decide, checked on the real Envoy:
/// an empty `X-API-Key:` is sent as an empty value (a key of its own); a
/// 50 KiB value is sent whole (Envoy's default header limit is 60 KiB,
/// beyond which Envoy answers 431 itself) and has its own, hashed,
/// counter; of a repeated header Envoy sends the first value only.
#[tokio::test]
async fn empty_long_and_repeated_values_are_limited() {
    let upstream = Upstream::start().await;
    let (_service, grpc) = ratekeeper();
    let envoy = envoy(&upstream, grpc, &[]).await;
    let (a, b, c) = (
        support::fresh_loopback(),
        support::fresh_loopback(),
        support::fresh_loopback(),
    );

    support::early_in_a_minute(Duration::from_millis(40_000)).await;
    let empty = statuses(&envoy, a, b"X-API-Key:\r\n", PER_KEY + 1).await;
    assert_eq!(empty, [200, 200, 200, 429]);
    let long = api_key(&vec![b'k'; 50 * 1024]);
    assert_eq!(
        statuses(&envoy, b, &long, PER_KEY + 1).await,
        [200, 200, 200, 429]
    );
    let too_long = api_key(&vec![b'k'; 61 * 1024]);
    assert_eq!(get(&envoy, b, &too_long).await, 431, "Envoy's own limit");
    let both = b"X-API-Key: first\r\nX-API-Key: second\r\n";
    let repeated = statuses(&envoy, c, both, PER_KEY).await;
    assert_eq!(repeated, [200; PER_KEY]);
    assert_eq!(get(&envoy, c, &api_key(b"first")).await, 429);
    assert_eq!(get(&envoy, c, &api_key(b"second")).await, 200);
    assert_eq!(envoy.counter(ENVOY_ERRORS).await, 0, "{}", envoy.log());
}

/// With `skip_if_absent: true` on the X-API-Key action (a documented Envoy
/// option), a request without the header makes Envoy send that rate
/// limit's descriptor with no entries at all. That must not fail the call:
/// it has no limit, and the address limit beside it still holds.
#[tokio::test]
async fn a_header_left_out_under_skip_if_absent_keeps_the_address_limit() {
    let upstream = Upstream::start().await;
    let (_service, grpc) = ratekeeper();
    let skip = (
        "descriptor_key: api_key",
        "descriptor_key: api_key\n                                      skip_if_absent: true"
            .into(),
    );
    let envoy = envoy(&upstream, grpc, &[skip]).await;
    let from = support::fresh_loopback();

    support::early_in_a_minute(Duration::from_millis(40_000)).await;
    let got = statuses(&envoy, from, b"", PER_ADDRESS + 1).await;
    assert!(got[..PER_ADDRESS].iter().all(|s| *s == 200), "{got:?}");
    assert_eq!(got[PER_ADDRESS], 429, "{}", envoy.log());
    assert_eq!(envoy.counter(ENVOY_ERRORS).await, 0);
    // The key, when sent, is limited as before.
    let key = api_key(b"present");
    let other = support::fresh_loopback();
    let got = statuses(&envoy, other, &key, PER_KEY + 1).await;
    assert_eq!(got, [200, 200, 200, 429]);
}

/// A call over ratekeeper's 1 MiB bound: with Envoy's header limit raised
/// (`max_request_headers_kb`) and a rate limit per header, a client's
/// large headers make one. It used to get OUT_OF_RANGE, which Envoy let
/// through; now it is denied (OVER_LIMIT), and a request of ordinary size
/// passes as before.
#[tokio::test]
async fn a_call_over_the_size_bound_is_denied() {
    const HEADERS: usize = 20;
    let upstream = Upstream::start().await;
    let (_service, grpc) = ratekeeper();
    let anchor = "                              - actions:\n                                  - remote_address: {}\n";
    let per_header: String = (0..HEADERS)
        .map(|i| {
            format!(
                "                              - actions:\n                                  - request_headers:\n                                      header_name: x-k{i}\n                                      descriptor_key: k{i}\n"
            )
        })
        .collect();
    let more = [
        (anchor, format!("{anchor}{per_header}")),
        (
            "use_remote_address: true",
            "use_remote_address: true\n                max_request_headers_kb: 8192".into(),
        ),
    ];
    let envoy = envoy(&upstream, grpc, &more).await;
    let from = support::fresh_loopback();
    let headers = |size: usize| -> Vec<u8> {
        let value = vec![b'v'; size];
        let line = |i| [format!("X-K{i}: ").as_bytes(), &value, b"\r\n"].concat();
        (0..HEADERS).flat_map(line).collect()
    };

    support::early_in_a_minute(Duration::from_millis(40_000)).await;
    // 20 descriptors of 60 KiB: a call of 1.2 MiB. (Before, Envoy let it
    // through, and the upstream here refused its 1.2 MiB of headers: 431.)
    assert_eq!(get(&envoy, from, &headers(60 * 1024)).await, 429);
    assert_eq!(envoy.counter(ENVOY_ERRORS).await, 0, "{}", envoy.log());
    assert_eq!(get(&envoy, from, &headers(1024)).await, 200);
    assert_eq!(upstream.seen(), 1);
}
