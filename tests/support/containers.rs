//! Faults between hosts (issue 15, part 3): Redis and ratekeeper each in a
//! container of its own on a user-defined network, so a fault is a real
//! network event (an interface removed, a host gone) rather than a process
//! on loopback. Helpers shared by `tests/containers/container_partition.rs`,
//! `tests/containers/container_sentinel.rs` and `tests/containers/container_cluster.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::docker::{Container, Network, docker_ok, image, serving};
use super::{Outage, Sample, TestApp, unique_key};

/// The Redis stand-in image (tests/docker/redis.Dockerfile).
pub const REDIS_IMAGE: &str = "redis:7.2-alpine";
/// `redis.timeout`: the default, which every container test keeps.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(100);
/// The bound on any answer: the Redis timeout plus this.
pub const SLACK: Duration = Duration::from_millis(50);

/// The ratekeeper image, pinned by id right after it was built: the tag
/// `ratekeeper:latest` is shared with other checkouts, which may rebuild
/// it while these tests run.
pub fn ratekeeper_image() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| docker_ok(&["image", "inspect", "--format", "{{.Id}}", image()]))
        .clone()
}

/// A Redis server on `network` (no persistence), with `extra` arguments.
pub fn redis(what: &str, network: &Network, extra: &[&str]) -> Container {
    let mut args = vec![
        "--network",
        network.name.as_str(),
        REDIS_IMAGE,
        "redis-server",
    ];
    args.extend_from_slice(&["--save", "", "--appendonly", "no"]);
    args.extend_from_slice(extra);
    let container = Container::run(what, &args);
    wait_answering(&container, 6379);
    container
}

/// `redis-cli -p PORT ARGS` inside `container`; "" if it failed.
pub fn cli(container: &Container, port: u16, args: &[&str]) -> String {
    let port = port.to_string();
    let mut all = vec!["redis-cli", "-p", &port];
    all.extend_from_slice(args);
    container.exec(&all)
}

/// Waits up to 20 s for `container` to answer PING on `port`.
pub fn wait_answering(container: &Container, port: u16) {
    wait(
        Duration::from_secs(20),
        &format!("{} answers PING", container.name),
        || cli(container, port, &["ping"]) == "PONG",
    );
}

