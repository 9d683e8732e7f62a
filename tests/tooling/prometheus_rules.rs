//! Issue 16, part 3: the alert and recording rules under
//! `deploy/prometheus/`, checked by the real `promtool` (Debian's
//! `prometheus` package, which `scripts/test.sh` installs): they parse, and
//! their unit tests (`tests/prometheus/alerts_test.yml`) fire each alert on
//! a failing instance and keep it quiet on a healthy one. The Prometheus
//! Operator's PrometheusRule (`deploy/kubernetes/monitoring`) is generated
//! from them here: `RATEKEEPER_BLESS=1` rewrites it, otherwise it must match.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_norway::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn promtool() -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("promtool"))
        .find(|path| path.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "promtool not found: it comes with Prometheus. On Debian/Ubuntu: \
             `sudo apt-get install prometheus`, or run `bash scripts/test.sh`, which installs it"
        )
    })
}

/// Runs promtool in the repository root; its output, which must say success.
fn promtool_ok(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

fn yaml(path: &str) -> Value {
    serde_norway::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap()
}

/// Every rule of every group of a rules file.
fn rules(path: &str) -> Vec<Value> {
    yaml(path)["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .collect()
}

#[test]
fn the_rules_parse() {
    let out = promtool_ok(&[
        "check",
        "rules",
        "deploy/prometheus/alerts.yml",
        "deploy/prometheus/recording.yml",
    ]);
    assert_eq!(out.matches("SUCCESS").count(), 2, "{out}");
}

#[test]
fn every_alert_fires_on_failure_and_stays_quiet_when_healthy() {
    let out = promtool_ok(&["test", "rules", "tests/prometheus/alerts_test.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");

    // promtool checks only the alerts a test names: every alert must be
    // named, both firing and quiet, and carry a runbook.
    let tests = yaml("tests/prometheus/alerts_test.yml");
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in tests["tests"].as_sequence().unwrap() {
        for check in test["alert_rule_test"].as_sequence().unwrap() {
            let name = check["alertname"].as_str().unwrap().to_string();
            let expected = check["exp_alerts"].as_sequence().unwrap();
            if expected.is_empty() {
                quiet.insert(name);
            } else {
                fired.insert(name);
            }
        }
    }
    let alerts = rules("deploy/prometheus/alerts.yml");
    assert!(alerts.len() >= 10, "{} alerts", alerts.len());
    let docs = std::fs::read_to_string(root().join("docs/observability.md")).unwrap();
    for alert in &alerts {
        let name = alert["alert"].as_str().unwrap();
        assert!(
            docs.contains(&format!("| `{name}` |")),
            "docs/observability.md does not list {name}"
        );
        assert!(fired.contains(name), "no test fires {name}");
        assert!(quiet.contains(name), "no test keeps {name} quiet");
        let runbook = alert["annotations"]["runbook"].as_str().unwrap_or_default();
        assert!(runbook.len() > 20, "{name} has no runbook line");
    }
}

/// The metric names the service registers (each `"ratekeeper_..."` string
/// literal under `src/`).
fn registered_metrics() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for piece in text.split('"').skip(1).step_by(2) {
                    if piece.starts_with("ratekeeper_")
                        && piece.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        names.insert(piece.to_string());
                    }
                }
            }
        }
    }
    names
}

#[test]
fn the_rules_name_only_metrics_the_service_exports() {
    let registered = registered_metrics();
    let mut used = BTreeSet::new();
    for file in [
        "deploy/prometheus/alerts.yml",
        "deploy/prometheus/recording.yml",
    ] {
        for rule in rules(file) {
            let expr = rule["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("ratekeeper_") {
                    used.insert(word.to_string());
                }
            }
        }
    }
    assert!(used.len() >= 10, "{used:?}");
    for name in &used {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| registered.contains(*base))
            .unwrap_or(name);
        assert!(
            registered.contains(family),
            "the rules use {name}, which the service does not export"
        );
    }
}

