//! `ratekeeper top`: `GET /v1/top` of a running instance as a table that
//! refreshes, like top(1), for the on-call engineer asking who is being
//! limited right now.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::Value;

use super::remote::{Client, Remote, RemoteError, duration};

#[derive(Debug, clap::Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The policy; `inline` for checks that carry their limits,
    /// `rls.<domain>` for an Envoy RLS domain.
    #[arg(long, default_value = "inline")]
    pub policy: String,
    /// Count denied units, or every checked unit.
    #[arg(long, default_value = "denied", value_parser = ["denied", "checked"])]
    pub by: String,
    /// The window: the last minute or the last ten minutes.
    #[arg(long, default_value = "1m", value_parser = ["1m", "10m"])]
    pub period: String,
    /// Keys listed.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Time between refreshes.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = duration)]
    pub interval: Duration,
    /// Print once and exit.
    #[arg(long)]
    pub once: bool,
    /// Print the answer as JSON (once), not a table.
    #[arg(long)]
    pub json: bool,
}

/// Prints the table, then again every `interval` until interrupted (or
/// once); an error ends it.
pub async fn run(args: TopArgs) -> Result<(), RemoteError> {
    let client = Client::new(&args.remote)?;
    let query = format!(
        "/v1/top?policy={}&by={}&period={}&limit={}",
        encode(&args.policy),
        args.by,
        args.period,
        args.limit
    );
    let refresh = !(args.once || args.json);
    let clear = refresh && std::io::stdout().is_terminal();
    loop {
        let body = client.get(&query).await?;
        let mut out = String::new();
        if clear {
            // Home and clear: the new table replaces the old one.
            out.push_str("\x1b[H\x1b[2J");
        }
        if args.json {
            out.push_str(&serde_json::to_string_pretty(&body).unwrap_or_default());
            out.push('\n');
        } else {
            out.push_str(&table(client.base(), &body));
        }
        let mut stdout = std::io::stdout().lock();
        // A closed pipe (`ratekeeper top | head`) ends the loop quietly.
        if stdout
            .write_all(out.as_bytes())
            .and_then(|_| stdout.flush())
            .is_err()
            || !refresh
        {
            return Ok(());
        }
        drop(stdout);
        tokio::time::sleep(args.interval).await;
    }
}

/// The answer as a table: a header line, then one row per key.
pub fn table(url: &str, body: &Value) -> String {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let total = n(&body["total"]);
    let mut out = format!(
        "{url}  policy {}  {} units, last {} (window {:.1} s)\n\
         total {total} units; any key not listed: at most {}\n\n",
        body["policy"].as_str().unwrap_or_default(),
        body["by"].as_str().unwrap_or_default(),
        body["period"].as_str().unwrap_or_default(),
        n(&body["window_ms"]) as f64 / 1_000.0,
        n(&body["unlisted_max"]),
    );
    let keys = body["keys"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let width = keys
        .iter()
        .map(|k| k["key"].as_str().unwrap_or_default().chars().count())
        .max()
        .unwrap_or(0)
        .clamp(3, 60);
    out.push_str(&format!(
        "{:>3}  {:<width$}  {:>12}  {:>10}  {:>6}\n",
        "#", "KEY", "UNITS", "±ERROR", "SHARE"
    ));
    for (i, key) in keys.iter().enumerate() {
        let count = n(&key["count"]);
        let share = if total == 0 {
            0.0
        } else {
            100.0 * count as f64 / total as f64
        };
        out.push_str(&format!(
            "{:>3}  {:<width$}  {count:>12}  {:>10}  {share:>5.1}%\n",
            i + 1,
            shorten(key["key"].as_str().unwrap_or_default(), width),
            n(&key["error"]),
        ));
    }
    if keys.is_empty() {
        out.push_str("     (no key counted in this window)\n");
    }
    out
}

/// At most `width` characters, the cut marked.
fn shorten(key: &str, width: usize) -> String {
    if key.chars().count() <= width {
        return key.to_string();
    }
    let kept: String = key.chars().take(width - 1).collect();
    format!("{kept}…")
}

/// A query value: only what a policy name may hold passes as is.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_keys_with_their_share_and_error() {
        let body = serde_json::json!({
            "policy": "api", "by": "denied", "period": "1m", "window_ms": 64_200,
            "total": 200, "unlisted_max": 3,
            "keys": [{"key": "k_1", "count": 150, "error": 0}, {"key": "k_22", "count": 40, "error": 2}]
        });
        let table = table("http://h:1", &body);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "http://h:1  policy api  denied units, last 1m (window 64.2 s)"
        );
        assert_eq!(lines[1], "total 200 units; any key not listed: at most 3");
        assert_eq!(lines[4], "  1  k_1            150           0   75.0%");
        assert_eq!(lines[5], "  2  k_22            40           2   20.0%");
    }

    #[test]
    fn long_keys_are_cut_and_names_encoded() {
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(encode("rls.my-domain"), "rls.my-domain");
        assert_eq!(encode("a b&c"), "a%20b%26c");
    }
}
