//! Issue 15, part 1: the real `Dockerfile`, built on this machine with
//! local stand-ins for its public base images (`tests/docker/`), and run
//! the ways its users run it.

use crate::support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use support::docker::{Container, docker, image, serving};
use support::raw_http;

/// The healthcheck's `--interval` is 10 s and `--retries` 3: healthy comes
/// after the first probe, unhealthy only after 30 s of failures.
const HEALTHY_WITHIN: Duration = Duration::from_secs(25);

fn addr(base: &str) -> &str {
    base.trim_start_matches("http://")
}

#[test]
fn the_image_answers_as_nonroot_on_a_read_only_root_and_turns_healthy() {
    let _turn = support::docker::one_test_at_a_time();
    let image = image();
    // No tmpfs or volume: nothing in the container is writable.
    let container = Container::run("image", &["--read-only", "-p", "127.0.0.1::8080", image]);
    let base = serving(&container);

    let body = r#"{"key":"user:42","limit":2,"window":"1m"}"#;
    let (status, answer) = raw_http(addr(&base), "POST", "/v1/check", body).unwrap();
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["allowed"], true, "{answer}");
    assert_eq!(answer["remaining"], 1, "{answer}");
    assert_eq!(answer["degraded"], false, "{answer}");

    // The process itself, as the kernel sees it, not just the image's USER.
    let top = support::docker::docker_ok(&["top", &container.name, "-o", "pid,uid,comm"]);
    let uids: Vec<&str> = top
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        uids,
        ["65532"],
        "ratekeeper runs as uid 65532 (nonroot):\n{top}"
    );
    assert_eq!(container.inspect("{{.HostConfig.ReadonlyRootfs}}"), "true");
    assert_eq!(
        container.inspect("{{len .Mounts}}"),
        "0",
        "no writable mount"
    );

    let deadline = Instant::now() + HEALTHY_WITHIN;
    loop {
        let health = container.inspect("{{.State.Health.Status}}");
        if health == "healthy" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "HEALTHCHECK is {health} after {HEALTHY_WITHIN:?}: {}\n{}",
            container.inspect("{{json .State.Health.Log}}"),
            container.logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The log is JSON lines (the image sets log.format = json).
    let logs = container.logs();
    let first = logs.lines().next().unwrap_or_default();
    assert!(
        serde_json::from_str::<serde_json::Value>(first).is_ok(),
        "{logs}"
    );
}

#[test]
fn docker_stop_answers_in_flight_requests_then_exits_0() {
    let _turn = support::docker::one_test_at_a_time();
    let image = image();
    let container = Container::run("drain", &["-p", "127.0.0.1::8080", image]);
    let base = serving(&container);
    let host = addr(&base).to_string();

    // A request whose body is still on its way when the stop comes.
    let body = r#"{"key":"drain","limit":5,"window":"1m"}"#;
    let (first, rest) = body.split_at(10);
    let mut stream = std::net::TcpStream::connect(&host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{first}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));

    // docker stop: SIGTERM, then SIGKILL after 10 s (its default grace).
    let name = container.name.clone();
    let stopped_at = Instant::now();
    let stop = std::thread::spawn(move || docker(&["stop", "-t", "10", &name]).status.success());
    std::thread::sleep(Duration::from_millis(700));
    assert!(container.running(), "exited with a request in flight");
    stream.write_all(rest.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.to_ascii_lowercase().contains("connection: close"),
        "{response}"
    );

    assert!(stop.join().unwrap(), "docker stop failed");
    let took = stopped_at.elapsed();
    assert_eq!(
        container.inspect("{{.State.ExitCode}}"),
        "0",
        "{}",
        container.logs()
    );
    assert!(
        took < Duration::from_secs(9),
        "stopped by SIGKILL, not by draining: {took:?}"
    );
    assert!(container.logs().contains("stopped"), "{}", container.logs());
}