/// The metrics table of `docs/observability.md` lists every metric the
/// service registers, and nothing else.
#[test]
fn the_docs_list_every_metric() {
    let docs = std::fs::read_to_string(root().join("docs/observability.md")).unwrap();
    let listed: BTreeSet<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("| `ratekeeper_"))
        .filter_map(|l| l.split('`').next())
        .filter(|name| !name.contains('{') && !name.contains(':'))
        .map(|name| format!("ratekeeper_{name}"))
        .collect();
    let registered = registered_metrics();
    // A bare "ratekeeper_" is a prefix in the source, not a metric.
    let missing: Vec<_> = registered
        .difference(&listed)
        .filter(|name| *name != "ratekeeper_")
        .collect();
    assert!(
        missing.is_empty(),
        "docs/observability.md lacks {missing:?}"
    );
}

/// The PrometheusRule of `deploy/kubernetes/monitoring`: generated from the
/// two rule files, so Kubernetes gets the rules tested here, not a copy
/// that drifts. `RATEKEEPER_BLESS=1` rewrites it.
const PROMETHEUS_RULE: &str = "deploy/kubernetes/monitoring/prometheusrule.yaml";

const PROMETHEUS_RULE_HEADER: &str = "\
# GENERATED from deploy/prometheus/alerts.yml and deploy/prometheus/recording.yml
# by tests/tooling/prometheus_rules.rs: do not edit. After changing either file, run
#   RATEKEEPER_BLESS=1 cargo test --test tooling prometheus_rules
# The Prometheus Operator loads it when its Prometheus's ruleSelector matches
# these labels (kube-prometheus-stack also wants `release: <its release>`).
";

/// The groups of `alerts.yml`, then those of `recording.yml`, in a
/// `monitoring.coreos.com/v1` PrometheusRule.
fn prometheus_rule() -> Value {
    let groups: Vec<Value> = ["alerts.yml", "recording.yml"]
        .iter()
        .flat_map(|file| {
            let doc = yaml(&format!("deploy/prometheus/{file}"));
            doc["groups"].as_sequence().unwrap().clone()
        })
        .collect();
    let rule = serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "ratekeeper",
            "labels": {"app.kubernetes.io/name": "ratekeeper"},
        },
        "spec": {"groups": []},
    });
    let mut rule: Value = serde_norway::to_value(rule).unwrap();
    rule["spec"]["groups"] = Value::Sequence(groups);
    rule
}

#[test]
fn the_prometheus_rule_is_generated_from_the_rule_files() {
    let expected = prometheus_rule();
    let path = root().join(PROMETHEUS_RULE);
    if std::env::var_os("RATEKEEPER_BLESS").is_some_and(|v| v == "1") {
        let body = serde_norway::to_string(&expected).unwrap();
        std::fs::write(&path, format!("{PROMETHEUS_RULE_HEADER}{body}")).unwrap();
    }
    let regenerate = "regenerate it: RATEKEEPER_BLESS=1 cargo test --test tooling prometheus_rules";
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{PROMETHEUS_RULE}: {e}; {regenerate}"));
    assert!(
        text.starts_with(PROMETHEUS_RULE_HEADER),
        "{PROMETHEUS_RULE} lost its header saying it is generated; {regenerate}"
    );
    let committed: Value = serde_norway::from_str(&text).unwrap();
    assert!(
        committed == expected,
        "{PROMETHEUS_RULE} differs from deploy/prometheus/*.yml; {regenerate}"
    );
    // The operator's CRD takes the groups of a rule file as they are; the
    // rule count guards against an empty rendering equal to an empty file.
    let rules: usize = ["alerts.yml", "recording.yml"]
        .iter()
        .map(|f| rules(&format!("deploy/prometheus/{f}")).len())
        .sum();
    let spec_groups = committed["spec"]["groups"].as_sequence().unwrap();
    let committed_rules: usize = spec_groups
        .iter()
        .map(|g| g["rules"].as_sequence().unwrap().len())
        .sum();
    assert_eq!(committed_rules, rules);
}
