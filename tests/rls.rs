//! The Envoy RLS v3 gRPC server through a real tonic client (the client
//! side of envoy-types), on the embedded store and on a real Redis.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use ratekeeper::app::Application;
use ratekeeper::config::Settings;
use support::RedisServer;
use tonic::transport::Channel;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 3 }
    descriptors:
      - key: path
        value: /login
        rate_limit: { unit: hour, requests_per_unit: 2, name: login }
  - key: client
    value: vip
    rate_limit: { unlimited: true, name: vip, replaces: [{ name: global }] }
  - key: global
    rate_limit: { unit: hour, requests_per_unit: 5, name: global }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 100, algorithm: sliding_window }
"#;

struct Rls {
    client: RateLimitServiceClient<Channel>,
    http: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

fn config_file(text: &str) -> PathBuf {
    let dir = support::fresh_dir("rls");
    let path = dir.join("edge.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn rls_settings(redis: Option<&str>, config: PathBuf) -> Settings {
    let mut settings = support::settings(redis);
    settings.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
    settings.rls_config = Some(config);
    settings
}

async fn start(settings: Settings) -> Rls {
    let app = Application::build(settings).await.expect("app builds");
    let addr: SocketAddr = app.grpc_addr().expect("grpc listens");
    let http = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("grpc connects");
    Rls {
        client,
        http,
        stop: Some(stop),
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

impl Rls {
    async fn ask(&self, req: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .clone()
            .should_rate_limit(req)
            .await
            .map(|r| r.into_inner())
    }

    async fn codes(&self, req: RateLimitRequest) -> (Code, Vec<Code>, Vec<u32>) {
        let r = self.ask(req).await.expect("answered");
        (
            r.overall_code(),
            r.statuses.iter().map(|s| s.code()).collect(),
            r.statuses.iter().map(|s| s.limit_remaining).collect(),
        )
    }
}

#[tokio::test]
async fn statuses_nesting_hits_addend_and_override() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    use Code::{Ok, OverLimit as Over};

    // Per-descriptor statuses, in order; nested and key-only matches.
    let r = rls
        .ask(request(
            "edge",
            vec![
                desc(&[("client", "a")]),
                desc(&[("client", "a"), ("path", "/login")]),
                desc(&[("client", "a"), ("path", "/other")]),
                desc(&[("nope", "x")]),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(r.overall_code(), Ok);
    let s = &r.statuses;
    assert_eq!(s.len(), 4);
    assert_eq!((s[0].limit_remaining, s[1].limit_remaining), (2, 1));
    let login = s[1].current_limit.as_ref().unwrap();
    assert_eq!(
        (login.name.as_str(), login.requests_per_unit, login.unit),
        ("login", 2, 3)
    );
    assert!(s[2].current_limit.is_none() && s[3].current_limit.is_none());
    assert!(s[1].duration_until_reset.as_ref().unwrap().seconds > 0);
    let headers: Vec<&str> = r
        .response_headers_to_add
        .iter()
        .map(|h| h.key.as_str())
        .collect();
    assert!(
        headers.contains(&"ratelimit") && headers.contains(&"ratelimit-policy"),
        "{headers:?}"
    );

    // All or nothing: `login` has 1 left, so 2 hits deny both and spend neither.
    let mut two = request(
        "edge",
        vec![
            desc(&[("client", "a")]),
            desc(&[("client", "a"), ("path", "/login")]),
        ],
    );
    two.hits_addend = 2;
    assert_eq!(rls.codes(two).await, (Over, vec![Ok, Over], vec![2, 1]));
    // Per-descriptor hits_addend overrides the request's.
    let mut one = desc(&[("client", "b")]);
    one.hits_addend = Some(UInt64Value { value: 3 });
    assert_eq!(
        rls.codes(request("edge", vec![one.clone()])).await,
        (Ok, vec![Ok], vec![0])
    );
    assert_eq!(
        rls.codes(request("edge", vec![one])).await,
        (Over, vec![Over], vec![0])
    );

    // The override bypasses the config.
    let mut o = desc(&[("client", "c")]);
    o.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 1,
    });
    assert_eq!(rls.codes(request("edge", vec![o.clone()])).await.0, Ok);
    assert_eq!(rls.codes(request("edge", vec![o])).await.0, Over);
}

#[tokio::test]
async fn replaces_shadow_duplicates_and_unknown_domain() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    use Code::Ok;

    // `vip` (unlimited) replaces `global`; alone, `global` counts.
    let both = || {
        request(
            "edge",
            vec![desc(&[("global", "g")]), desc(&[("client", "vip")])],
        )
    };
    for _ in 0..7 {
        assert_eq!(
            rls.codes(both()).await,
            (Ok, vec![Ok, Ok], vec![0, u32::MAX])
        );
    }
    assert_eq!(
        rls.codes(request("edge", vec![desc(&[("global", "g")])]))
            .await
            .2,
        [4]
    );

    // Shadow mode decides and counts, but answers OK and never blocks others.
    for i in 0..3 {
        let r = rls
            .codes(request(
                "edge",
                vec![desc(&[("shadow", "s")]), desc(&[("client", "d")])],
            ))
            .await;
        assert_eq!(r.0, Ok, "call {i}");
        assert_eq!(r.2[1], 2 - i as u32);
    }

    // The same descriptor twice is one counter, spent once.
    let twice = request(
        "edge",
        vec![desc(&[("client", "e")]), desc(&[("client", "e")])],
    );
    assert_eq!(rls.codes(twice).await, (Ok, vec![Ok, Ok], vec![2, 2]));

    // Metrics name the domain and the config's limit, never a value.
    let metrics = reqwest::get(format!("{}/metrics", rls.http))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains(r#"policy="rls.edge""#), "{metrics}");
    assert!(metrics.contains(r#"limit="global""#));
    assert!(!metrics.contains("client=e") && !metrics.contains("\"g\""));

    // Unknown domain and empty descriptors: OK, no limits.
    assert_eq!(
        rls.codes(request("other", vec![desc(&[("client", "a")])]))
            .await,
        (Ok, vec![Ok], vec![0])
    );
    assert_eq!(
        rls.codes(request("edge", vec![])).await,
        (Ok, vec![], vec![])
    );
}

#[tokio::test]
async fn bad_input_gets_invalid_argument_and_the_server_goes_on() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    let many: Vec<(String, String)> = (0..1000).map(|i| (format!("k{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut negative = desc(&[("client", "a")]);
    negative.is_negative_hits = true;
    let cases = vec![
        request("edge", vec![desc(&[("", "x")])]),
        request("edge", vec![desc(&many)]),
        request("edge", vec![desc(&[])]),
        request("edge", (0..65).map(|_| desc(&[("client", "a")])).collect()),
        request("", vec![desc(&[("client", "a")])]),
        request("edge", vec![negative]),
    ];
    for (i, req) in cases.into_iter().enumerate() {
        let status = rls.ask(req).await.expect_err("refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "case {i}: {status:?}"
        );
        assert!(!status.message().is_empty());
    }
    let ok = rls
        .codes(request("edge", vec![desc(&[("client", "a")])]))
        .await;
    assert_eq!(ok.0, Code::Ok);
}

#[tokio::test]
async fn a_bad_config_file_stops_startup_naming_the_file() {
    let path = config_file(
        "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
    );
    let Err(error) = Application::build(rls_settings(None, path.clone())).await else {
        panic!("a bad config must not start");
    };
    let message = error.to_string();
    assert!(
        message.contains(path.to_str().unwrap()) && message.contains("fortnight"),
        "{message}"
    );
}

/// Two instances on one Redis: 400 concurrent calls against a limit of 100
/// admit exactly 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_stay_exact() {
    let redis = RedisServer::start();
    let path = config_file(CONFIG);
    let a = start(rls_settings(Some(&redis.url()), path.clone())).await;
    let b = start(rls_settings(Some(&redis.url()), path)).await;
    let mut tasks = Vec::new();
    for i in 0..400 {
        let client = if i % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        tasks.push(tokio::spawn(async move {
            let mut client = client;
            let req = request("edge", vec![desc(&[("tenant", "t1")])]);
            client
                .should_rate_limit(req)
                .await
                .unwrap()
                .into_inner()
                .overall_code()
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap() == Code::Ok {
            ok += 1;
        }
    }
    assert_eq!(ok, 100);
}

/// A store outage answers by the failure policy: open gives OK, closed
/// gives OVER_LIMIT.
#[tokio::test]
async fn store_outage_follows_the_failure_mode() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.kill();
    for (mode, code) in [("open", Code::Ok), ("closed", Code::OverLimit)] {
        let mut settings = rls_settings(Some(&url), config_file(CONFIG));
        settings.failure.mode = match mode {
            "open" => ratekeeper::domain::FailureMode::Open,
            _ => ratekeeper::domain::FailureMode::Closed,
        };
        let rls = start(settings).await;
        let started = std::time::Instant::now();
        let r = rls
            .codes(request("edge", vec![desc(&[("client", "z")])]))
            .await;
        assert_eq!(r.0, code, "{mode}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{mode}"
        );
    }
}

/// `rls.config` is reloaded on change; a broken edit keeps the config in force.
#[tokio::test]
async fn the_config_is_hot_reloaded() {
    let path = config_file(CONFIG);
    let mut settings = rls_settings(None, path.clone());
    settings.policies_poll_interval = std::time::Duration::from_millis(50);
    let rls = start(settings).await;
    let ask = || request("edge", vec![desc(&[("global", "reload")])]);
    assert_eq!(rls.codes(ask()).await.2, [4]);
    std::fs::write(&path, "domain: edge\ndescriptors: [{ key: unknown_key: x\n").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        rls.codes(ask()).await.2,
        [3],
        "a broken file keeps the old config"
    );
    let changed = CONFIG.replace(
        "requests_per_unit: 5, name: global",
        "requests_per_unit: 50, name: global",
    );
    std::fs::write(&path, changed).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let remaining = rls.codes(ask()).await.2[0];
        if remaining > 40 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not reloaded");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// What a client's HTTP request can choose (values, hence how many
/// descriptors match, and the size of the call) never switches limiting
/// off: a descriptor that cannot be evaluated answers OVER_LIMIT, since
/// Envoy fails open on an error by default.
#[tokio::test]
async fn client_controlled_input_is_limited_never_refused() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
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

#[tokio::test]
async fn an_oversized_call_is_refused_and_the_server_goes_on() {
    let rls = start(rls_settings(None, config_file(CONFIG))).await;
    let huge = "x".repeat(2 << 20);
    let status = rls
        .ask(request("edge", vec![desc(&[("client", &huge)])]))
        .await
        .expect_err("too large");
    assert!(
        matches!(
            status.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        ),
        "{status:?}"
    );
    let ok = rls
        .codes(request("edge", vec![desc(&[("client", "a")])]))
        .await;
    assert_eq!(ok.0, Code::Ok);
}