#[test]
fn a_bad_ratekeeper_variable_exits_64_naming_the_key() {
    let _turn = support::docker::one_test_at_a_time();
    let image = image();
    for (variable, value, named) in [
        (
            "RATEKEEPER_SERVER__MAX_CONNECTIONS",
            "lots",
            "server.max_connections",
        ),
        ("RATEKEEPER_FAILURE__MODE", "sometimes", "failure.mode"),
        ("RATEKEEPER_REDIS__TIMEOUT", "-5ms", "redis.timeout"),
    ] {
        let setting = format!("{variable}={value}");
        let container = Container::run("badenv", &["-e", &setting, image]);
        assert_eq!(
            container.wait_exit(Duration::from_secs(10)),
            64,
            "{setting}"
        );
        let logs = container.logs();
        assert!(
            logs.contains(named),
            "{setting}: the log names {named}:\n{logs}"
        );
    }
}

/// `chown OWNER PATH...` done by a container, so a test needs no root on
/// the host to give a file to the image's uid.
fn chown_in_container(dir: &std::path::Path, owner: &str) {
    let mount = format!("{}:/d", dir.display());
    support::docker::docker_ok(&[
        "run",
        "--rm",
        "-v",
        &mount,
        "--entrypoint",
        "chown",
        "redis:7.2-alpine",
        owner,
        "/d/tokens",
    ]);
}

#[tokio::test]
async fn a_chmod_600_tokens_file_from_the_host_works_when_uid_65532_owns_it() {
    let _turn = support::docker::one_test_at_a_time();
    use std::os::unix::fs::PermissionsExt;
    let image = image();
    let dir = support::fresh_dir("container-tokens");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let check = "c".repeat(16) + "0123456789abcdef";
    let admin = "a".repeat(16) + "0123456789abcdef";
    let file = dir.join("tokens");
    std::fs::write(&file, format!("check {check}\nadmin {admin}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mount = format!("{}:/etc/ratekeeper-secrets:ro", dir.display());
    let tokens = "RATEKEEPER_AUTH__TOKENS_FILE=/etc/ratekeeper-secrets/tokens";

    // As docs/deployment.md says: owned by 65532, mode 600.
    chown_in_container(&dir, "65532:65532");
    let container = Container::run(
        "tokens",
        &["-v", &mount, "-e", tokens, "-p", "127.0.0.1::8080", image],
    );
    let base = serving(&container);
    let body = r#"{"key":"t","limit":1,"window":"1m"}"#;
    let (status, _) = raw_http(addr(&base), "POST", "/v1/check", body).unwrap();
    assert_eq!(status, 401, "tokens are on");
    let answer = reqwest::Client::new()
        .post(format!("{base}/v1/check"))
        .bearer_auth(&check)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(!container.logs().contains(&check), "a token in the log");
    drop(container);

    // Owned by the host's root with mode 600: unreadable to uid 65532. The
    // service stops with 64 and says how to fix it.
    chown_in_container(&dir, "0:0");
    let container = Container::run("tokens-denied", &["-v", &mount, "-e", tokens, image]);
    assert_eq!(container.wait_exit(Duration::from_secs(10)), 64);
    let logs = container.logs();
    assert!(
        logs.contains("runs as uid 65532") && logs.contains("chown 65532"),
        "{logs}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The stand-ins must carry the names the user-facing files pull, or the
/// tests would build against something else (or against nothing) after a
/// bump of a `FROM` line.
#[test]
fn the_stand_ins_are_the_images_the_dockerfile_and_compose_name() {
    let _turn = support::docker::one_test_at_a_time();
    let standins = repo_file("tests/docker/standins.sh");
    let dockerfile = repo_file("Dockerfile");
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    let compose = repo_file("docker-compose.yml");
    let redis = compose
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: redis"))
        .map(|tag| format!("redis{tag}"))
        .expect("compose names a redis image");
    for image in froms.iter().copied().chain([redis.as_str()]) {
        assert!(
            standins.contains(image),
            "tests/docker/standins.sh makes no {image}"
        );
    }
    // docs/deployment.md lists the distroless stand-in's packages.
    let docs = repo_file("docs/deployment.md");
    let recipe = repo_file("tests/docker/distroless.Dockerfile");
    let download = recipe.split("apt-get download").nth(1).unwrap();
    let packages = download.split("&&").next().unwrap();
    for package in packages.split_whitespace().filter(|p| *p != "\\") {
        assert!(
            docs.contains(&format!("`{package}`")),
            "docs/deployment.md omits {package}"
        );
    }
}
