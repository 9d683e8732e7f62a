//! What the traffic did, read back from Prometheus: decisions by policy,
//! limit and decision, their increase, latency quantiles, the deny cache.

use std::collections::{BTreeMap, BTreeSet};

use super::{Instance, Sent};
use crate::prometheus_support::{Prometheus, Sample};

/// The samples of `instance` as a map of the `labels` values to counts,
/// zeros left out (the series of every limit exist at 0 from startup).
fn counts(samples: &[Sample], instance: &str, labels: &[&str]) -> BTreeMap<Vec<String>, f64> {
    let mine = samples.iter().filter(|s| s.label("instance") == instance);
    mine.filter(|s| s.value != 0.0)
        .map(|s| {
            let key = labels.iter().map(|l| s.label(l).to_string()).collect();
            (key, s.value)
        })
        .collect()
}

fn sent_counts(sent: &Sent) -> BTreeMap<Vec<String>, f64> {
    let entries = sent.checks.iter();
    entries
        .map(|((p, l, d), n)| (vec![p.clone(), l.clone(), d.clone()], *n as f64))
        .collect()
}

/// Every check counted exactly, by instance, policy, limit and decision,
/// and a decision rate recorded for each policy and decision sent.
pub async fn decisions_counted(prom: &Prometheus, instances: &[Instance], sent: &[Sent; 2]) {
    let expr = "sum by (instance, policy, limit, decision) (ratekeeper_checks_total)";
    prom.until("every check counted", expr, |samples| {
        for (instance, sent) in instances.iter().zip(sent) {
            let seen = counts(samples, &instance.addr, &["policy", "limit", "decision"]);
            let expected = sent_counts(sent);
            if seen != expected {
                return Err(format!("{}: {seen:?}, sent {expected:?}", instance.store));
            }
        }
        Ok(())
    })
    .await;
    prom.until(
        "a decision rate per policy and decision",
        "ratekeeper:checks:rate1m",
        |s| {
            for (instance, sent) in instances.iter().zip(sent) {
                let seen: BTreeSet<_> = counts(s, &instance.addr, &["policy", "decision"])
                    .into_keys()
                    .collect();
                let expected: BTreeSet<_> = sent
                    .checks
                    .keys()
                    .map(|(p, _, d)| vec![p.clone(), d.clone()])
                    .collect();
                if seen != expected {
                    return Err(format!(
                        "{}: rates of {seen:?}, sent {expected:?}",
                        instance.store
                    ));
                }
            }
            Ok(())
        },
    )
    .await;
}

/// The value of the one sample of `instance`.
pub fn one(samples: &[Sample], instance: &Instance) -> Result<f64, String> {
    let mut mine = samples
        .iter()
        .filter(|s| s.label("instance") == instance.addr);
    match (mine.next(), mine.next()) {
        (Some(sample), None) => Ok(sample.value),
        _ => Err(format!("not one sample of {}", instance.store)),
    }
}

/// The smallest bucket bound at or above `seconds` (+Inf past the last).
fn bucket_above(bounds: &[f64], seconds: f64) -> f64 {
    let above = bounds.iter().copied().find(|&b| b >= seconds);
    above.unwrap_or(f64::INFINITY)
}

/// The bucket bounds (`le`) of the histogram `name`, in order.
async fn bucket_bounds(prom: &Prometheus, name: &str) -> Vec<f64> {
    let expr = format!("count by (le) ({name}_bucket)");
    let samples = prom.query(&expr).await.unwrap();
    let mut bounds: Vec<f64> = samples
        .iter()
        .map(|s| s.label("le").parse().unwrap())
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds
}

/// p99 latency from the histograms, as the recording rules give it. The
/// service measures each check inside the test's round trip, so its k-th
/// fastest check took at most the k-th fastest round trip, and
/// histogram_quantile answers within the bucket holding that rank: at most
/// that bucket's bound. A store call is inside its check: at most the
/// bucket of the slowest round trip.
pub async fn latency_within_buckets(prom: &Prometheus, instances: &[Instance], sent: &[Sent; 2]) {
    let checks = bucket_bounds(prom, "ratekeeper_check_duration_seconds").await;
    let stores = bucket_bounds(prom, "ratekeeper_store_duration_seconds").await;
    for (instance, sent) in instances.iter().zip(sent) {
        let mut trips = sent.round_trips.clone();
        trips.sort_by(f64::total_cmp);
        let rank = (0.99 * trips.len() as f64).ceil() as usize;
        let check_bound = bucket_above(&checks, trips[rank - 1]);
        let store_bound = bucket_above(&stores, trips[trips.len() - 1]);
        for (rule, bound) in [
            ("ratekeeper:check_duration_seconds:p99_5m", check_bound),
            ("ratekeeper:store_duration_seconds:p99_5m", store_bound),
        ] {
            let expr = format!("{rule}{{instance=\"{}\"}}", instance.addr);
            let p99 = prom
                .until(&format!("{rule} in (0, {bound}]"), &expr, |s| {
                    let v = one(s, instance)?;
                    if v > 0.0 && v <= bound {
                        Ok(v)
                    } else {
                        Err(format!("{v}"))
                    }
                })
                .await;
            eprintln!("{}: {rule} = {p99:.6} s (bound {bound} s)", instance.store);
        }
    }
}

