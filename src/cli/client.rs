//! `ratekeeper check`, `reset` and `policies show`: what an on-call
//! engineer types against a running instance instead of hand-written curl
//! bodies. Each builds the same JSON body the API documents, prints a table
//! (or the answer itself with `--json`), and exits by what it got.

use serde_json::{Map, Value, json};

use super::remote::{Client, Remote, RemoteError};

/// `check` exits with this when the check was denied (0: allowed), so a
/// script can branch on it; errors are 1, 64 and 69 (see `remote`).
pub const EXIT_DENIED: u8 = 3;

/// Which limits a check or reset applies: a policy, or one rule inline.
#[derive(Debug, clap::Args)]
pub struct Form {
    /// The client key.
    #[arg(long)]
    pub key: String,
    /// A policy of the instance's policies file.
    #[arg(long, conflicts_with_all = ["limit", "window", "algorithm", "burst", "limits"])]
    pub policy: Option<String>,
    /// The single-rule form: this many units...
    #[arg(long, requires = "window", conflicts_with = "limits")]
    pub limit: Option<u64>,
    /// ...per this window (`1m`, `1h`, or seconds).
    #[arg(long, requires = "limit")]
    pub window: Option<String>,
    /// fixed_window, sliding_window (default), sliding_log, token_bucket, gcra.
    #[arg(long, requires = "limit")]
    pub algorithm: Option<String>,
    /// Bucket capacity (token_bucket, gcra).
    #[arg(long, requires = "limit")]
    pub burst: Option<u64>,
    /// The inline form: the `limits` array as JSON, e.g.
    /// '[{"limit":10,"window":"1s"},{"limit":1000,"window":"1d"}]'.
    #[arg(long, value_name = "JSON")]
    pub limits: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(flatten)]
    pub form: Form,
    /// Units to spend; 0 asks without spending.
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
    /// Wait up to this many milliseconds for the units (blocking acquire).
    #[arg(long, value_name = "MS")]
    pub wait_ms: Option<u64>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(flatten)]
    pub form: Form,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Only this policy.
    pub name: Option<String>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

impl Form {
    /// The request body's form fields.
    fn body(&self) -> Result<Map<String, Value>, RemoteError> {
        let mut body = Map::new();
        body.insert("key".into(), json!(self.key));
        if let Some(policy) = &self.policy {
            body.insert("policy".into(), json!(policy));
        } else if let Some(limits) = &self.limits {
            let limits: Value = serde_json::from_str(limits)
                .map_err(|e| RemoteError::Usage(format!("--limits: not JSON: {e}")))?;
            body.insert("limits".into(), limits);
        } else if let (Some(limit), Some(window)) = (self.limit, &self.window) {
            body.insert("limit".into(), json!(limit));
            body.insert("window".into(), json!(window));
            if let Some(algorithm) = &self.algorithm {
                body.insert("algorithm".into(), json!(algorithm));
            }
            if let Some(burst) = self.burst {
                body.insert("burst".into(), json!(burst));
            }
        } else {
            return Err(RemoteError::Usage(
                "say which limits: --policy NAME, --limit N --window W, or --limits JSON".into(),
            ));
        }
        Ok(body)
    }
}

/// `ratekeeper check`: the exit code says allowed (0) or denied (3).
pub async fn check(args: CheckArgs) -> Result<u8, RemoteError> {
    let mut body = args.form.body()?;
    body.insert("cost".into(), json!(args.cost));
    if let Some(wait) = args.wait_ms {
        body.insert("wait_ms".into(), json!(wait));
    }
    let client = Client::new(&args.remote)?;
    let answer = client.post("/v1/check", &Value::Object(body)).await?;
    print(&answer, args.json, decision);
    Ok(if answer["allowed"] == true {
        0
    } else {
        EXIT_DENIED
    })
}

/// `ratekeeper reset`: the limits' state after the reset.
pub async fn reset(args: ResetArgs) -> Result<u8, RemoteError> {
    let body = args.form.body()?;
    let client = Client::new(&args.remote)?;
    let answer = client.post("/v1/reset", &Value::Object(body)).await?;
    print(&answer, args.json, |a| {
        format!("reset; now:\n{}", decision(a))
    });
    Ok(0)
}

/// `ratekeeper policies show`: the policies in force.
pub async fn show(args: ShowArgs) -> Result<u8, RemoteError> {
    let client = Client::new(&args.remote)?;
    let mut answer = client.get("/v1/policies").await?;
    if let Some(name) = &args.name {
        let mut found = 0;
        for list in ["policies", "hierarchies"] {
            let kept: Vec<Value> = answer[list]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|p| p["name"] == **name)
                .collect();
            found += kept.len();
            answer[list] = Value::Array(kept);
        }
        if found == 0 {
            return Err(RemoteError::Usage(format!(
                "no policy {name:?} is in force"
            )));
        }
    }
    print(&answer, args.json, policies);
    Ok(0)
}

pub(super) fn print(answer: &Value, json: bool, table: impl Fn(&Value) -> String) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(answer).unwrap_or_default()
        );
    } else {
        print!("{}", table(answer));
    }
}

