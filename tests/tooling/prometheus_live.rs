//! Issue 16, parts 2 and 4: a real Prometheus (Debian's package) scrapes
//! two real ratekeeper binaries, one on a real redis-server and one on the
//! embedded store, every second, and evaluates the shipped rule files
//! unchanged. The test drives traffic whose counts it knows from the
//! answers it got, and reads them back through Prometheus's HTTP API:
//! decisions by policy, limit and decision (exact), their increase (within
//! Prometheus's extrapolation), p99 latency (within the bucket the round
//! trips allow), the deny-cache ratio, reloads and their alert, Redis
//! killed (store down, its alert, every outage check counted degraded).
//! Then every query of the Grafana dashboard, its variables' included,
//! must parse and answer with data, and each instance's /metrics passes
//! `promtool check metrics`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::prometheus_support;
use crate::support;

#[path = "prometheus_live/counts.rs"]
mod counts;
#[path = "prometheus_live/events.rs"]
mod events;

use prometheus_support::{Prometheus, Sample, dashboard, promtool_check_metrics};
use support::binary::{KillOnDrop, serve};
use support::{RedisServer, fresh_dir};

/// `api` has two limits, so `limit` varies: `burst` decides for most keys,
/// `daily` for `k_small`, whose override makes it the tighter one. Buckets
/// refill one unit every 12 minutes or slower: nothing refills during the
/// test, so every count below follows from the checks sent.
const POLICIES: &str = r#"
[policies.api]
limits = [
  { name = "burst", algorithm = "token_bucket", limit = 5, window = "1h" },
  { name = "daily", algorithm = "gcra", limit = 1000, window = "1d" },
]
[policies.api.overrides."k_small"]
limits = [ { name = "daily", algorithm = "gcra", limit = 2, window = "1d" } ]

[policies.search]
limits = [ { name = "hourly", algorithm = "token_bucket", limit = 3, window = "1h" } ]
"#;

/// A good edit: one more policy.
const EXPORT: &str = r#"
[policies.export]
limits = [ { name = "hourly", algorithm = "gcra", limit = 60, window = "1h" } ]
"#;

/// (policy, key, checks): two keys pushed past `burst`, one past its
/// override's `daily`, one past `search`'s limit; `mallory` hammers its
/// denied key, which the deny cache answers after the first denial.
const TRAFFIC: [(&str, &str, usize); 4] = [
    ("api", "alice", 7),
    ("api", "k_small", 4),
    ("search", "bob", 4),
    ("api", "mallory", 65),
];

/// Checks sent while Redis is dead, each on a key of its own.
const OUTAGE_CHECKS: usize = 20;

struct Instance {
    store: &'static str,
    addr: String,
    _child: KillOnDrop,
}

/// What one instance was sent and answered.
#[derive(Default)]
struct Sent {
    /// Checks by (policy, deciding limit, decision).
    checks: BTreeMap<(String, String, String), u64>,
    degraded: u64,
    /// Denials, and the keys denied: each key's first denial is the
    /// store's own, so at most `denied - denied_keys.len()` are cache hits.
    denied: u64,
    denied_keys: BTreeSet<String>,
    /// Round trips of the checks before the outage, in seconds.
    round_trips: Vec<f64>,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Writes `text` to a temp file and renames it over `path`: the watcher
/// never reads half a file.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn start(store: &'static str, policies: &Path, redis: Option<&str>) -> Instance {
    let mut env = vec![("RATEKEEPER_POLICIES__FILE", policies.to_str().unwrap())];
    env.extend(redis.map(|url| ("RATEKEEPER_REDIS__URL", url)));
    let (child, addr) = serve(&env);
    Instance {
        store,
        addr,
        _child: child,
    }
}

