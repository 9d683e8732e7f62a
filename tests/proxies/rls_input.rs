//! Bad and client-controlled input to the RLS server: each gets a clear
//! gRPC status, or a decision, and the server goes on answering.

use crate::rls_support;
use crate::support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use rls_support::{CONFIG, config_file, desc, raw_request, request, rls_settings, start};

/// Malformed requests get INVALID_ARGUMENT with a message naming the
/// problem, whatever the domain (known or not), and the server goes on.
/// envoyproxy/ratelimit refuses an empty domain the same way; it has no
/// caps on entries or descriptors, and ignores an empty key.
#[tokio::test]
async fn bad_input_gets_invalid_argument_and_the_server_goes_on() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    let many: Vec<(String, String)> = (0..1000).map(|i| (format!("k{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut negative = desc(&[("client", "a")]);
    negative.is_negative_hits = true;
    let mut cases = vec![(request("", vec![desc(&[("client", "a")])]), "domain")];
    for domain in ["edge", "unknown"] {
        let thousand = (0..1000).map(|_| desc(&[("client", "a")])).collect();
        cases.extend([
            (request(domain, vec![desc(&[("", "x")])]), "empty key"),
            (
                request(domain, vec![desc(&[("client", "a"), ("", "")])]),
                "empty key",
            ),
            (request(domain, vec![desc(&many)]), "entries, got 1000"),
            (
                request(domain, (0..65).map(|_| desc(&[("client", "a")])).collect()),
                "descriptors, got 65",
            ),
            (request(domain, thousand), "descriptors, got 1000"),
        ]);
    }
    cases.push((request("edge", vec![negative]), "negative"));
    let refused = cases.len() as u64;
    for (i, (req, names)) in cases.into_iter().enumerate() {
        let status = rls.ask(req).await.expect_err("refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "case {i}: {status:?}"
        );
        assert!(status.message().contains(names), "case {i}: {status:?}");
    }
    assert_eq!(
        request_errors(&rls, "invalid").await,
        refused,
        "each counted"
    );
    let ok = rls
        .codes(request("edge", vec![desc(&[("client", "a")])]))
        .await;
    assert_eq!(ok.0, Code::Ok);
}

/// Huge keys, values and domain names within the message cap are answered
/// like short ones: a huge value of a limited key has its own (hashed)
/// counter, a huge unknown key or domain has no limit, and none reaches
/// the metrics.
#[tokio::test]
async fn huge_keys_values_and_domains_are_answered() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    let huge = "v".repeat(60 * 1024);
    let value = || request("edge", vec![desc(&[("client", &huge)])]);
    for remaining in [2, 1, 0] {
        assert_eq!(
            rls.codes(value()).await,
            (Code::Ok, vec![Code::Ok], vec![remaining])
        );
    }
    assert_eq!(rls.codes(value()).await.0, Code::OverLimit);
    let key = request("edge", vec![desc(&[(&huge, "x")])]);
    assert_eq!(rls.codes(key).await, (Code::Ok, vec![Code::Ok], vec![0]));
    let domain = request(&huge, vec![desc(&[("client", "a")])]);
    assert_eq!(rls.codes(domain).await, (Code::Ok, vec![Code::Ok], vec![0]));
    let metrics = rls.metrics().await;
    assert!(!metrics.contains("vvvvvvvv"), "a value in the metrics");
    let ok = rls
        .codes(request("edge", vec![desc(&[("client", "a")])]))
        .await;
    assert_eq!(ok, (Code::Ok, vec![Code::Ok], vec![2]));
}

/// What a client's HTTP request can choose (values, hence how many
/// descriptors match, and the size of the call) never switches limiting
/// off: a descriptor that cannot be evaluated answers OVER_LIMIT, since
/// Envoy fails open on an error by default.
#[tokio::test]
async fn client_controlled_input_is_limited_never_refused() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    // A descriptor with no entries (Envoy sends one when a client leaves
    // out every `skip_if_absent` header of a rate limit) has no limit; the
    // others of the request are decided as usual.
    let empty = request("edge", vec![desc(&[]), desc(&[("client", "e")])]);
    let got = rls.codes(empty).await;
    assert_eq!(got, (Code::Ok, vec![Code::Ok; 2], vec![0, 2]));
    let long = "x".repeat(600);
    let one = || request("edge", vec![desc(&[("client", long.as_str())])]);
    for remaining in [2, 1, 0] {
        assert_eq!(
            rls.codes(one()).await,
            (Code::Ok, vec![Code::Ok], vec![remaining])
        );
    }
    assert_eq!(rls.codes(one()).await.0, Code::OverLimit);
    let other = "y".repeat(600);
    let r = rls
        .codes(request("edge", vec![desc(&[("client", &other)])]))
        .await;
    assert_eq!(r.0, Code::Ok, "a different long value has its own counter");

    // Nine limited descriptors, cap 8: the ninth is OVER_LIMIT, none spends.
    let names: Vec<String> = (0..9).map(|i| format!("n{i}")).collect();
    let nine = request(
        "edge",
        names.iter().map(|n| desc(&[("client", n)])).collect(),
    );
    let (overall, codes, _) = rls.codes(nine).await;
    assert_eq!(overall, Code::OverLimit);
    assert_eq!(codes[8], Code::OverLimit);
    assert!(codes[..8].iter().all(|c| *c == Code::Ok));
    let r = rls
        .codes(request("edge", vec![desc(&[("client", "n0")])]))
        .await;
    assert_eq!(r.2, [2], "the refused request spent nothing");

    // hits_addend is whatever Envoy's config makes it, a client's header
    // included (`HitsAddend.format`): any number is decided, never an
    // error. Above the limit, OVER_LIMIT and nothing spent; 0 spends
    // nothing (as in envoyproxy/ratelimit).
    for (hits, code) in [
        (u64::MAX, Code::OverLimit),
        (1 << 32, Code::OverLimit),
        (0, Code::Ok),
    ] {
        let mut costly = desc(&[("client", "h")]);
        costly.hits_addend = Some(UInt64Value { value: hits });
        let (overall, _, _) = rls.codes(request("edge", vec![costly])).await;
        assert_eq!(overall, code, "{hits}");
    }
    let h = rls.codes(request("edge", vec![desc(&[("client", "h")])]));
    assert_eq!(h.await.2, [2], "nothing spent before");

    for (rpu, unit) in [(0, 2), (5, 0), (5, 99)] {
        let mut bad = desc(&[("client", "o")]);
        bad.limit = Some(RateLimitOverride {
            requests_per_unit: rpu,
            unit,
        });
        let req = request("edge", vec![desc(&[("client", "p")]), bad]);
        let (overall, codes, _) = rls.codes(req).await;
        assert_eq!(
            (overall, codes[1]),
            (Code::OverLimit, Code::OverLimit),
            "{rpu} {unit}"
        );
    }
}