fn n(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// A window in the unit it was likely written in: `1s`, `15m`, `1d`.
fn human_ms(ms: u64) -> String {
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A check's answer: the verdict line, then each limit when there are several.
fn decision(a: &Value) -> String {
    let verdict = if a["allowed"] == true {
        "ALLOWED"
    } else {
        "DENIED"
    };
    let mut out = format!(
        "{verdict}  limit {}  remaining {}  retry after {} ms  reset after {} ms{}{}\n",
        n(&a["limit"]),
        n(&a["remaining"]),
        n(&a["retry_after_ms"]),
        n(&a["reset_after_ms"]),
        if a["degraded"] == true {
            "  DEGRADED (the store did not answer)"
        } else {
            ""
        },
        if a["shadow"] == true {
            "  (shadow: would be denied)"
        } else {
            ""
        },
    );
    let Some(limits) = a["limits"].as_array() else {
        return out;
    };
    let rows = limits.iter().map(|l| {
        [
            l["name"].as_str().unwrap_or_default().to_string(),
            l["algorithm"].as_str().unwrap_or_default().to_string(),
            n(&l["limit"]).to_string(),
            n(&l["burst"]).to_string(),
            human_ms(n(&l["window_ms"])),
            if l["allowed"] == true { "yes" } else { "no" }.to_string(),
            n(&l["remaining"]).to_string(),
            format!("{}ms", n(&l["retry_after_ms"])),
        ]
    });
    out.push_str(&grid(
        [
            "NAME",
            "ALGORITHM",
            "LIMIT",
            "BURST",
            "WINDOW",
            "ALLOWED",
            "REMAINING",
            "RETRY_AFTER",
        ],
        rows.collect(),
    ));
    out
}

/// `GET /v1/policies`: the file line, then a row per limit of each policy.
fn policies(a: &Value) -> String {
    let mut out = format!(
        "file {}  sha256 {}  loaded {}\n",
        a["file"].as_str().unwrap_or("(none)"),
        a["sha256"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("-"),
        a["loaded_at"].as_str().unwrap_or("-"),
    );
    let mut rows = Vec::new();
    for p in a["policies"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let flags = [
            (p["shadow"] == true).then_some("shadow"),
            p["failure_mode"].as_str(),
            p["overrides"]
                .as_object()
                .filter(|o| !o.is_empty())
                .map(|_| "overrides"),
        ];
        let flags: Vec<&str> = flags.into_iter().flatten().collect();
        for l in p["limits"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            rows.push([
                p["name"].as_str().unwrap_or_default().to_string(),
                l["name"].as_str().unwrap_or_default().to_string(),
                l["algorithm"].as_str().unwrap_or_default().to_string(),
                n(&l["limit"]).to_string(),
                n(&l["burst"]).to_string(),
                human_ms(n(&l["window_ms"])),
                flags.join(","),
            ]);
        }
    }
    out.push_str(&grid(
        [
            "POLICY",
            "LIMIT",
            "ALGORITHM",
            "N",
            "BURST",
            "WINDOW",
            "NOTES",
        ],
        rows,
    ));
    out.push_str(&hierarchies(a));
    out
}

/// The policies with levels: a row per level (nothing when there are none).
fn hierarchies(a: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let list = a["hierarchies"].as_array().map(Vec::as_slice);
    let rows: Vec<[String; 4]> = list
        .unwrap_or_default()
        .iter()
        .flat_map(|h| {
            let levels = h["levels"].as_array().cloned().unwrap_or_default();
            levels.into_iter().map(|l| {
                [
                    text(&h["name"]),
                    text(&l["name"]),
                    text(&l["policy"]),
                    text(&l["key"]),
                ]
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!("\n{}", grid(["POLICY", "LEVEL", "USES", "KEY"], rows))
}

/// Columns padded to their widest cell.
pub(super) fn grid<const W: usize>(head: [&str; W], rows: Vec<[String; W]>) -> String {
    let mut widths = head.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(head.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_decision_prints_its_verdict_and_each_limit() {
        let answer = json!({"allowed": false, "limit": 10, "remaining": 0, "retry_after_ms": 80,
            "reset_after_ms": 900, "degraded": false, "policy": "api", "shadow": false,
            "limits": [{"name": "burst", "algorithm": "token_bucket", "limit": 10, "burst": 20,
                "window_ms": 1000, "allowed": false, "remaining": 0, "retry_after_ms": 80,
                "reset_after_ms": 900}]});
        let text = decision(&answer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "DENIED  limit 10  remaining 0  retry after 80 ms  reset after 900 ms"
        );
        assert_eq!(
            lines[1],
            "NAME   ALGORITHM     LIMIT  BURST  WINDOW  ALLOWED  REMAINING  RETRY_AFTER"
        );
        assert_eq!(
            lines[2],
            "burst  token_bucket  10     20     1s      no       0          80ms"
        );
    }

    #[test]
    fn a_form_needs_its_limits() {
        let form = Form {
            key: "k".into(),
            policy: None,
            limit: None,
            window: None,
            algorithm: None,
            burst: None,
            limits: None,
        };
        assert!(matches!(form.body(), Err(RemoteError::Usage(_))));
    }
}
