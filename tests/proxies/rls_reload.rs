//! Hot reload of `rls.config`, a file or a directory of files, through
//! file events alone (the backstop poll is an hour, except in the first
//! test): edits in place, `mv` over, a file added, a ConfigMap's `..data`
//! swap, a slow writer, a broken version.

use crate::rls_support;
use crate::support;

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rls_support::{CONFIG, Rls, config_file, desc, request, rls_settings, start};

/// Every change must be in force this soon after it is written.
const WITHIN: Duration = Duration::from_secs(2);
const ERROR: &str = "ratekeeper_reloads_total{file=\"rls\",result=\"error\"}";

/// One domain whose `global` key allows `n` an hour.
fn domain(name: &str, n: u32) -> String {
    format!(
        "domain: {name}\ndescriptors:\n  - key: global\n    rate_limit: {{ unit: hour, requests_per_unit: {n} }}\n"
    )
}

/// Serves `path` with file events as the only trigger.
async fn serve(path: PathBuf) -> Rls {
    let mut settings = rls_settings(None, path);
    settings.policies.poll_interval = Duration::from_secs(3600);
    start(settings).await
}

/// The configured limit of `key` in `domain` now (`None`: no limit), asked
/// with a fresh value each time so no counter runs out.
async fn limit(rls: &Rls, domain: &str, key: &str) -> Option<u32> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let value = NEXT.fetch_add(1, Ordering::Relaxed).to_string();
    let r = rls
        .ask(request(domain, vec![desc(&[(key, &value)])]))
        .await
        .expect("answered");
    r.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