/// A call over the 1 MiB bound is denied (OVER_LIMIT), not refused with
/// an error: Envoy sends one when a client's headers are large (its header
/// limit raised, a header copied into several descriptors), and would let
/// the request through on an error. Counted; the server goes on. A
/// message that is no `RateLimitRequest` at all (no Envoy sends one) keeps
/// its error status, counted too.
#[tokio::test]
async fn an_oversized_call_is_denied_and_counted_and_the_server_goes_on() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    let huge = "x".repeat(2 << 20);
    let answer = rls
        .ask(request("edge", vec![desc(&[("client", &huge)])]))
        .await
        .expect("answered");
    assert_eq!(answer.overall_code(), Code::OverLimit);
    assert_eq!(request_errors(&rls, "too_large").await, 1);

    let status = rls.ask_raw(NotARequest { descriptors: 7 }).await;
    let status = status.expect_err("not a RateLimitRequest");
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(request_errors(&rls, "malformed").await, 1);
    let ok = rls
        .codes(request("edge", vec![desc(&[("client", "a")])]))
        .await;
    assert_eq!(ok.0, Code::Ok);
    assert_eq!(request_errors(&rls, "invalid").await, 0);
    // The oversized call was answered OVER_LIMIT, the malformed one an
    // error status.
    let metrics = rls.metrics().await;
    for line in [
        r#"ratekeeper_rls_requests_total{code="ok"} 1"#,
        r#"ratekeeper_rls_requests_total{code="over_limit"} 1"#,
        r#"ratekeeper_rls_requests_total{code="error"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

/// Field 2 (`descriptors`, a message) as a number: no RateLimitRequest.
#[derive(Clone, PartialEq, prost::Message)]
struct NotARequest {
    #[prost(uint64, tag = "2")]
    descriptors: u64,
}

/// `ratekeeper_rls_request_errors_total{reason}`.
async fn request_errors(rls: &rls_support::Rls, reason: &str) -> u64 {
    let line = format!("ratekeeper_rls_request_errors_total{{reason=\"{reason}\"}} ");
    let metrics = rls.metrics().await;
    let value = metrics.lines().find_map(|l| l.strip_prefix(line.as_str()));
    value.expect("the metric").parse().unwrap()
}

/// Entry values that are not UTF-8, as Envoy sends a client's raw header
/// bytes (`X-API-Key: \xff\xfe`): decided like any other value, each with
/// its own counter, where the whole call used to fail (INTERNAL) and Envoy
/// then let the request through unlimited. A key that is not UTF-8
/// matches no configured key (no limit); a value that is not UTF-8 takes
/// its key's default, nested ones included.
#[tokio::test]
async fn entries_that_are_not_utf8_are_decided_like_any_other() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    let raw = |value: &[u8]| raw_request("edge", &[(b"client", value)]);
    for remaining in [2, 1, 0] {
        let got = rls.codes_raw(raw(b"\xff\xfe")).await;
        assert_eq!(got, (Code::Ok, vec![Code::Ok], vec![remaining]));
    }
    assert_eq!(rls.codes_raw(raw(b"\xff\xfe")).await.0, Code::OverLimit);
    // Its neighbours are other keys: other bytes, the UTF-8 text that
    // looks like them, their escaped form.
    for other in [&b"\xff\xfd"[..], "ÿþ".as_bytes(), b"%FF%FE", b"\xff"] {
        let got = rls.codes_raw(raw(other)).await;
        assert_eq!(got, (Code::Ok, vec![Code::Ok], vec![2]), "{other:?}");
    }
    let login = raw_request("edge", &[(b"client", b"\xfe"), (b"path", b"/login")]);
    assert_eq!(rls.codes_raw(login).await.2, [1], "the nested login limit");
    let key = raw_request("edge", &[(b"client\xff", b"a")]);
    assert_eq!(
        rls.codes_raw(key).await,
        (Code::Ok, vec![Code::Ok], vec![0])
    );
    let unknown = raw_request("unknown", &[(b"client", b"\xff\xfe")]);
    assert_eq!(rls.codes_raw(unknown).await.0, Code::Ok);
    assert!(
        !rls.metrics().await.contains("%FF"),
        "a value in the metrics"
    );
}

