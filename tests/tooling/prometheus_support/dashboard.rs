//! The Grafana dashboard `deploy/grafana/ratekeeper.json` as the tests read
//! it: every PromQL target of every panel (rows' nested panels included),
//! the template variables' queries, and the substitution Grafana makes
//! before a query reaches Prometheus.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Prometheus;

pub const PATH: &str = "deploy/grafana/ratekeeper.json";

pub fn load() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PATH);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{PATH}: not JSON: {e}"))
}

/// One query of one panel.
#[derive(Debug)]
pub struct Target {
    pub panel: String,
    pub ref_id: String,
    pub expr: String,
    /// A table or stat of the last value (`instant`), not a graph.
    pub instant: bool,
}

/// Every panel that is not a row: top-level ones and those a row holds
/// (a collapsed row keeps its panels inside it).
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            out.extend(panel["panels"].as_array().into_iter().flatten());
        } else {
            out.push(panel);
        }
    }
    out
}

pub fn targets(dashboard: &Value) -> Vec<Target> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(Target {
                panel: panel["title"].as_str().unwrap_or("?").to_string(),
                ref_id: target["refId"].as_str().unwrap_or("?").to_string(),
                expr: target["expr"].as_str().unwrap_or_default().to_string(),
                instant: target["instant"] == true && target["range"] != true,
            });
        }
    }
    out
}

/// The template variables of `kind` in the dashboard's order, which is
/// the order Grafana resolves them in (a later one may use an earlier one).
pub fn variables<'a>(dashboard: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    let list = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    list.iter()
        .filter(|v| v["type"] == kind)
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect()
}

/// A query variable's query text (Grafana writes it as a string, or as an
/// object with `query` since 10; `definition` is what the editor shows).
pub fn variable_query(variable: &Value) -> String {
    let query = &variable["query"];
    query["query"]
        .as_str()
        .or(query.as_str())
        .or(variable["definition"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// `label_values(METRIC_OR_SELECTOR, LABEL)` or `label_values(LABEL)`:
/// (the series matcher, if any, and the label).
pub fn label_values(query: &str) -> Option<(Option<String>, String)> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    // The label is the last argument; the matcher may hold commas.
    match inner.rsplit_once(',') {
        Some((matcher, label)) => Some((Some(matcher.trim().into()), label.trim().into())),
        None => Some((None, inner.trim().into())),
    }
}

/// `text` with every `$name`, `${name}` and `${name:format}` replaced by
/// `values[name]`; a variable that has no value is an error naming it.
pub fn substitute(text: &str, values: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, used) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or("an unclosed ${")?;
            let name = braced[..end].split(':').next().unwrap_or_default();
            (name, end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = values
            .get(name)
            .ok_or_else(|| format!("${name} is not a dashboard variable"))?;
        out.push_str(value);
        rest = &after[used..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Grafana's value of a multi-value variable in a PromQL regex matcher:
/// each value's regex metacharacters escaped (`\\.` in a PromQL string),
/// the values joined into one alternation.
pub fn regex_of(values: &[String]) -> String {
    let escaped: Vec<String> = values
        .iter()
        .map(|v| {
            v.chars().fold(String::new(), |mut s, c| {
                if "$^*{}[]'+?.()|".contains(c) {
                    s.push_str("\\\\");
                }
                s.push(c);
                s
            })
        })
        .collect();
    format!("({})", escaped.join("|"))
}

/// Resolves the query variables in order, as Grafana does: each one's
/// `label_values(...)` run against `prom` with the values chosen so far,
/// then `choose(name, offered)` picks its values. Returns the values of
/// every variable (the built-in ones of `builtins` included) and a line
/// per variable whose query failed or offered nothing.
pub async fn resolve_variables(
    prom: &Prometheus,
    dashboard: &Value,
    builtins: &[(&str, String)],
    mut choose: impl FnMut(&str, &[String]) -> Vec<String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut values: BTreeMap<String, String> = builtins
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    let mut failures = Vec::new();
    for (name, variable) in variables(dashboard, "query") {
        let query = variable_query(variable);
        let offered = match substitute(&query, &values) {
            Err(e) => Err(e),
            Ok(query) => match label_values(&query) {
                None => Err("not label_values(...): the test cannot run it".to_string()),
                Some((matcher, label)) => prom.label_values(&label, matcher.as_deref()).await,
            },
        };
        let chosen = match offered {
            Ok(offered) if !offered.is_empty() => regex_of(&choose(name, &offered)),
            failed => {
                let why = failed.err().unwrap_or_else(|| "offers nothing".into());
                failures.push(format!("variable ${name}: {query}\n    {why}"));
                // Any value, so the panels' own problems still show.
                ".*".to_string()
            }
        };
        values.insert(name.to_string(), chosen);
    }
    (values, failures)
}

/// Runs every target as its panel would over `[start, end]` (a range query
/// at a 1 s step; an instant one at `end` for tables): a line per target
/// that does not parse, or whose answer holds no finite value at all.
pub async fn run_targets(
    prom: &Prometheus,
    dashboard: &Value,
    values: &BTreeMap<String, String>,
    (start, end): (f64, f64),
) -> (usize, Vec<String>) {
    let targets = targets(dashboard);
    let mut failures = Vec::new();
    for target in &targets {
        let name = format!("panel {:?} target {}", target.panel, target.ref_id);
        let expr = match substitute(&target.expr, values) {
            Ok(expr) if !expr.trim().is_empty() => expr,
            Ok(_) => {
                failures.push(format!("{name}: no PromQL expression"));
                continue;
            }
            Err(e) => {
                failures.push(format!("{name}: {}\n    {e}", target.expr));
                continue;
            }
        };
        let answer = if target.instant {
            let samples = prom.query_at(&expr, Some(end)).await;
            samples.map(|s| s.iter().map(|s| s.value).collect::<Vec<_>>())
        } else {
            let series = prom.query_range(&expr, start, end, "1s").await;
            series.map(|s| s.into_iter().flatten().collect())
        };
        match answer {
            Ok(values) if values.iter().any(|v| v.is_finite()) => {}
            Ok(values) => failures.push(format!(
                "{name}: {expr}\n    no finite value ({} values: {values:?})",
                values.len()
            )),
            Err(e) => failures.push(format!("{name}: {expr}\n    {e}")),
        }
    }
    (targets.len(), failures)
}

#[test]
fn substitution_and_label_values_parse_as_grafana_writes_them() {
    let values = BTreeMap::from([
        ("instance".to_string(), regex_of(&["127.0.0.1:9".into()])),
        ("__rate_interval".to_string(), "5m".to_string()),
    ]);
    assert_eq!(
        substitute(r#"x{instance=~"$instance"}[${__rate_interval}]"#, &values).unwrap(),
        r#"x{instance=~"(127\\.0\\.0\\.1:9)"}[5m]"#
    );
    assert!(
        substitute("x[$nope]", &values)
            .unwrap_err()
            .contains("$nope")
    );
    assert_eq!(
        label_values(r#"label_values(m{a="1,2"}, policy)"#),
        Some((Some(r#"m{a="1,2"}"#.into()), "policy".into()))
    );
    assert_eq!(
        label_values("label_values(job)"),
        Some((None, "job".into()))
    );
}
