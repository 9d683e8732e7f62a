//! Events Prometheus must see and alert on: a reloaded and a refused
//! policies file, Redis killed; then every query of the dashboard.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::counts::one;
use super::{EXPORT, Instance, OUTAGE_CHECKS, POLICIES, Sent};
use crate::prometheus_support::{Prometheus, Sample, dashboard, eventually};
use crate::support::RedisServer;

/// An edit that does not load: the whole file is refused.
const BROKEN: &str = r#"
[policies.broken]
limits = [ { name = "x", algorithm = "no_such_algorithm", limit = 1, window = "1s" } ]
"#;

/// `ratekeeper_reloads_total{file="policies"}` by (instance, result).
fn reloads(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    let pairs = samples.iter().map(|s| {
        let key = (
            s.label("instance").to_string(),
            s.label("result").to_string(),
        );
        (key, s.value)
    });
    pairs.collect()
}

/// Each instance's count of `result` is one more than in `before`, the
/// other result's the same.
fn moved(
    now: &BTreeMap<(String, String), f64>,
    before: &BTreeMap<(String, String), f64>,
    result: &str,
) -> Result<(), String> {
    for (key, was) in before {
        let by = if key.1 == result { 1.0 } else { 0.0 };
        if now.get(key) != Some(&(was + by)) {
            return Err(format!("{key:?}: {:?}, was {was}", now.get(key)));
        }
    }
    Ok(())
}

/// Both instances watch one policies file: a good edit counts one `ok`
/// load and moves the last good load's time; a broken one counts one
/// `error` and fires RatekeeperPoliciesReloadFailed on both.
pub async fn reloads_seen(prom: &Prometheus, instances: &[Instance], policies: &Path) {
    let expr = r#"ratekeeper_reloads_total{file="policies"}"#;
    let before = reloads(&prom.query(expr).await.unwrap());
    assert_eq!(before.len(), 4, "{before:?}");
    let written = super::unix_now();
    super::write_atomically(policies, &format!("{POLICIES}{EXPORT}"));
    prom.until("one more good load", expr, |s| {
        moved(&reloads(s), &before, "ok")
    })
    .await;
    let expr_at = r#"ratekeeper_last_reload_timestamp_seconds{file="policies"}"#;
    prom.until("the last good load's time moved", expr_at, |s| {
        for instance in instances {
            let at = one(s, instance)?;
            if at < written {
                return Err(format!("{}: {at} < {written}", instance.store));
            }
        }
        Ok(())
    })
    .await;

    let before = reloads(&prom.query(expr).await.unwrap());
    super::write_atomically(policies, &format!("{POLICIES}{EXPORT}{BROKEN}"));
    prom.until("one refused load", expr, |s| {
        moved(&reloads(s), &before, "error")
    })
    .await;
    alerted(
        prom,
        "RatekeeperPoliciesReloadFailed",
        instances,
        &["firing"],
    )
    .await;
}

/// Waits until `alert` is active in one of `states` for each of
/// `instances`, and for no other instance.
async fn alerted(prom: &Prometheus, alert: &str, instances: &[Instance], states: &[&str]) {
    let wanted: BTreeSet<&str> = instances.iter().map(|i| i.addr.as_str()).collect();
    let what = format!("{alert} {states:?} on {wanted:?}");
    let since = std::time::Instant::now();
    let seen = eventually(&what, async || {
        let alerts = prom.alerts().await?;
        let active: Vec<_> = alerts
            .iter()
            .filter(|(labels, _)| labels.get("alertname").map(String::as_str) == Some(alert))
            .collect();
        let on: BTreeSet<&str> = active
            .iter()
            .filter(|(_, state)| states.contains(&state.as_str()))
            .map(|(labels, _)| labels.get("instance").map_or("", String::as_str))
            .collect();
        if on == wanted {
            Ok(active
                .iter()
                .map(|(_, state)| state.clone())
                .collect::<Vec<_>>())
        } else {
            Err(format!("active: {active:?}"))
        }
    })
    .await;
    eprintln!(
        "{alert}: {:?} after {:.1} s",
        seen,
        since.elapsed().as_secs_f64()
    );
}