/// Calls not decided as sent are logged, not only counted: a WARN line
/// naming the reason, the answer and the caller, never a value; and for a
/// burst, one line (the rest are counted in the next line's `unlogged`).
#[tokio::test]
async fn calls_not_decided_as_sent_are_logged_once_per_burst() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let grpc = support::free_port();
    let config = config_file(CONFIG);
    let child = support::binary::ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_LOG__FORMAT", "json")
        .env("RATEKEEPER_GRPC__LISTEN", format!("127.0.0.1:{grpc}"))
        .env("RATEKEEPER_RLS__CONFIG", &config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = support::binary::KillOnDrop(child);
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = BufReader::new(child.0.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let next = || lines.recv_timeout(std::time::Duration::from_secs(10));
    while !next()
        .expect("a startup line")
        .contains("ratekeeper listening")
    {}
    let url = format!("http://127.0.0.1:{grpc}");
    let mut client =
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(url)
            .await
            .unwrap();
    let secret = "value-never-logged";
    for _ in 0..3 {
        let bad = request("", vec![desc(&[("client", secret)])]);
        let status = client.should_rate_limit(bad).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
    let line = std::iter::from_fn(|| next().ok())
        .find(|l| l.contains("not decided as sent"))
        .expect("a log line");
    let log: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(log["level"], "WARN", "{line}");
    assert_eq!(log["reason"], "invalid", "{line}");
    assert_eq!(log["answer"], "an error status", "{line}");
    assert_eq!(log["unlogged"], 0, "{line}");
    assert!(
        log["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{line}"
    );
    assert!(!line.contains(secret), "{line}");
    // The two after it were not logged: a call that logs nothing of its
    // own comes next, so any line of theirs would come before its answer.
    let ok = request("edge", vec![desc(&[("client", "a")])]);
    client.should_rate_limit(ok).await.expect("answered");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let more: Vec<String> = lines.try_iter().collect();
    assert!(
        !more.iter().any(|l| l.contains("not decided as sent")),
        "{more:?}"
    );
}
