//! `ratekeeper override set|get|ls|rm`, `block`, `unblock` and `audit`:
//! the runtime overrides, blocks and their audit trail of a running
//! instance (`/v1/overrides`, `/v1/blocks`, `/v1/audit`; the admin scope
//! when tokens are on), as tables, or the answers with `--json`.

use serde_json::{Value, json};

use super::client::{grid, print};
use super::remote::{Client, Remote, RemoteError, segment};

#[derive(Debug, clap::Subcommand)]
pub enum OverrideCommand {
    /// Set a key's override of a policy's limits (replacing any).
    Set(SetArgs),
    /// Show a key's override.
    Get(KeyArgs),
    /// List a policy's overrides.
    Ls(ListArgs),
    /// Delete a key's override: the file's or the policy's limits apply.
    Rm(KeyArgs),
}

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    #[command(flatten)]
    pub at: KeyArgs,
    /// A limit of the policy and its new numbers: `NAME=LIMIT` or
    /// `NAME=LIMIT:BURST` (buckets). Repeat for several.
    #[arg(long = "limit", value_name = "NAME=LIMIT[:BURST]", required = true)]
    pub limits: Vec<String>,
    /// How long it lasts (`10m`, `1h`); without: until deleted.
    #[arg(long)]
    pub ttl: Option<String>,
    /// Why, for the audit trail.
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The policy.
    #[arg(long)]
    pub policy: String,
    /// The client key.
    #[arg(long)]
    pub key: String,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The policy.
    #[arg(long)]
    pub policy: String,
    /// Entries per page (1 to 1000).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Go on after this key (the `next` of the previous page).
    #[arg(long)]
    pub after: Option<String>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct BlockArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The client key.
    #[arg(long)]
    pub key: String,
    /// Only this policy's checks; without: every check of the key.
    #[arg(long)]
    pub policy: Option<String>,
    /// How long it lasts (`10m`, `1h`); without: until unblocked.
    #[arg(long)]
    pub ttl: Option<String>,
    /// Why, for the audit trail.
    #[arg(long)]
    pub reason: Option<String>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct UnblockArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The client key.
    #[arg(long)]
    pub key: String,
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Records, newest first (1 to 1000).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ratekeeper override ...`.
pub async fn run_override(command: OverrideCommand) -> Result<u8, RemoteError> {
    match command {
        OverrideCommand::Set(args) => {
            let body = json!({
                "limits": args.limits.iter().map(|l| change(l)).collect::<Result<Vec<_>, _>>()?,
                "ttl": args.ttl,
                "reason": args.reason,
            });
            let client = Client::new(&args.at.remote)?;
            let answer = client.put(&override_path(&args.at), &body).await?;
            print(&answer, args.at.json, |a| entries(std::slice::from_ref(a)));
        }
        OverrideCommand::Get(args) => {
            let client = Client::new(&args.remote)?;
            let answer = client.get(&override_path(&args)).await?;
            print(&answer, args.json, |a| entries(std::slice::from_ref(a)));
        }
        OverrideCommand::Ls(args) => {
            let mut path = format!(
                "/v1/overrides/{}?limit={}",
                segment(&args.policy),
                args.limit
            );
            if let Some(after) = &args.after {
                path.push_str(&format!("&after={}", segment(after)));
            }
            let client = Client::new(&args.remote)?;
            let answer = client.get(&path).await?;
            print(&answer, args.json, page);
        }
        OverrideCommand::Rm(args) => {
            let client = Client::new(&args.remote)?;
            client.delete(&override_path(&args)).await?;
            println!("deleted");
        }
    }
    Ok(0)
}

/// `ratekeeper block`.
pub async fn block(args: BlockArgs) -> Result<u8, RemoteError> {
    let body = json!({"policy": args.policy, "ttl": args.ttl, "reason": args.reason});
    let client = Client::new(&args.remote)?;
    let answer = client.put(&block_path(&args.key), &body).await?;
    print(&answer, args.json, |a| entries(std::slice::from_ref(a)));
    Ok(0)
}

/// `ratekeeper unblock`.
pub async fn unblock(args: UnblockArgs) -> Result<u8, RemoteError> {
    let client = Client::new(&args.remote)?;
    client.delete(&block_path(&args.key)).await?;
    println!("unblocked");
    Ok(0)
}

/// `ratekeeper audit`.
pub async fn audit(args: AuditArgs) -> Result<u8, RemoteError> {
    let client = Client::new(&args.remote)?;
    let answer = client
        .get(&format!("/v1/audit?limit={}", args.limit))
        .await?;
    print(&answer, args.json, records);
    Ok(0)
}

fn override_path(at: &KeyArgs) -> String {
    format!("/v1/overrides/{}/{}", segment(&at.policy), segment(&at.key))
}

fn block_path(key: &str) -> String {
    format!("/v1/blocks/{}", segment(key))
}

/// `NAME=LIMIT[:BURST]` as a change of the body's `limits`.
fn change(text: &str) -> Result<Value, RemoteError> {
    let usage = || {
        RemoteError::Usage(format!(
            "--limit {text}: expected NAME=LIMIT or NAME=LIMIT:BURST, e.g. daily=5000"
        ))
    };
    let (name, numbers) = text.split_once('=').ok_or_else(usage)?;
    let (limit, burst) = match numbers.split_once(':') {
        Some((limit, burst)) => (limit, Some(burst.parse::<u64>().map_err(|_| usage())?)),
        None => (numbers, None),
    };
    let limit: u64 = limit.parse().map_err(|_| usage())?;
    Ok(match burst {
        Some(burst) => json!({"name": name, "limit": limit, "burst": burst}),
        None => json!({"name": name, "limit": limit}),
    })
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Entries as rows: kind, policy, key, limits, expiry, reason, who.
fn entries(list: &[Value]) -> String {
    let rows = list.iter().map(|e| {
        let limits: Vec<String> = e["limits"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|l| match l["burst"].as_u64() {
                Some(burst) => format!("{}={}:{burst}", text(&l["name"]), text(&l["limit"])),
                None => format!("{}={}", text(&l["name"]), text(&l["limit"])),
            })
            .collect();
        [
            text(&e["kind"]),
            text(&e["policy"]),
            text(&e["key"]),
            if limits.is_empty() {
                "-".into()
            } else {
                limits.join(",")
            },
            text(&e["expires_at"]),
            text(&e["reason"]),
            text(&e["set_by"]),
        ]
    });
    grid(
        [
            "KIND", "POLICY", "KEY", "LIMITS", "EXPIRES", "REASON", "SET_BY",
        ],
        rows.collect(),
    )
}

fn page(answer: &Value) -> String {
    let list = answer["entries"].as_array().cloned().unwrap_or_default();
    let mut out = entries(&list);
    if let Some(next) = answer["next"].as_str() {
        out.push_str(&format!("more: --after {next}\n"));
    }
    out
}

/// Audit records as rows: when, who, what, where, why.
fn records(answer: &Value) -> String {
    let list = answer["entries"].as_array().cloned().unwrap_or_default();
    let rows = list.iter().map(|r| {
        [
            text(&r["at"]),
            text(&r["token"]),
            text(&r["action"]),
            text(&r["policy"]),
            text(&r["key"]),
            text(&r["reason"]),
        ]
    });
    grid(
        ["AT", "TOKEN", "ACTION", "POLICY", "KEY", "REASON"],
        rows.collect(),
    )
}