/// Redis killed: once the Redis instance says it is not ready, every
/// check sent to it is degraded and counted so; its store is down, the
/// embedded one's is not, and the store-down and degraded alerts are at
/// least pending for it alone (`for: 1m`: firing is not waited for).
pub async fn outage_seen(
    prom: &Prometheus,
    http: &reqwest::Client,
    instances: &[Instance],
    redis: &mut RedisServer,
    sent: &mut [Sent; 2],
) {
    redis.kill();
    let readyz = format!("http://{}/readyz", instances[0].addr);
    eventually("the Redis instance to say it is not ready", async || {
        let status = http
            .get(&readyz)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .status();
        if status == 503 {
            Ok(())
        } else {
            Err(format!("/readyz {status}"))
        }
    })
    .await;
    for n in 0..OUTAGE_CHECKS {
        let key = format!("outage-{n}");
        super::check(http, &instances[0], "search", &key, &mut sent[0]).await;
    }
    assert_eq!(
        sent[0].degraded, OUTAGE_CHECKS as u64,
        "not every outage check was degraded"
    );
    outage_counted(prom, instances, sent).await;
}

/// The outage as Prometheus sees it: every degraded answer counted, the
/// Redis instance's store down and the embedded one's up, and the alerts.
async fn outage_counted(prom: &Prometheus, instances: &[Instance], sent: &[Sent; 2]) {
    let expr = "sum by (instance) (ratekeeper_degraded_total)";
    prom.until("every degraded answer counted", expr, |s| {
        for (instance, sent) in instances.iter().zip(sent) {
            let v = one(s, instance)?;
            if v != sent.degraded as f64 {
                return Err(format!("{}: {v}, sent {}", instance.store, sent.degraded));
            }
        }
        Ok(())
    })
    .await;
    eprintln!("redis: {OUTAGE_CHECKS} outage checks, all counted degraded");
    prom.until(
        "the store down on the Redis instance only",
        "ratekeeper_store_up",
        |s| {
            let up = (one(s, &instances[0])?, one(s, &instances[1])?);
            if up == (0.0, 1.0) {
                Ok(())
            } else {
                Err(format!("{up:?}"))
            }
        },
    )
    .await;
    let at_least_pending = ["pending", "firing"];
    alerted(
        prom,
        "RatekeeperStoreDown",
        &instances[..1],
        &at_least_pending,
    )
    .await;
    alerted(
        prom,
        "RatekeeperDegradedAnswers",
        &instances[..1],
        &at_least_pending,
    )
    .await;
}

/// Every target of the dashboard, run as Grafana would run it over the
/// test's span: `$instance` both instances (all that its variable offers),
/// `$policy` one the traffic used. Each must parse and hold a finite value;
/// all failures are listed at once.
pub async fn every_dashboard_query_answers(
    prom: &Prometheus,
    instances: &[Instance],
    sent: &[Sent; 2],
    started: f64,
) {
    let board = dashboard::load();
    let end = super::unix_now();
    // What Grafana gives a panel of a 1 h view at its default 15 s scrape
    // interval ($__rate_interval: 4 scrape intervals); $__range: the span.
    let builtins = [
        ("__interval", "1s".to_string()),
        ("__rate_interval", "1m".to_string()),
        ("__range", format!("{}s", (end - started).ceil())),
    ];
    let addrs: BTreeSet<String> = instances.iter().map(|i| i.addr.clone()).collect();
    let policies: BTreeSet<String> = sent[0].checks.keys().map(|k| k.0.clone()).collect();
    let (values, mut failures) =
        dashboard::resolve_variables(prom, &board, &builtins, |name, offered| {
            let offered_set: BTreeSet<String> = offered.iter().cloned().collect();
            match name {
                "instance" => assert_eq!(offered_set, addrs, "$instance offers"),
                "policy" => assert!(
                    offered_set.is_superset(&policies),
                    "$policy offers {offered:?}"
                ),
                _ => {}
            }
            match name {
                "policy" => vec!["api".to_string()],
                _ => offered.to_vec(),
            }
        })
        .await;
    let (count, more) = dashboard::run_targets(prom, &board, &values, (started, end)).await;
    failures.extend(more);
    assert!(
        failures.is_empty(),
        "{} dashboard queries failed ({count} targets, {} variables):\n{}",
        failures.len(),
        dashboard::variables(&board, "query").len(),
        failures.join("\n")
    );
    eprintln!("dashboard: {count} queries answered, with {values:?}");
}
