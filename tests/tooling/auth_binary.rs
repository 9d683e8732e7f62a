//! Bearer tokens and the real binary: a bad tokens file stops startup
//! (exit 64, naming the file and line, never the token); tokens never
//! reach a log line (at trace level), `/metrics`, a response (HTTP or
//! gRPC), the command line or the environment; without tokens, one
//! warning when listening beyond loopback.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support;

use support::binary::{KillOnDrop, ratekeeper};
use support::fresh_dir;

/// A running `ratekeeper serve` whose stdout and stderr are kept whole.
struct Service {
    child: KillOnDrop,
    output: Arc<Mutex<String>>,
    addr: String,
}

impl Service {
    fn start(listen: &str, env: &[(&str, &str)]) -> Service {
        let mut child = KillOnDrop(
            ratekeeper()
                .args(["serve", "--listen", listen])
                .env("RATEKEEPER_LOG__FORMAT", "json")
                .envs(env.iter().copied())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let output = Arc::new(Mutex::new(String::new()));
        let drain = |mut pipe: Box<dyn Read + Send>, output: Arc<Mutex<String>>| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    output
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        };
        drain(Box::new(child.0.stdout.take().unwrap()), output.clone());
        drain(Box::new(child.0.stderr.take().unwrap()), output.clone());
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = loop {
            let started = output
                .lock()
                .unwrap()
                .lines()
                .find(|l| l.contains("ratekeeper listening"))
                .map(str::to_string);
            if let Some(line) = started {
                let log: serde_json::Value = serde_json::from_str(&line).unwrap();
                let addr = log["addr"].as_str().unwrap().to_string();
                break addr.replace("0.0.0.0", "127.0.0.1");
            }
            assert!(
                Instant::now() < deadline,
                "no startup line: {}",
                output.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Service {
            child,
            output,
            addr,
        }
    }

    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Where the gRPC listener is (from its startup line).
    fn grpc_addr(&self) -> String {
        let output = self.output();
        let line = output
            .lines()
            .find(|l| l.contains("Envoy RLS gRPC listening"));
        let log: serde_json::Value = serde_json::from_str(line.expect("a gRPC line")).unwrap();
        log["grpc_addr"].as_str().unwrap().to_string()
    }

    /// One HTTP/1.1 request; returns the whole response, head and body.
    fn request(&self, method: &str, path: &str, token: Option<&str>) -> String {
        let body = r#"{"key":"k","limit":5,"window":"1m"}"#;
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }
}

fn status(response: &str) -> &str {
    &response[9..12]
}

/// Tokens unlikely to appear anywhere by chance, different on every run.
fn tokens() -> (String, String) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    (
        format!("tkc_{seed:x}{:x}", std::process::id()),
        format!("tka_{:x}{seed:x}", std::process::id()),
    )
}

#[test]
fn a_bad_tokens_file_stops_startup_naming_the_line_not_the_token() {
    let dir = fresh_dir("auth-startup");
    let (check, admin) = tokens();
    let file = dir.join("tokens");
    let cases = [
        (
            format!("# ok\ncheck {check}\nwrite {admin}\n"),
            "line 3: unknown scope",
        ),
        (
            format!("check {check}\nadmin {check}\n"),
            "line 2: the same token as line 1",
        ),
        // A token where the name goes is refused, never shown as a name.
        (
            format!("\ncheck {check} {admin}\n"),
            "line 2: a token's name is",
        ),
        (
            "check 0123456789\n".to_string(),
            "line 1: the token is 10 bytes",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&file, &text).unwrap();
        let out = ratekeeper()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("RATEKEEPER_AUTH__TOKENS_FILE", &file)
            .env("RATEKEEPER_LOG__LEVEL", "trace")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{text}");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(printed.contains(file.to_str().unwrap()), "{printed}");
        assert!(printed.contains(expected), "{expected} not in {printed}");
        for secret in [&check, &admin, &"0123456789".to_string()] {
            assert!(!printed.contains(&secret[..10]), "{printed}");
        }
    }
}

#[test]
fn an_unreadable_file_or_protect_metrics_alone_stops_startup_and_no_flag_takes_a_token() {
    let dir = fresh_dir("auth-startup-missing");
    let missing = dir.join("missing");
    let out = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_AUTH__TOKENS_FILE", &missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains(missing.to_str().unwrap()));
    let out = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_AUTH__PROTECT_METRICS", "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    // And there is no way to give a token itself on the command line.
    let help = ratekeeper().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_lowercase();
    assert!(!help.contains("token"), "{help}");
}

fn metrics(service: &Service, token: &str) -> String {
    service.request("GET", "/metrics", Some(token))
}

/// Waits until `/metrics` contains `line`; returns every scrape.
fn wait_metric(service: &Service, token: &str, line: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let text = metrics(service, token);
        let found = text.contains(line);
        seen.push(text);
        if found {
            return;
        }
        assert!(Instant::now() < deadline, "{line} not within 3 s: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Calls every kind of route with good, wrong, short and missing tokens;
/// returns the responses.
fn call_with_every_kind_of_token(service: &Service, check: &str, admin: &str) -> Vec<String> {
    let wrong = format!("{check}x");
    let calls: &[(&str, &str, Option<&str>, &str)] = &[
        ("POST", "/v1/check", Some(check), "200"),
        ("POST", "/v1/check", Some(admin), "200"),
        ("GET", "/v1/policies", Some(admin), "200"),
        ("GET", "/v1/policies", Some(check), "403"),
        ("GET", "/v1/auth/api", Some(check), "404"),
        ("POST", "/v1/check", Some(&wrong), "401"),
        ("POST", "/v1/check", Some(&check[..10]), "401"),
        ("POST", "/v1/check", None, "401"),
        ("GET", "/metrics", None, "401"),
        ("GET", "/healthz", Some(&wrong), "200"),
    ];
    let mut seen = Vec::new();
    for &(method, path, token, want) in calls {
        let response = service.request(method, path, token);
        assert_eq!(status(&response), want, "{method} {path}: {response}");
        seen.push(response);
    }
    seen
}

/// `ShouldRateLimit` with good, wrong, short, doubled, malformed and
/// missing tokens; returns every answer (status or response) as printed.
fn grpc_with_every_kind_of_token(service: &Service, check: &str, admin: &str) -> Vec<String> {
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    let bearer = |t: &str| format!("Bearer {t}");
    let calls: Vec<(Vec<String>, bool)> = vec![
        (vec![bearer(check)], true),
        (vec![bearer(admin)], true),
        (vec![bearer(&format!("{check}x"))], false),
        (vec![bearer(&check[..10])], false),
        (vec![bearer(check), bearer(check)], false),
        (vec![format!("Bearer {check},{admin}")], false),
        (vec![], false),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let addr = format!("http://{}", service.grpc_addr());
        let mut client = RateLimitServiceClient::connect(addr).await.unwrap();
        let mut seen = Vec::new();
        for (values, ok) in calls {
            let mut request = tonic::Request::new(RateLimitRequest {
                domain: "edge".into(),
                ..Default::default()
            });
            for value in &values {
                let value = value.parse().unwrap();
                request.metadata_mut().append("authorization", value);
            }
            let answer = client.should_rate_limit(request).await;
            assert_eq!(answer.is_ok(), ok, "{}: {answer:?}", values.len());
            seen.push(format!("{answer:?}"));
        }
        seen
    })
}

/// Bad versions of `file`, one naming a real token on a bad line, kept
/// out (and re-judged on SIGHUP); then `good` back in.
fn reload_bad_files(
    service: &Service,
    file: &Path,
    good: &str,
    check: &str,
    admin: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    std::fs::write(file, format!("write {admin}\ncheck {check}\n")).unwrap();
    let errors = |n| format!(r#"ratekeeper_reloads_total{{file="tokens",result="error"}} {n}"#);
    wait_metric(service, admin, &errors(1), &mut seen);
    std::fs::write(file, format!("check {check} {admin}\n")).unwrap();
    wait_metric(service, admin, &errors(2), &mut seen);
    // SIGHUP re-judges it (and logs it again).
    assert!(support::send_signal(
        service.child.0.id(),
        support::Signal::SIGHUP
    ));
    wait_metric(service, check, &errors(3), &mut seen);
    std::fs::write(file, format!("# fixed\n{good}")).unwrap();
    let ok = r#"ratekeeper_reloads_total{file="tokens",result="ok"} 2"#;
    wait_metric(service, check, ok, &mut seen);
    let last = seen.last().unwrap();
    for reason in ["missing", "invalid", "scope"] {
        let line = format!("ratekeeper_auth_failures_total{{reason=\"{reason}\"}}");
        assert!(last.contains(&line), "{line} not in {last}");
    }
    seen
}

#[test]
fn tokens_never_appear_in_logs_metrics_responses_or_the_process() {
    let dir = fresh_dir("auth-leak");
    let (check, admin) = tokens();
    let file = dir.join("tokens");
    let good = format!("check {check}\nadmin {admin}\n");
    std::fs::write(&file, &good).unwrap();
    let service = Service::start(
        "127.0.0.1:0",
        &[
            ("RATEKEEPER_AUTH__TOKENS_FILE", file.to_str().unwrap()),
            ("RATEKEEPER_AUTH__PROTECT_METRICS", "true"),
            ("RATEKEEPER_LOG__LEVEL", "trace"),
            ("RATEKEEPER_POLICIES__POLL_INTERVAL", "1h"),
            ("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0"),
        ],
    );
    let mut seen = call_with_every_kind_of_token(&service, &check, &admin);
    seen.extend(grpc_with_every_kind_of_token(&service, &check, &admin));
    seen.extend(reload_bad_files(&service, &file, &good, &check, &admin));

    let pid = service.child.0.id();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let output = service.output();
    // The grep means something only if the service logged everything.
    assert!(output.contains(r#""level":"TRACE""#));
    assert!(output.contains("tokens file rejected"), "{output}");
    assert!(output.contains("line 1: unknown scope"), "{output}");
    // h2 traced the gRPC calls' frames (headers included, were it to log them).
    assert!(output.contains(r#""target":"h2"#), "{output}");
    let mut places = vec![
        ("stdout and stderr", output),
        ("cmdline", String::from_utf8_lossy(&cmdline).into_owned()),
        ("environ", String::from_utf8_lossy(&environ).into_owned()),
    ];
    places.extend(seen.into_iter().map(|r| ("a response", r)));
    for token in [&check, &admin] {
        // The whole token, and its first 10 bytes (the type tag and 6 more).
        for needle in [token.as_str(), &token[..10]] {
            for (place, text) in &places {
                assert!(!text.contains(needle), "{needle} found in {place}:\n{text}");
            }
        }
    }
}

/// Counts the lines of the no-tokens warning logged by a service on `listen`.
fn warnings_listening_on(listen: &str) -> usize {
    let service = Service::start(listen, &[]);
    assert_eq!(status(&service.request("POST", "/v1/check", None)), "200");
    service
        .output()
        .lines()
        .filter(|l| l.contains("no auth.tokens_file"))
        .count()
}

#[test]
fn without_tokens_one_warning_when_listening_beyond_loopback() {
    assert_eq!(warnings_listening_on("127.0.0.1:0"), 0);
    assert_eq!(warnings_listening_on("0.0.0.0:0"), 1);
}

/// The shipped example holds placeholders, not tokens: as shipped it stops
/// startup naming the first one; filled in, it loads.
#[test]
fn the_example_tokens_file_is_a_template() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tokens.example");
    let out = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RATEKEEPER_AUTH__TOKENS_FILE", &example)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("a placeholder, not a token"), "{stderr}");

    let (check, admin) = tokens();
    let text = std::fs::read_to_string(&example)
        .unwrap()
        .replace("<nginx-check-token>", &format!("{check}n"))
        .replace("<app-check-token>", &check)
        .replace("<admin-token>", &admin);
    let file = fresh_dir("auth-example").join("tokens");
    std::fs::write(&file, text).unwrap();
    let service = Service::start(
        "127.0.0.1:0",
        &[("RATEKEEPER_AUTH__TOKENS_FILE", file.to_str().unwrap())],
    );
    assert_eq!(
        status(&service.request("POST", "/v1/check", Some(&check))),
        "200"
    );
    assert!(
        service
            .output()
            .contains("loaded 3 bearer tokens (2 check, 1 admin)")
    );
}