/// The value of the unlabelled series `name` in an exposition.
fn exposed(text: &str, name: &str) -> f64 {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '));
    line.unwrap_or_else(|| panic!("no {name}")).parse().unwrap()
}

pub async fn get_text(http: &reqwest::Client, url: &str) -> String {
    http.get(url).send().await.unwrap().text().await.unwrap()
}

/// The deny cache answered some denials of each instance, at most all but
/// each key's first; Prometheus holds the instance's own count; and the
/// recorded ratio is hits over denials. Both are rated over the same
/// scrapes from 0, so Prometheus's extrapolation cancels: exact.
pub async fn deny_cache_ratio(
    prom: &Prometheus,
    http: &reqwest::Client,
    instances: &[Instance],
    sent: &[Sent; 2],
) {
    for (instance, sent) in instances.iter().zip(sent) {
        let text = get_text(http, &format!("http://{}/metrics", instance.addr)).await;
        let hits = exposed(&text, "ratekeeper_deny_cache_hits_total");
        let most = (sent.denied - sent.denied_keys.len() as u64) as f64;
        assert!(
            hits > 0.0 && hits <= most,
            "{}: {hits} cache hits of {most}",
            instance.store
        );
        let expr = format!(
            "ratekeeper_deny_cache_hits_total{{instance=\"{}\"}}",
            instance.addr
        );
        prom.until("the cache hits scraped", &expr, |s| {
            let v = one(s, instance)?;
            if v == hits {
                Ok(())
            } else {
                Err(format!("{v}, exposed {hits}"))
            }
        })
        .await;
        let ratio = hits / sent.denied as f64;
        let expr = format!(
            "ratekeeper:deny_cache_hit_ratio:rate5m{{instance=\"{}\"}}",
            instance.addr
        );
        prom.until(&format!("a hit ratio of {ratio}"), &expr, |s| {
            let v = one(s, instance)?;
            if (v - ratio).abs() < 1e-9 && v > 0.0 && v <= 1.0 {
                Ok(())
            } else {
                Err(format!("{v}"))
            }
        })
        .await;
        eprintln!(
            "{}: deny cache {hits} hits of {} denials: ratio {ratio:.3}",
            instance.store, sent.denied
        );
    }
}

/// `increase()` over a window holding every scrape agrees with the counts
/// sent, within Prometheus's extrapolation: none before the first sample,
/// which is 0 (a counter is not extrapolated below zero), and after the
/// last one at most 1.1 average scrape intervals, so at most a factor of
/// 1 + 1.1 / (samples - 1) above the true count.
pub async fn increase_covers_the_traffic(
    prom: &Prometheus,
    instances: &[Instance],
    sent: &[Sent; 2],
) {
    let at = super::unix_now();
    let expr =
        "sum by (instance, policy, limit, decision) (increase(ratekeeper_checks_total[10m]))";
    let increases = prom.query_at(expr, Some(at)).await.unwrap();
    let scrapes = prom
        .query_at("count_over_time(ratekeeper_build_info[10m])", Some(at))
        .await;
    let scrapes = scrapes.unwrap();
    for (instance, sent) in instances.iter().zip(sent) {
        let samples = one(&scrapes, instance).unwrap();
        let slack = 1.1 / (samples - 1.0);
        let seen = counts(&increases, &instance.addr, &["policy", "limit", "decision"]);
        let expected = sent_counts(sent);
        let keys: BTreeSet<_> = seen.keys().chain(expected.keys()).collect();
        let mut worst: f64 = 1.0;
        for key in keys {
            let v = seen.get(key).copied().unwrap_or(0.0);
            let n = expected.get(key).copied().unwrap_or(0.0);
            assert!(
                v >= n - 1e-9 && v <= n * (1.0 + slack) + 1e-9,
                "{} {key:?}: increase {v} for {n} checks ({samples} scrapes)",
                instance.store
            );
            worst = worst.max(v / n);
        }
        eprintln!(
            "{}: increase up to {:.1}% above the counts (allowed {:.1}%, {samples} scrapes)",
            instance.store,
            (worst - 1.0) * 100.0,
            slack * 100.0
        );
    }
}
