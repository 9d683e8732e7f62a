//! The ratekeeper pod of `deploy/kubernetes`, run as the real binary: its
//! environment exactly as the Deployment sets it, its ConfigMaps and
//! Secret laid out as the kubelet mounts them (`..data` symlinks), and the
//! overlay's Redis as a redis-server started with the overlay's arguments.
//! Only the listen ports become free loopback ones (another process may
//! hold 8080 here); `policies check` loads the configuration with them
//! unchanged.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use serde_norway::Value;
use sha2::{Digest, Sha256};

use crate::kubernetes_support;
use crate::rls_support;
use crate::support;

use kubernetes_support::{self as k8s, Pod};
use support::binary::{KillOnDrop, ratekeeper};
use support::{RedisServer, fresh_dir};

fn render(dir: &str) -> Vec<(PathBuf, Value)> {
    k8s::render(&k8s::root().join(dir))
}

#[test]
fn every_variable_is_configuration_the_loader_accepts_and_the_policies_pass_check() {
    for dir in ["base", "overlays/with-redis"] {
        let pod = Pod::lay_out(&render(dir), &fresh_dir("k8s-env"));
        for (name, _) in &pod.env {
            // Any other RATEKEEPER_* would be ignored as not configuration,
            // so a misspelt separator would go unnoticed: the shape first.
            let rest = name
                .strip_prefix("RATEKEEPER_")
                .unwrap_or_else(|| panic!("{name}"));
            let (section, key) = rest.split_once("__").unwrap_or_else(|| panic!("{name}"));
            let upper =
                |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            assert!(
                upper(section) && upper(key),
                "{name}: not RATEKEEPER_<SECTION>__<KEY>"
            );
        }
        // `policies check` loads the whole configuration first: a bad key
        // or value (listen addresses included) would exit 64 before it.
        let policies = pod.var("RATEKEEPER_POLICIES__FILE").to_string();
        let out = ratekeeper()
            .args(["policies", "check", &policies])
            .envs(pod.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{dir}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(": ok: "), "{stdout}");

        // The same with one key misspelt is refused, naming it.
        let mut env = pod.env.clone();
        env[0].0.push('S');
        let out = ratekeeper()
            .args(["policies", "check", &policies])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        let key = env[0].0["RATEKEEPER_".len()..]
            .replace("__", ".")
            .to_lowercase();
        assert!(stderr.contains(&format!("{key}: unknown key")), "{stderr}");
    }
}