/// The configured limits of `global` and `extra` in `domain`, asked in ONE
/// request so both come from the same config version (one load per call).
async fn limits(rls: &Rls, domain: &str) -> (Option<u32>, Option<u32>) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let value = format!("pair-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let r = rls
        .ask(request(
            domain,
            vec![desc(&[("global", &value)]), desc(&[("extra", &value)])],
        ))
        .await
        .expect("answered");
    let of = |i: usize| {
        r.statuses[i]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    (of(0), of(1))
}

/// Polls until `domain`'s `global` limit is `want`; fails after [`WITHIN`].
async fn wait_for(rls: &Rls, domain: &str, want: u32, what: &str) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let now = limit(rls, domain, "global").await;
        if now == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reloaded, still {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn metric(rls: &Rls, series: &str) -> f64 {
    rls.metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Polls until the reload error counter is `want`: the bad version has
/// been judged (and kept out); fails after [`WITHIN`].
async fn wait_for_errors(rls: &Rls, want: f64, what: &str) {
    let deadline = Instant::now() + WITHIN;
    while metric(rls, ERROR).await < want {
        assert!(Instant::now() < deadline, "{what} was not judged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// `rls.config` is reloaded on change; a broken edit keeps the config in force.
#[tokio::test]
async fn the_config_is_hot_reloaded() {
    let path = config_file(CONFIG);
    let mut settings = rls_settings(None, path.clone());
    settings.policies.poll_interval = std::time::Duration::from_millis(50);
    let rls = start(settings).await;
    let ask = || request("edge", vec![desc(&[("global", "reload")])]);
    assert_eq!(rls.codes(ask()).await.2, [4]);
    std::fs::write(&path, "domain: edge\ndescriptors: [{ key: unknown_key: x\n").unwrap();
    wait_for_errors(&rls, 1.0, "the broken file").await;
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

#[tokio::test]
async fn a_file_edited_in_place_or_moved_over_is_reloaded() {
    let dir = support::fresh_dir("rls-file");
    let path = dir.join("edge.yaml");
    write(&path, &domain("edge", 5));
    let rls = serve(path.clone()).await;
    assert_eq!(limit(&rls, "edge", "global").await, Some(5));

    write(&path, &domain("edge", 6));
    wait_for(&rls, "edge", 6, "edited in place").await;

    let new = dir.join("edge.yaml.new");
    write(&new, &domain("edge", 7));
    std::fs::rename(&new, &path).unwrap();
    wait_for(&rls, "edge", 7, "moved over").await;
    assert_eq!(metric(&rls, ERROR).await, 0.0);
}

#[tokio::test]
async fn a_directory_sees_files_added_edited_and_moved_over() {
    let dir = support::fresh_dir("rls-dir");
    write(&dir.join("edge.yaml"), &domain("edge", 5));
    let rls = serve(dir.clone()).await;
    assert_eq!(limit(&rls, "api", "global").await, None);

    write(&dir.join("api.yml"), &domain("api", 8));
    wait_for(&rls, "api", 8, "a file added").await;
    write(&dir.join("edge.yaml"), &domain("edge", 6));
    wait_for(&rls, "edge", 6, "a file edited").await;
    let new = dir.join(".edge.tmp");
    write(&new, &domain("edge", 7));
    std::fs::rename(&new, dir.join("edge.yaml")).unwrap();
    wait_for(&rls, "edge", 7, "a file moved over").await;
    assert_eq!(limit(&rls, "api", "global").await, Some(8));
    assert_eq!(metric(&rls, "ratekeeper_rls_domains_loaded").await, 2.0);
    let ok = "ratekeeper_reloads_total{file=\"rls\",result=\"ok\"}";
    assert!(metric(&rls, ok).await >= 4.0, "startup and three changes");
    assert!(
        metric(
            &rls,
            "ratekeeper_last_reload_timestamp_seconds{file=\"rls\"}"
        )
        .await
            > 0.0
    );
}

/// What kubelet does on a ConfigMap update: the files are links through
/// `..data`, which is renamed over to point at a new timestamped directory.
#[tokio::test]
async fn a_configmap_data_swap_is_reloaded() {
    let dir = support::fresh_dir("rls-configmap");
    let version = |name: &str, n: u32| {
        let real = dir.join(name);
        std::fs::create_dir(&real).unwrap();
        write(&real.join("edge.yaml"), &domain("edge", n));
    };
    version("..2026_01", 5);
    symlink("..2026_01", dir.join("..data")).unwrap();
    symlink("..data/edge.yaml", dir.join("edge.yaml")).unwrap();
    let rls = serve(dir.clone()).await;
    assert_eq!(limit(&rls, "edge", "global").await, Some(5));

    version("..2026_02", 9);
    symlink("..2026_02", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(dir.join("..2026_01")).unwrap();
    wait_for(&rls, "edge", 9, "the ..data swap").await;
}

/// `cat new.yaml > edge.yaml` from a writer that pauses: its first part is
/// a valid config too (without the `extra` key), and is never in force.
#[tokio::test]
async fn a_slow_writer_is_never_read_half_way() {
    let dir = support::fresh_dir("rls-slow-writer");
    let path = dir.join("edge.yaml");
    write(&path, &domain("edge", 5));
    let rls = Arc::new(serve(path.clone()).await);
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let observer = {
        let (rls, seen) = (rls.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let pair = limits(&rls, "edge").await;
                seen.lock().unwrap().insert(pair);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let head = domain("edge", 6);
    let tail = "  - key: extra\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n";
    let mut file = std::fs::File::create(&path).unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    file.write_all(head.as_bytes()).unwrap();
    file.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    file.write_all(tail.as_bytes()).unwrap();
    drop(file);

    wait_for(&rls, "edge", 6, "the finished file").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    observer.abort();
    let seen = seen.lock().unwrap().clone();
    let allowed = BTreeSet::from([(Some(5), None), (Some(6), Some(3))]);
    assert_eq!(seen, allowed, "only the old and the finished file, ever");
    assert_eq!(metric(&rls, ERROR).await, 0.0);
}

/// Installs `files` as a new version the way kubelet updates a ConfigMap:
/// written into a fresh `..<name>` directory, then `..data` renamed over to
/// point at it, so both files change at once.
fn swap_version(dir: &Path, name: &str, files: &[(&str, &str)]) {
    let real = dir.join(name);
    std::fs::create_dir(&real).unwrap();
    for (file, text) in files {
        write(&real.join(file), text);
    }
    let _ = std::fs::remove_file(dir.join("..data_tmp"));
    symlink(name, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
}

/// A broken version (in a file of the directory) is logged, counted, and
/// kept out whole; the next good one is loaded. Each version lands at once
/// (a `..data` swap), so no half of one is ever a version of its own.
#[tokio::test]
async fn an_invalid_version_is_kept_out() {
    let dir = support::fresh_dir("rls-invalid");
    swap_version(
        &dir,
        "..v1",
        &[
            ("edge.yaml", &domain("edge", 5)),
            ("api.yaml", &domain("api", 3)),
        ],
    );
    for file in ["edge.yaml", "api.yaml"] {
        symlink(format!("..data/{file}"), dir.join(file)).unwrap();
    }
    let rls = serve(dir.clone()).await;
    assert_eq!(limit(&rls, "api", "global").await, Some(3));
    let broken = "domain: api\ndescriptors: [{ key: x: y\n";
    swap_version(
        &dir,
        "..v2",
        &[("edge.yaml", &domain("edge", 6)), ("api.yaml", broken)],
    );
    wait_for_errors(&rls, 1.0, "the broken version").await;
    assert_eq!(
        limit(&rls, "edge", "global").await,
        Some(5),
        "all or nothing"
    );
    swap_version(
        &dir,
        "..v3",
        &[
            ("edge.yaml", &domain("edge", 6)),
            ("api.yaml", &domain("api", 4)),
        ],
    );
    wait_for(&rls, "api", 4, "the fixed version").await;
    assert_eq!(limit(&rls, "edge", "global").await, Some(6));
    assert_eq!(
        metric(&rls, ERROR).await,
        1.0,
        "the broken version counted once"
    );
}

/// `rm` then `cp` (or `rsync --delete`): between the two the directory
/// holds no domains, which would switch limiting off. Refused and counted;
/// the config in force stays until the new file lands.
#[tokio::test]
async fn a_directory_emptied_between_rm_and_cp_is_refused() {
    let dir = support::fresh_dir("rls-emptied");
    write(&dir.join("edge.yaml"), &domain("edge", 5));
    let rls = serve(dir.clone()).await;
    std::fs::remove_file(dir.join("edge.yaml")).unwrap();
    wait_for_errors(&rls, 1.0, "the emptied directory").await;
    assert_eq!(
        limit(&rls, "edge", "global").await,
        Some(5),
        "still limited"
    );
    assert_eq!(metric(&rls, "ratekeeper_rls_domains_loaded").await, 1.0);

    write(&dir.join("edge.yaml"), &domain("edge", 6));
    wait_for(&rls, "edge", 6, "the new file").await;
    assert_eq!(metric(&rls, ERROR).await, 1.0);
}
