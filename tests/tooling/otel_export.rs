//! OpenTelemetry traces, the export's side: a collector that is down or
//! black-holed slows no check and what could not go is counted; sampling
//! at 0 makes no span; a micro-batched Redis call is one linked span; a
//! stop sends what is queued. The receiver and helpers are `otel.rs`'s.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::otel::{post, serve, span_counts, traceparent};
use crate::support;
use support::otlp::{Receiver, named};

/// A collector that accepts connections and never answers (black-holed),
/// and one that refuses them (down): checks keep their latency, nothing
/// waits for the exporter, and what could not go is counted.
#[tokio::test]
async fn a_black_holed_or_down_collector_never_slows_a_check() {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let black_holed = format!("http://{}", hole.local_addr().unwrap());
    let down = format!("http://127.0.0.1:{}", support::free_port());
    for (endpoint, protocol) in [
        (&black_holed, "grpc"),
        (&black_holed, "http/protobuf"),
        (&down, "grpc"),
    ] {
        let served = serve(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "16"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
            ],
            &[],
        );
        let client = reqwest::Client::new();
        let mut slowest = Duration::ZERO;
        for i in 0..300 {
            let started = Instant::now();
            let resp = client
                .post(format!("http://{}/v1/check", served.http))
                .json(&json!({"key": format!("k{i}"), "limit": 5, "window": "1h"}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            slowest = slowest.max(started.elapsed());
        }
        // A check that waited for an export would take its 3 s timeout.
        assert!(
            slowest < Duration::from_secs(1),
            "{endpoint} {protocol}: {slowest:?}"
        );
        let [exported, failed, dropped] = span_counts(&served.http).await;
        assert_eq!(exported, 0, "{endpoint} {protocol}");
        if endpoint == &black_holed {
            // 300 checks of 4 spans each, the first batch held for 3 s:
            // at most the queue and that batch are not dropped.
            assert!(dropped > 1000, "{endpoint} {protocol}: dropped {dropped}");
        } else {
            let until = Instant::now() + Duration::from_secs(10);
            while span_counts(&served.http).await[1] == 0 && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(
                span_counts(&served.http).await[1] > 0,
                "{endpoint}: nothing counted failed ({failed})"
            );
        }
    }
    drop(hole);
}

/// Sampling at 0 (`always_off`, which ignores the caller's flag): not one
/// span is made, for sampled callers or not.
#[tokio::test]
async fn with_sampling_at_zero_no_span_is_made() {
    let receiver = Receiver::start();
    let endpoint = format!("http://127.0.0.1:{}", receiver.grpc);
    let served = serve(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ],
        &[],
    );
    let tp = traceparent("5af7651916cd43dd8448eb211c80319c", "a7ad6b7169203331", true);
    for i in 0..50 {
        let body = json!({"key": format!("k{i}"), "limit": 5, "window": "1h"});
        assert_eq!(
            post(&served.http, "/v1/check", Some(&tp), body).await.0,
            200
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(span_counts(&served.http).await, [0, 0, 0]);
    assert!(receiver.spans().is_empty());
}

/// Checks that arrive while a Redis call is in flight share one call (the
/// micro-batcher): that call is one span of its own, which links to the
/// span of each sampled check it carried.
#[tokio::test]
async fn a_micro_batched_redis_call_is_one_span_linked_from_each_check() {
    let redis = support::RedisServer::start();
    let receiver = Receiver::start();
    let endpoint = format!("http://127.0.0.1:{}", receiver.grpc);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let served = serve(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        &[("RATEKEEPER_REDIS__URL", &url)],
    );
    let client = reqwest::Client::new();
    let mut batches = Vec::new();
    // Rounds of 64 checks at once, until the batcher has carried some.
    for _ in 0..20 {
        let calls = (0..64).map(|i| {
            let (client, http) = (client.clone(), served.http.clone());
            tokio::spawn(async move {
                client
                    .post(format!("http://{http}/v1/check"))
                    .json(&json!({"key": format!("k{i}"), "limit": 1000, "window": "1h"}))
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        });
        for call in calls.collect::<Vec<_>>() {
            assert_eq!(call.await.unwrap(), 200);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        batches = receiver
            .spans()
            .into_iter()
            .filter(|s| s["name"] == "redis batch")
            .collect();
        // A call that carried one check is a batch span too: wait for
        // one that several shared.
        if batches
            .iter()
            .any(|b| b["links"].as_array().unwrap().len() >= 2)
        {
            break;
        }
    }
    assert!(
        batches
            .iter()
            .any(|b| b["links"].as_array().unwrap().len() >= 2),
        "no call carried two checks in 20 rounds of 64: {batches:#?}"
    );
    let spans = receiver.spans();
    for batch in &batches {
        let links = batch["links"].as_array().unwrap();
        assert_eq!(batch["parent_span_id"], "", "a root of its own: {batch}");
        assert_eq!(
            links.len() as i64,
            batch["attributes"]["ratekeeper.batch_size"]
                .as_i64()
                .unwrap()
        );
        for link in links {
            let store = spans
                .iter()
                .find(|s| s["span_id"] == link["span_id"])
                .unwrap_or_else(|| panic!("a link to no span we got: {link}"));
            assert_eq!(store["name"], "POST /v1/check");
            assert_eq!(store["trace_id"], link["trace_id"]);
        }
    }
}

/// At a stop, what is queued is sent (within 3 s), and the export task
/// ends cleanly: a check's spans held back by a 60 s batch delay reach the
/// collector at SIGTERM, the process exits 0, and nothing panicked (the
/// task once polled its stop signal again after it answered).
#[tokio::test]
async fn a_stop_sends_the_queued_spans_and_exits_cleanly() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let receiver = Receiver::start();
    let endpoint = format!("http://127.0.0.1:{}", receiver.grpc);
    let mut child = support::binary::ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_LOG__FORMAT", "json")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let http = loop {
        let line = lines.next().expect("a startup line").unwrap();
        if line.contains("ratekeeper listening") {
            let json: Value = serde_json::from_str(&line).unwrap();
            break json["addr"].as_str().unwrap().to_string();
        }
    };
    let mut stderr = child.stderr.take().unwrap();
    let body = json!({"key": "k", "limit": 5, "window": "1h"});
    assert_eq!(post(&http, "/v1/check", None, body).await.0, 200);
    std::thread::sleep(Duration::from_millis(300));
    assert!(receiver.spans().is_empty(), "sent before the 60 s delay");
    let stopped = Instant::now();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    let mut errors = String::new();
    stderr.read_to_string(&mut errors).unwrap();
    assert!(status.success(), "{status}: {errors}");
    assert!(!errors.contains("panicked"), "{errors}");
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "{:?}",
        stopped.elapsed()
    );
    assert!(
        !named(&receiver.spans(), "POST /v1/check").is_empty(),
        "{:#?}",
        receiver.spans()
    );
}