/// Polls `done` every 100 ms; panics naming `what` after `limit`.
pub fn wait(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// ratekeeper in a container on `network`, configured only by `env`
/// (`RATEKEEPER_*=...`), its port 8080 published on a free loopback port;
/// returns once `/readyz` says 200 there, with a client for it.
pub async fn ratekeeper(network: &Network, env: &[String]) -> (Container, Arc<TestApp>) {
    let image = ratekeeper_image();
    let mut args = vec!["--network", network.name.as_str(), "-p", "127.0.0.1::8080"];
    for variable in env {
        args.extend_from_slice(&["-e", variable]);
    }
    args.push(&image);
    let container = Container::run("rk", &args);
    let base = serving(&container);
    let app = Arc::new(TestApp::remote(base));
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.get("/readyz").await.status() != 200 {
        assert!(
            Instant::now() < deadline,
            "ratekeeper never ready: {}\n{}",
            app.get("/readyz").await.text().await.unwrap(),
            container.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (container, app)
}

/// A fixed-window check of `limit` per day on `key`: the rounds count
/// exactly on the wall clock, and the window's end is epoch-aligned (an
/// hour's could fall inside one).
pub fn body(key: &str, limit: u64) -> Value {
    json!({"key": key, "limit": limit, "window": "1d", "algorithm": "fixed_window"})
}

/// Callers at once in an exactness round, and the limit they share.
const CALLERS: usize = 30;
const EXACT_LIMIT: u64 = 10;

/// One exactness round: 30 parallel callers on `key` (fresh) of limit 10.
/// `Ok` when exactly 10 were allowed and none was degraded; otherwise what
/// they got.
pub async fn exact_round(app: &Arc<TestApp>, key: &str) -> Result<(), String> {
    let calls: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (app, body) = (app.clone(), body(key, EXACT_LIMIT));
            tokio::spawn(async move { app.check(body).await })
        })
        .collect();
    let (mut allowed, mut degraded, mut failed) = (0, 0, 0);
    for call in calls {
        let (status, answer) = call.await.unwrap();
        failed += usize::from(status != 200);
        degraded += usize::from(answer["degraded"] != false);
        allowed += usize::from(answer["allowed"] == true);
    }
    if failed == 0 && degraded == 0 && allowed == EXACT_LIMIT as usize {
        Ok(())
    } else {
        Err(format!(
            "{allowed} allowed, {degraded} degraded, {failed} not 200"
        ))
    }
}

/// Exactness rounds back to back, each on a fresh key from `key`, from
/// `since` until one is exact: the time from `since` to the end of that
/// round; after `limit`, what the last round got.
pub async fn exact_again_on(
    app: &Arc<TestApp>,
    key: impl Fn() -> String,
    since: Instant,
    limit: Duration,
) -> Result<Duration, String> {
    loop {
        let round = exact_round(app, &key()).await;
        let at = since.elapsed();
        match round {
            Ok(()) => return Ok(at),
            Err(e) if at > limit => return Err(format!("still not exact {at:?} after: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// [`exact_again_on`] any fresh key.
pub async fn exact_again(
    app: &Arc<TestApp>,
    since: Instant,
    limit: Duration,
) -> Result<Duration, String> {
    exact_again_on(app, || unique_key("exact"), since, limit).await
}

/// The slowest answer of `samples`, and that every one of them was a 200
/// within `REDIS_TIMEOUT + SLACK`, saying which were not.
pub fn assert_bounded(samples: &[Sample], since: Instant) -> Duration {
    let bound = REDIS_TIMEOUT + SLACK;
    let failed: Vec<_> = samples.iter().filter(|s| s.status != 200).collect();
    assert!(
        failed.is_empty(),
        "{} checks were not answered 200: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    let slow: Vec<String> = samples
        .iter()
        .filter(|s| s.latency() > bound)
        .map(|s| {
            let sent = s.sent.checked_duration_since(since).map_or_else(
                || format!("-{}", (since - s.sent).as_millis()),
                |d| d.as_millis().to_string(),
            );
            format!(
                "{} ms (key {}, sent at {sent} ms, degraded: {})",
                s.latency().as_millis(),
                s.body,
                s.degraded
            )
        })
        .collect();
    assert!(
        slow.is_empty(),
        "{} of {} answers slower than {bound:?} (times from the fault): {slow:?}",
        slow.len(),
        samples.len()
    );
    samples
        .iter()
        .map(Sample::latency)
        .max()
        .unwrap_or_default()
}

/// Sends one command to the Redis (or sentinel) at `ip:port` straight from
/// the host (it reaches container addresses on a bridge network); the
/// reply's strings in order, arrays flattened; empty if no whole reply came
/// within 1 s. Cheap enough to poll under load, where a `docker exec` per
/// poll costs the 2-core machine a process each time.
pub fn redis_at(ip: &str, port: u16, args: &[&str]) -> Vec<String> {
    use std::io::{Read, Write};
    let Ok(addr) = format!("{ip}:{port}").parse() else {
        return Vec::new();
    };
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request += &format!("${}\r\n{arg}\r\n", arg.len());
    }
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300))
    else {
        return Vec::new();
    };
    let deadline = Instant::now() + Duration::from_secs(1);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(request.as_bytes()).is_err() {
        return Vec::new();
    }
    // Read until the reply is whole: a sentinel has no QUIT to end it with.
    let (mut reply, mut chunk) = (Vec::new(), [0u8; 4096]);
    while Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
        }
        let mut items = Vec::new();
        if parse_resp(&reply, &mut 0, &mut items).is_some() {
            return items;
        }
    }
    Vec::new()
}

/// Parses one RESP value of `reply` from `at` into `items` (bulk, simple,
/// error and integer strings; arrays flattened); `None` while incomplete.
fn parse_resp(reply: &[u8], at: &mut usize, items: &mut Vec<String>) -> Option<()> {
    let end = *at + reply.get(*at..)?.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&reply[*at..end]).to_string();
    *at = end + 2;
    let (kind, rest) = line.split_at_checked(1)?;
    match kind {
        "$" => {
            // $-1, a null, has no body.
            if let Ok(len) = rest.parse::<usize>() {
                let bulk = reply.get(*at..*at + len + 2)?;
                items.push(String::from_utf8_lossy(&bulk[..len]).to_string());
                *at += len + 2;
            }
        }
        "*" => {
            for _ in 0..rest.parse::<i64>().unwrap_or(0) {
                parse_resp(reply, at, items)?;
            }
        }
        _ => items.push(rest.to_string()),
    }
    Some(())
}

/// After a fault ended (or a failover began) at `since`: the exactness
/// rounds found exact answers, and the load's last degraded answer came,
/// both within `within`; `rk`'s log is shown if not.
pub fn assert_exact_again(
    exact: Result<Duration, String>,
    outage: &Outage,
    within: Duration,
    since: &str,
    rk: &Container,
) {
    let exact = exact.unwrap_or_else(|e| panic!("{e}\n{}", rk.logs()));
    assert!(
        exact <= within,
        "exact again only {exact:?} after {since}; its log:\n{}",
        rk.logs()
    );
    let last = outage.last_degraded_after.unwrap_or_default();
    assert!(
        last <= within,
        "degraded until {last:?} after {since}: {outage:?}"
    );
}
