//! The policies file watch against what goes wrong in practice: a slow
//! writer caught mid-write, a file emptied by mistake, the watched
//! directory replaced, a symlink into a directory of its own. Changes are
//! noticed through file events alone (the backstop poll is an hour).

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratekeeper::domain::policy::sha256_hex;

use crate::support;

use support::{TestApp, fresh_dir, settings};

const V1: &str = r#"[policies.api]
limits = [{ name = "burst", algorithm = "token_bucket", limit = 10, window = "1s", burst = 20 }]
"#;
/// Its first half ([`V2_HEAD`]) is a valid file too: `api` without the
/// `login` policy. Installing it would drop a policy for a moment.
const V2_HEAD: &str = r#"[policies.api]
limits = [{ name = "burst", algorithm = "token_bucket", limit = 10, window = "1s", burst = 30 }]
"#;
const V2_TAIL: &str = r#"
[policies.login]
shadow = true
limits = [{ name = "minute", limit = 5, window = "1m" }]
"#;
const V3: &str = r#"[policies.search]
limits = [{ name = "second", algorithm = "gcra", limit = 50, window = 1 }]
"#;

const ERROR: &str = "ratekeeper_reloads_total{file=\"policies\",result=\"error\"}";

async fn spawn(path: &Path) -> TestApp {
    let mut settings = settings(None);
    settings.policies.file = Some(path.to_path_buf());
    settings.policies.poll_interval = Duration::from_secs(3600);
    TestApp::spawn(settings).await
}

async fn policies(app: &TestApp) -> serde_json::Value {
    let response = app.get("/v1/policies").await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Polls GET /v1/policies until it reports `text`'s hash.
async fn wait_for_version(app: &TestApp, text: &str, within: Duration, what: &str) {
    let want = sha256_hex(text.as_bytes());
    let deadline = Instant::now() + within;
    loop {
        let body = policies(app).await;
        if body["sha256"] == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reloaded; still {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn metric(app: &TestApp, series: &str) -> f64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Every (sha256, policy names) GET /v1/policies answers while it runs.
fn observe(app: &TestApp) -> (Arc<Mutex<BTreeSet<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let url = app.url("/v1/policies");
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let client = reqwest::Client::new();
        loop {
            let body: serde_json::Value =
                client.get(&url).send().await.unwrap().json().await.unwrap();
            let names: Vec<String> = body["policies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect();
            let sha = body["sha256"].as_str().unwrap().to_string();
            record
                .lock()
                .unwrap()
                .insert(format!("{sha} {}", names.join(",")));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (seen, task)
}

#[tokio::test]
async fn a_slow_writer_is_never_read_half_way() {
    let dir = fresh_dir("policies-slow-writer");
    let path = dir.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;
    let (seen, observer) = observe(&app);

    // `cat new.toml > policies.toml` from a writer that pauses: the file is
    // truncated, then half written, then finished, each pause longer than the
    // 75 ms an event-count debounce would wait.
    let mut file = std::fs::File::create(&path).unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    file.write_all(V2_HEAD.as_bytes()).unwrap();
    file.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    file.write_all(V2_TAIL.as_bytes()).unwrap();
    drop(file);

    let v2 = format!("{V2_HEAD}{V2_TAIL}");
    wait_for_version(&app, &v2, Duration::from_secs(2), "the finished file").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    observer.abort();
    let seen = seen.lock().unwrap().clone();
    let allowed = BTreeSet::from([
        format!("{} api", sha256_hex(V1.as_bytes())),
        format!("{} api,login", sha256_hex(v2.as_bytes())),
    ]);
    assert_eq!(seen, allowed, "only the old and the finished file, ever");
    assert_eq!(metric(&app, ERROR).await, 0.0);
}

#[tokio::test]
async fn an_emptied_file_is_refused_and_counted() {
    let dir = fresh_dir("policies-emptied");
    let path = dir.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;

    // No policies at all while some are in force: refused (only SIGHUP
    // installs it), counted, the old set stays.
    std::fs::write(&path, "# nothing here yet\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while metric(&app, ERROR).await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the emptied file was not noticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = policies(&app).await;
    assert_eq!(body["sha256"], sha256_hex(V1.as_bytes()));
    assert_eq!(body["policies"][0]["name"], "api");
    assert_eq!(metric(&app, "ratekeeper_policies_loaded").await, 1.0);

    std::fs::write(&path, V3).unwrap();
    wait_for_version(&app, V3, Duration::from_secs(2), "a file with policies").await;
}

#[tokio::test]
async fn a_replaced_directory_is_watched_again() {
    let dir = fresh_dir("policies-dir-replaced");
    let conf = dir.join("conf");
    std::fs::create_dir(&conf).unwrap();
    let path = conf.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;

    // The directory moves away and a new one takes its name: a watch on
    // the old directory would see nothing of the new one, ever.
    std::fs::rename(&conf, dir.join("old")).unwrap();
    std::fs::create_dir(&conf).unwrap();
    std::fs::write(&path, V3).unwrap();
    wait_for_version(&app, V3, Duration::from_secs(4), "the new directory").await;

    // And the new directory is watched from then on.
    std::fs::write(&path, V1).unwrap();
    wait_for_version(&app, V1, Duration::from_secs(4), "an edit in it").await;
}

#[tokio::test]
async fn a_symlink_into_another_directory_is_followed() {
    let dir = fresh_dir("policies-link");
    let elsewhere = fresh_dir("policies-link-target");
    let target = elsewhere.join("real.toml");
    std::fs::write(&target, V1).unwrap();
    let path = dir.join("policies.toml");
    symlink(&target, &path).unwrap();
    let app = spawn(&path).await;

    // Only the target changes: nothing happens in the link's directory.
    std::fs::write(&target, V3).unwrap();
    wait_for_version(&app, V3, Duration::from_secs(2), "an edit of the target").await;
}

#[tokio::test]
async fn get_policies_is_rendered_once_per_set_and_follows_reloads() {
    let dir = fresh_dir("policies-rendered");
    let path = dir.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;
    let response = app.get("/v1/policies").await;
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "the same type as before the body was cached"
    );
    let first = response.text().await.unwrap();
    assert_eq!(app.get("/v1/policies").await.text().await.unwrap(), first);
    std::fs::write(&path, V3).unwrap();
    wait_for_version(&app, V3, Duration::from_secs(2), "the next set").await;
    let body = policies(&app).await;
    assert_eq!(body["policies"][0]["name"], "search");
}