/// Scrapes every second and evaluates the shipped rule files every second.
fn prometheus_config(instances: &[Instance]) -> String {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus");
    let rule_file = |name: &str| format!("  - '{}'\n", rules.join(name).display());
    let target = |i: &Instance| {
        format!(
            "      - targets: ['{}']\n        labels: {{store: {}}}\n",
            i.addr, i.store
        )
    };
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n{}{}scrape_configs:\n  - job_name: ratekeeper\n    static_configs:\n{}",
        rule_file("alerts.yml"),
        rule_file("recording.yml"),
        instances.iter().map(target).collect::<String>()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_sees_the_traffic_and_every_dashboard_query_answers() {
    let started = unix_now();
    let mut redis = RedisServer::start();
    let policies = fresh_dir("prometheus-live").join("policies.toml");
    write_atomically(&policies, POLICIES);
    let instances = [
        start("redis", &policies, Some(&redis.url())),
        start("embedded", &policies, None),
    ];
    let prom = Prometheus::start(&prometheus_config(&instances)).await;
    // The first scrape sees every count at 0: rates and increases then
    // start from the traffic's beginning.
    prom.until(
        "a first scrape of both instances",
        "ratekeeper_build_info",
        |s| has_both(s, &instances),
    )
    .await;

    let http = reqwest::Client::new();
    let mut sent = [Sent::default(), Sent::default()];
    for (instance, sent) in instances.iter().zip(&mut sent) {
        for (policy, key, n) in TRAFFIC {
            for _ in 0..n {
                check(&http, instance, policy, key, sent).await;
            }
        }
        exercised(instance, sent);
    }
    counts::decisions_counted(&prom, &instances, &sent).await;
    counts::latency_within_buckets(&prom, &instances, &sent).await;
    counts::deny_cache_ratio(&prom, &http, &instances, &sent).await;
    events::reloads_seen(&prom, &instances, &policies).await;
    events::outage_seen(&prom, &http, &instances, &mut redis, &mut sent).await;
    counts::increase_covers_the_traffic(&prom, &instances, &sent).await;
    for instance in &instances {
        let text = counts::get_text(&http, &format!("http://{}/metrics", instance.addr)).await;
        promtool_check_metrics(&text).unwrap_or_else(|e| panic!("{}: {e}", instance.store));
    }
    events::every_dashboard_query_answers(&prom, &instances, &sent, started).await;
    eprintln!("prometheus_live: {:.1} s", unix_now() - started);
}

/// The traffic did what it is for: no degraded answer yet, each policy
/// both allowed and denied, and `api` decided by both of its limits.
fn exercised(instance: &Instance, sent: &Sent) {
    assert_eq!(sent.degraded, 0, "{}: degraded", instance.store);
    let seen = |wanted: fn(&(String, String, String)) -> bool| sent.checks.keys().any(wanted);
    assert!(
        seen(|(p, _, d)| p == "api" && d == "denied"),
        "{}",
        instance.store
    );
    assert!(
        seen(|(p, _, d)| p == "search" && d == "denied"),
        "{}",
        instance.store
    );
    assert!(
        seen(|(p, _, d)| p == "search" && d == "allowed"),
        "{}",
        instance.store
    );
    assert!(
        seen(|(p, l, _)| p == "api" && l == "burst"),
        "{}",
        instance.store
    );
    assert!(
        seen(|(p, l, _)| p == "api" && l == "daily"),
        "{}",
        instance.store
    );
}

fn has_both(samples: &[Sample], instances: &[Instance]) -> Result<(), String> {
    for instance in instances {
        if !samples.iter().any(|s| s.label("instance") == instance.addr) {
            return Err(format!("nothing from {} yet", instance.store));
        }
    }
    Ok(())
}

/// One policy check, counted in `sent` by its answer.
async fn check(http: &reqwest::Client, at: &Instance, policy: &str, key: &str, sent: &mut Sent) {
    let started = Instant::now();
    let response = http
        .post(format!("http://{}/v1/check", at.addr))
        .json(&serde_json::json!({"policy": policy, "key": key}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}: {policy} {key}", at.store);
    let body: serde_json::Value = response.json().await.unwrap();
    let round_trip = started.elapsed().as_secs_f64();
    let allowed = body["allowed"].as_bool().unwrap();
    let decision = if allowed { "allowed" } else { "denied" };
    let limit = deciding_limit(&body);
    *sent
        .checks
        .entry((policy.into(), limit, decision.into()))
        .or_default() += 1;
    if body["degraded"] == true {
        sent.degraded += 1;
    } else {
        sent.round_trips.push(round_trip);
    }
    if !allowed {
        sent.denied += 1;
        sent.denied_keys.insert(key.into());
    }
}

/// The limit the service labels a check with: of a denial, the denying
/// limit with the longest wait; of an allowed check, the limit with the
/// fewest units left. The traffic is shaped so that there is no tie.
fn deciding_limit(body: &serde_json::Value) -> String {
    let limits = body["limits"].as_array().unwrap();
    let (candidates, rank): (Vec<_>, fn(&serde_json::Value) -> i64) = if body["allowed"] == true {
        (limits.iter().collect(), |l| {
            -(l["remaining"].as_i64().unwrap())
        })
    } else {
        let denying = limits.iter().filter(|l| l["allowed"] == false);
        (denying.collect(), |l| l["retry_after_ms"].as_i64().unwrap())
    };
    let best = candidates.iter().map(|l| rank(l)).max().unwrap();
    let deciding: Vec<_> = candidates.iter().filter(|l| rank(l) == best).collect();
    assert_eq!(deciding.len(), 1, "a tie between limits: {body}");
    deciding[0]["name"].as_str().unwrap().to_string()
}

/// Without Prometheus: the dashboard's shape. One data source variable of
/// type `datasource` that every panel and target uses, so it imports into
/// any Grafana; `$instance` and `$policy` as the issue names them; unique
/// panel ids and titles; and every query scoped to the chosen instances.
#[test]
fn the_dashboard_is_scoped_to_its_data_source_and_instances() {
    let board = dashboard::load();
    assert!(board["schemaVersion"].as_u64() >= Some(36), "schemaVersion");
    let uid = variables_are_grafanas(&board);
    let panels = dashboard::panels(&board);
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for panel in &panels {
        let title = panel["title"].as_str().unwrap();
        let id = panel["id"].as_u64().unwrap();
        assert!(ids.insert(id), "{title}: id reused");
        assert!(titles.insert(title), "{title}: title reused");
        let placed = panel["gridPos"]["w"].as_u64().is_some();
        assert!(placed, "{title}: no gridPos");
        assert_eq!(panel["datasource"]["uid"], uid.as_str(), "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], uid.as_str(), "{title}");
        }
    }
    let targets = dashboard::targets(&board);
    for target in &targets {
        let scoped = target.expr.contains(r#"instance=~"$instance""#);
        assert!(
            scoped,
            "{}: not scoped to $instance: {}",
            target.panel, target.expr
        );
    }
    let counted = (panels.len(), targets.len());
    assert!(counted.0 >= 15 && counted.1 >= 20, "{counted:?}");
}

/// The data source variable (its `${name}`, returned) and `$instance` and
/// `$policy` as the issue names them, both multi-valued with "All".
fn variables_are_grafanas(board: &serde_json::Value) -> String {
    let sources = dashboard::variables(board, "datasource");
    assert_eq!(sources.len(), 1, "one data source variable");
    let (source, variable) = sources[0];
    assert_eq!(variable["query"], "prometheus");
    let uid = format!("${{{source}}}");
    let queries = dashboard::variables(board, "query");
    let query = |name: &str| {
        let found = queries.iter().find(|(n, _)| *n == name);
        let (_, v) = found.unwrap_or_else(|| panic!("no ${name} variable"));
        assert_eq!(v["datasource"]["uid"], uid.as_str(), "${name}");
        assert!(v["multi"] == true && v["includeAll"] == true, "${name}");
        dashboard::variable_query(v)
    };
    let instance = query("instance");
    assert_eq!(instance, "label_values(ratekeeper_build_info, instance)");
    let (matcher, label) = dashboard::label_values(&query("policy")).unwrap();
    assert!(matcher.unwrap().starts_with("ratekeeper_checks_total") && label == "policy");
    uid
}
