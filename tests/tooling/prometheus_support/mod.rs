//! A real Prometheus for the tests: Debian's `prometheus` binary on a free
//! loopback port with a configuration the test writes, its data in a temp
//! directory, killed with the test; and a client of its HTTP API that polls
//! until a condition holds, within a deadline, saying what it last saw.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod dashboard;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::binary::KillOnDrop;
use crate::support::{free_port, fresh_dir};

/// How long a poll waits for Prometheus to see something: a few scrape
/// and evaluation intervals (1 s each here), with room for a loaded machine.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// `prometheus`, from the PATH or Debian's /usr/bin.
pub fn binary(name: &str) -> PathBuf {
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let found = dirs
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "{name} not found: the Prometheus tests run the real one. On Debian/Ubuntu: \
             `sudo apt-get install --no-install-recommends prometheus` (it brings promtool too), \
             or run `bash scripts/test.sh`, which installs it"
        )
    })
}

/// One sample of an instant query: its labels and value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// A running Prometheus; killed on drop, and its data removed.
pub struct Prometheus {
    child: KillOnDrop,
    pub base: String,
    dir: PathBuf,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus with `config` (a prometheus.yml) and waits until
    /// it is ready. A port taken meanwhile by another process: another one.
    pub async fn start(config: &str) -> Prometheus {
        let dir = fresh_dir("prometheus");
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = spawn(&dir, port).await {
                return Prometheus {
                    child,
                    base: format!("http://127.0.0.1:{port}"),
                    dir,
                    http: reqwest::Client::new(),
                };
            }
        }
        panic!("Prometheus did not start; its log:\n{}", log_of(&dir));
    }

    /// What Prometheus logged, for a failure message.
    pub fn log(&self) -> String {
        log_of(&self.dir)
    }

    /// GET `path` with `params`: the API's `data`, or its error (a query
    /// that does not parse, say) as text.
    pub async fn get(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let response = self.http.get(&url).query(params).send().await;
        let body: Value = response
            .map_err(|e| format!("GET {path}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("GET {path}: not JSON: {e}"))?;
        if body["status"] == "success" {
            Ok(body["data"].clone())
        } else {
            Err(format!("{}: {}", body["errorType"], body["error"]))
        }
    }

    /// An instant query at `time` (Unix seconds; now if `None`).
    pub async fn query_at(&self, expr: &str, time: Option<f64>) -> Result<Vec<Sample>, String> {
        let time = time.map(|t| format!("{t:.3}"));
        let mut params = vec![("query", expr)];
        params.extend(time.as_deref().map(|t| ("time", t)));
        let data = self.get("/api/v1/query", &params).await?;
        let one = |labels: &Value, value: &Value| Sample {
            labels: serde_json::from_value(labels.clone()).unwrap_or_default(),
            value: number(&value[1]),
        };
        Ok(match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| one(&s["metric"], &s["value"]))
                .collect(),
            Some("scalar") => vec![one(&Value::Null, &data["result"])],
            other => return Err(format!("{expr}: a {other:?} result, not an instant vector")),
        })
    }

    pub async fn query(&self, expr: &str) -> Result<Vec<Sample>, String> {
        self.query_at(expr, None).await
    }

    /// A range query, as a panel runs it: the values of every series.
    pub async fn query_range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: &str,
    ) -> Result<Vec<Vec<f64>>, String> {
        let (start, end) = (format!("{start:.3}"), format!("{end:.3}"));
        let params = [
            ("query", expr),
            ("start", &start),
            ("end", &end),
            ("step", step),
        ];
        let data = self.get("/api/v1/query_range", &params).await?;
        let series = data["result"].as_array().cloned().unwrap_or_default();
        let values = |s: &Value| -> Vec<f64> {
            let points = s["values"].as_array().unwrap();
            points.iter().map(|v| number(&v[1])).collect()
        };
        Ok(series.iter().map(values).collect())
    }

    /// The values of `label` on series matching `matcher` (all if `None`):
    /// what a `label_values(...)` dashboard variable offers.
    pub async fn label_values(
        &self,
        label: &str,
        matcher: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let path = format!("/api/v1/label/{label}/values");
        let params: Vec<(&str, &str)> = matcher.map(|m| ("match[]", m)).into_iter().collect();
        let data = self.get(&path, &params).await?;
        serde_json::from_value(data).map_err(|e| e.to_string())
    }

    /// The active alerts (pending or firing): (labels, state).
    pub async fn alerts(&self) -> Result<Vec<(BTreeMap<String, String>, String)>, String> {
        let data = self.get("/api/v1/alerts", &[]).await?;
        let alerts = data["alerts"].as_array().cloned().unwrap_or_default();
        Ok(alerts
            .iter()
            .map(|a| {
                let labels = serde_json::from_value(a["labels"].clone()).unwrap_or_default();
                (labels, a["state"].as_str().unwrap_or_default().to_string())
            })
            .collect())
    }

    /// Runs `expr` until `judge` accepts its samples (returning what the
    /// test wants of them) or [`DEADLINE`] passes; then fails with `what`,
    /// the query, and the last samples and verdict.
    pub async fn until<T>(
        &self,
        what: &str,
        expr: &str,
        mut judge: impl FnMut(&[Sample]) -> Result<T, String>,
    ) -> T {
        eventually(what, async || {
            let samples = self.query(expr).await?;
            judge(&samples).map_err(|e| format!("{expr}\n  {e}\n  samples: {samples:?}"))
        })
        .await
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Tries `attempt` every 250 ms until it succeeds or [`DEADLINE`] passes;
/// then fails with `what` and the last error.
pub async fn eventually<T>(what: &str, mut attempt: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(last) if Instant::now() > deadline => {
                panic!("timed out after {DEADLINE:?} waiting for {what}; last seen:\n  {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A sample value: the API writes numbers as strings ("NaN", "+Inf" too).
fn number(value: &Value) -> f64 {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Spawns Prometheus in `dir` on `port`; the child once it answers
/// `/-/ready`, or `None` if it exited first (the port taken, most likely).
async fn spawn(dir: &Path, port: u16) -> Option<KillOnDrop> {
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(binary("prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("prometheus runs");
    let mut child = KillOnDrop(child);
    let ready = format!("http://127.0.0.1:{port}/-/ready");
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if child.0.try_wait().unwrap().is_some() {
            return None;
        }
        let answered = reqwest::get(&ready).await;
        if answered.is_ok_and(|r| r.status().is_success()) {
            return Some(child);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("Prometheus not ready after {DEADLINE:?}:\n{}", log_of(dir));
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
}

/// `promtool check metrics` on an exposition (Prometheus's naming and
/// format linter): its findings, empty when it passes.
pub fn promtool_check_metrics(exposition: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new(binary("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(exposition.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() && text.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("promtool check metrics ({}):\n{text}", out.status))
    }
}
