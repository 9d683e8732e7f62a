//! Hot reload of the policies file, in process, on real files in a temp
//! directory: an edit in place, `mv` over the file, and a Kubernetes
//! ConfigMap `..data` swap are each seen within 2 s through file events
//! alone (the backstop poll is set to an hour), and a bad file is kept out
//! and counted.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use ratekeeper::domain::policy::sha256_hex;

use crate::support;

use support::{TestApp, fresh_dir, settings};

const V1: &str = r#"[policies.api]
limits = [{ name = "burst", algorithm = "token_bucket", limit = 10, window = "1s", burst = 20 }]
"#;
const V2: &str = r#"[policies.api]
limits = [{ name = "burst", algorithm = "token_bucket", limit = 10, window = "1s", burst = 30 }]

[policies.login]
shadow = true
limits = [{ name = "minute", limit = 5, window = "1m" }]
"#;
const V3: &str = r#"[policies.search]
limits = [{ name = "second", algorithm = "gcra", limit = 50, window = 1 }]
"#;

/// The service over the policies file at `path`, noticing changes only
/// through file events and SIGHUP.
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

/// Polls GET /v1/policies until it reports `text`'s hash; panics after 2 s.
async fn wait_for_version(app: &TestApp, text: &str, what: &str) -> serde_json::Value {
    let want = sha256_hex(text.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let body = policies(app).await;
        if body["sha256"] == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reloaded within 2 s; still {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn names(body: &serde_json::Value) -> Vec<&str> {
    body["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect()
}

/// A metric's value in the /metrics text (0 when absent).
async fn metric(app: &TestApp, series: &str) -> f64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

const OK: &str = "ratekeeper_reloads_total{file=\"policies\",result=\"ok\"}";
const ERROR: &str = "ratekeeper_reloads_total{file=\"policies\",result=\"error\"}";

#[tokio::test]
async fn an_edit_in_place_is_seen() {
    let dir = fresh_dir("policies-edit");
    let path = dir.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;
    let body = wait_for_version(&app, V1, "startup").await;
    assert_eq!(names(&body), ["api"]);
    assert_eq!(body["file"], path.display().to_string());

    std::fs::write(&path, V2).unwrap();
    let body = wait_for_version(&app, V2, "edit in place").await;
    assert_eq!(names(&body), ["api", "login"]);
    assert_eq!(body["policies"][0]["limits"][0]["burst"], 30);
    assert_eq!(body["policies"][1]["shadow"], true);
}

#[tokio::test]
async fn a_file_moved_over_the_old_one_is_seen() {
    let dir = fresh_dir("policies-mv");
    let path = dir.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;
    for (i, text) in [V2, V3, V1].into_iter().enumerate() {
        let new = dir.join(format!("new-{i}.toml"));
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, &path).unwrap();
        wait_for_version(&app, text, &format!("mv number {i}")).await;
    }
}

#[tokio::test]
async fn a_configmap_data_swap_is_seen() {
    // The layout the kubelet makes: policies.toml -> ..data/policies.toml,
    // ..data -> ..<timestamp>; an update writes a new timestamped directory,
    // points ..data_tmp at it and renames ..data_tmp over ..data.
    let dir = fresh_dir("policies-configmap");
    std::fs::create_dir(dir.join("..2026_01")).unwrap();
    std::fs::write(dir.join("..2026_01/policies.toml"), V1).unwrap();
    symlink("..2026_01", dir.join("..data")).unwrap();
    symlink("..data/policies.toml", dir.join("policies.toml")).unwrap();
    let app = spawn(&dir.join("policies.toml")).await;
    wait_for_version(&app, V1, "startup").await;

    for (version, text) in [("..2026_02", V2), ("..2026_03", V3)] {
        std::fs::create_dir(dir.join(version)).unwrap();
        std::fs::write(dir.join(version).join("policies.toml"), text).unwrap();
        symlink(version, dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        wait_for_version(&app, text, version).await;
    }
}

#[tokio::test]
async fn an_invalid_file_is_kept_out_and_counted() {
    let dir = fresh_dir("policies-invalid");
    let path = dir.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;
    // The startup load counts as a good reload and sets both gauges.
    assert_eq!(metric(&app, OK).await, 1.0);
    assert_eq!(metric(&app, "ratekeeper_policies_loaded").await, 1.0);
    let first = metric(
        &app,
        "ratekeeper_last_reload_timestamp_seconds{file=\"policies\"}",
    )
    .await;
    assert!(first > 1.7e9, "{first}");

    let bad = V2.replace("limit = 5", "limit = 0");
    std::fs::write(&path, &bad).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while metric(&app, ERROR).await < 1.0 {
        assert!(Instant::now() < deadline, "the bad file was not noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = policies(&app).await;
    assert_eq!(body["sha256"], sha256_hex(V1.as_bytes()));
    assert_eq!(names(&body), ["api"]);
    assert_eq!(metric(&app, "ratekeeper_policies_loaded").await, 1.0);
    assert_eq!(metric(&app, OK).await, 1.0);

    // A good file after the bad one is taken, and counted.
    std::fs::write(&path, V2).unwrap();
    wait_for_version(&app, V2, "fixed file").await;
    assert_eq!(metric(&app, OK).await, 2.0);
    assert_eq!(metric(&app, ERROR).await, 1.0);
    assert_eq!(metric(&app, "ratekeeper_policies_loaded").await, 2.0);
    let second = metric(
        &app,
        "ratekeeper_last_reload_timestamp_seconds{file=\"policies\"}",
    )
    .await;
    assert!(second >= first, "{second} < {first}");
}

#[tokio::test]
async fn a_removed_file_keeps_the_policies_in_force() {
    let dir = fresh_dir("policies-removed");
    let path = dir.join("policies.toml");
    std::fs::write(&path, V1).unwrap();
    let app = spawn(&path).await;
    std::fs::remove_file(&path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while metric(&app, ERROR).await < 1.0 {
        assert!(Instant::now() < deadline, "the removal was not noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(policies(&app).await["sha256"], sha256_hex(V1.as_bytes()));
    std::fs::write(&path, V3).unwrap();
    wait_for_version(&app, V3, "file back").await;
}

#[tokio::test]
async fn get_policies_shows_limits_overrides_and_load_time() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/policies.example.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let app = spawn(&example).await;
    let body = policies(&app).await;
    assert_eq!(body["sha256"], sha256_hex(text.as_bytes()));
    assert_eq!(names(&body), ["api", "export", "login"]);
    let api = &body["policies"][0];
    assert_eq!(api["failure_mode"], "closed");
    assert_eq!(api["shadow"], false);
    assert_eq!(
        api["limits"][0],
        serde_json::json!({"name": "burst", "algorithm": "token_bucket", "limit": 10,
                           "window_ms": 1000, "burst": 20})
    );
    assert_eq!(api["limits"][1]["window_ms"], 86_400_000);
    let acme = &api["overrides"]["k_acme"];
    assert_eq!(acme[0], api["limits"][0]);
    assert_eq!(acme[1]["limit"], 100_000);
    assert_eq!(body["policies"][1]["failure_mode"], "local");
    assert_eq!(
        body["policies"][2]["description"],
        "login attempts per account (shadow trial)"
    );
    let loaded_at = body["loaded_at"].as_str().unwrap();
    assert!(
        loaded_at.len() == 24 && loaded_at.ends_with('Z') && loaded_at.starts_with("20"),
        "{loaded_at}"
    );
}

#[tokio::test]
async fn without_a_file_there_are_no_policies() {
    let app = TestApp::spawn(settings(None)).await;
    let body = policies(&app).await;
    assert_eq!(
        body,
        serde_json::json!({"file": null, "sha256": "", "loaded_at": null, "overrides_version": 0,
            "policies": [], "hierarchies": []})
    );
    assert_eq!(metric(&app, OK).await, 0.0);
}