/// `ratekeeper serve` as the pod runs it, on free loopback ports.
fn spawn(pod: &Pod) -> KillOnDrop {
    let child = ratekeeper()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .envs(pod.env.iter().map(|(k, v)| (k, v)))
        .env("RATEKEEPER_GRPC__LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// The pod with the overlay's Redis started (with the Deployment's own
/// arguments) and `RATEKEEPER_REDIS__URL`, which names its Service, moved
/// to it.
fn pod_with_redis(resources: &[(PathBuf, Value)]) -> (Pod, RedisServer) {
    let mut pod = Pod::lay_out(resources, &fresh_dir("k8s-pod"));
    let redis_pod = &k8s::find(resources, "Deployment", "redis")["spec"]["template"];
    let container = &redis_pod["spec"]["containers"][0];
    assert_eq!(container["command"][0].as_str(), Some("redis-server"));
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let redis = RedisServer::start_with(&args);
    let url = pod.var("RATEKEEPER_REDIS__URL").to_string();
    let (host, port) = url
        .strip_prefix("redis://")
        .unwrap()
        .split_once(':')
        .unwrap();
    let service = &k8s::find(resources, "Service", host)["spec"];
    let labels = k8s::strings(&redis_pod["metadata"]["labels"]);
    assert!(
        k8s::selects(&service["selector"], &labels),
        "Service {host} misses the Redis pod"
    );
    let ports = service["ports"].as_sequence().unwrap();
    let served = ports
        .iter()
        .find(|p| p["port"].as_u64().map(|p| p.to_string()) == Some(port.into()));
    let target =
        served.unwrap_or_else(|| panic!("Service {host} has no port {port}"))["targetPort"]
            .as_str()
            .unwrap();
    let container_ports = container["ports"].as_sequence().unwrap();
    assert!(
        container_ports.iter().any(
            |p| p["name"].as_str() == Some(target) && p["containerPort"].as_u64() == Some(6379)
        )
    );
    pod.set(
        "RATEKEEPER_REDIS__URL",
        &format!("redis://127.0.0.1:{}", redis.port),
    );
    (pod, redis)
}

/// The exit of `child`, which must come within 10 s.
fn exit_of(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "still running after 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_shipped_tokens_secret_is_refused_until_its_placeholders_are_replaced() {
    let (pod, _redis) = pod_with_redis(&render("overlays/with-redis"));
    let mut child = spawn(&pod);
    let status = exit_of(&mut child.0);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(64), "{stderr}");
    let tokens = &pod.files("tokens")["tokens"];
    let line = tokens.lines().position(|l| l.contains('<')).unwrap() + 1;
    assert!(
        stderr.contains(pod.var("RATEKEEPER_AUTH__TOKENS_FILE")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("line {line}: a placeholder")),
        "{stderr}"
    );
}

/// What the docs tell a user to do: a token of their own (64 hex digits)
/// in place of each `<...>`. Returns the file and the tokens by scope.
fn filled_in(tokens: &str) -> (String, Vec<(String, String)>) {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new();
    let mut text = String::new();
    let mut made = Vec::new();
    for (n, line) in tokens.lines().enumerate() {
        match (line.find('<'), line.find('>')) {
            (Some(start), Some(end)) => {
                let token: String = (0..4)
                    .map(|i| format!("{:016x}", random.hash_one((n, i))))
                    .collect();
                made.push((line[..start].trim().to_string(), token.clone()));
                text.push_str(&format!("{}{token}{}\n", &line[..start], &line[end + 1..]));
            }
            _ => text.push_str(&format!("{line}\n")),
        }
    }
    (text, made)
}

/// The startup lines up to "ratekeeper listening": (HTTP address, gRPC
/// address, the listening line). The rest of the log is drained.
fn started(child: &mut KillOnDrop) -> (String, String, serde_json::Value) {
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut grpc = None;
    let listening = loop {
        let line = lines.next().expect("a startup line").unwrap();
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        if let Some(addr) = json["grpc_addr"].as_str() {
            grpc = Some(addr.to_string());
        }
        if line.contains("ratekeeper listening") {
            break json;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let http = listening["addr"].as_str().unwrap().to_string();
    (http, grpc.expect("the gRPC listener's line"), listening)
}

#[tokio::test]
async fn the_overlay_pod_answers_its_probes_checks_and_envoy_against_its_redis() {
    let resources = render("overlays/with-redis");
    let (pod, _redis) = pod_with_redis(&resources);
    let (tokens, made) = filled_in(&pod.files("tokens")["tokens"]);
    pod.update("tokens", &[("tokens".to_string(), tokens)].into());
    let token = |scope: &str| made.iter().find(|(s, _)| s == scope).unwrap().1.clone();
    let mut child = spawn(&pod);
    let (http, grpc, listening) = started(&mut child);
    assert_eq!(listening["store"], "redis", "{listening}");

    // Each probe's path, on the port server.listen gives (checked against
    // the Deployment's ports by tests/tooling/kubernetes.rs), answers 200: /readyz
    // only once Redis answers.
    let (_, container) = ratekeeper_container(&resources);
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let path = container[probe]["httpGet"]["path"].as_str().unwrap();
        let (status, _) = raw_get(&http, path, None);
        assert_eq!(status, 200, "{probe} {path}");
    }

    // The ConfigMap's policies are the ones in force, and checks need a token.
    let admin = format!("Bearer {}", token("admin"));
    let policies = &pod.files("policies")["policies.toml"];
    assert_eq!(policies_sha(&http, &admin), sha256(policies));
    let client = reqwest::Client::new();
    let check = |auth: &str| {
        let request = client.post(format!("http://{http}/v1/check"));
        let request = request.json(&serde_json::json!({"policy": "api", "key": "k_1"}));
        request.header("authorization", auth).send()
    };
    assert_eq!(check("").await.unwrap().status(), 401);
    let check_token = format!("Bearer {}", token("check"));
    let checked = check(&check_token).await.unwrap();
    assert_eq!(checked.status(), 200);
    let body: serde_json::Value = checked.json().await.unwrap();
    assert_eq!(body["allowed"], true, "{body}");
    assert_eq!(body["degraded"], false, "{body}");

    // Envoy's rate limit service answers from the ConfigMap's rls.yaml
    // (domain edge), for the gateway's token only.
    envoy_asks(&grpc, &token("check")).await;

    updates_reach_the_running_pod(&pod, &http, &admin);
    assert_eq!(check(&check_token).await.unwrap().status(), 200);
}

/// A ConfigMap update (the kubelet's `..data` swap) is in force within
/// seconds; applying the Secret's template again (placeholders back) is
/// refused by the running pod, which keeps its tokens.
fn updates_reach_the_running_pod(pod: &Pod, http: &str, admin: &str) {
    let mut next = pod.files("policies").clone();
    let added = "\n[policies.k8s]\nlimits = [ { name = \"n\", limit = 1, window = \"1s\" } ]\n";
    next.get_mut("policies.toml").unwrap().push_str(added);
    pod.update("policies", &next);
    let sha = sha256(&next["policies.toml"]);
    let limit = Duration::from_secs(5);
    support::wait_until(limit, "the updated ConfigMap in force", || {
        policies_sha(http, admin) == sha
    });
    pod.update("tokens", pod.files("tokens"));
    let refused = "ratekeeper_reloads_total{file=\"tokens\",result=\"error\"}";
    support::wait_until(limit, "the placeholder version refused", || {
        metric(http, refused) >= 1.0
    });
    assert_eq!(
        policies_sha(http, admin),
        sha,
        "the admin token still works"
    );
}

fn ratekeeper_container(resources: &[(PathBuf, Value)]) -> (&Value, &Value) {
    let spec = &k8s::find(resources, "Deployment", "ratekeeper")["spec"]["template"]["spec"];
    (spec, &spec["containers"][0])
}

fn sha256(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// GET /v1/policies's sha256, over a plain blocking connection.
fn policies_sha(http: &str, admin: &str) -> String {
    let (_, body) = raw_get(http, "/v1/policies", Some(admin));
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json["sha256"].as_str().unwrap_or_default().to_string()
}

/// One series of /metrics; 0 when absent.
fn metric(http: &str, series: &str) -> f64 {
    let (_, text) = raw_get(http, "/metrics", None);
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '));
    value.map_or(0.0, |v| v.parse().unwrap())
}

/// One GET on its own connection: (status, body).
fn raw_get(http: &str, path: &str, authorization: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {http}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

/// One ShouldRateLimit call as Envoy makes it with the example's
/// descriptors, with and without the gateway's token.
async fn envoy_asks(grpc: &str, token: &str) {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}")).unwrap();
    let client = RateLimitServiceClient::new(channel.connect().await.expect("grpc connects"));
    let ask = |auth: Option<String>| {
        let descriptors = vec![rls_support::desc(&[("api_key", "k_1")])];
        let mut request = tonic::Request::new(rls_support::request("edge", descriptors));
        if let Some(auth) = auth {
            request
                .metadata_mut()
                .insert("authorization", auth.parse().unwrap());
        }
        let mut client = client.clone();
        async move { client.should_rate_limit(request).await }
    };
    let refused = ask(None).await.expect_err("no token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let answer = ask(Some(format!("Bearer {token}")))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
    let limit = answer.statuses[0]
        .current_limit
        .as_ref()
        .expect("the api_key limit");
    assert_eq!(limit.requests_per_unit, 100, "{answer:?}");
}
