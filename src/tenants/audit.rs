//! The audit trail of runtime changes: one record per change, when, which
//! token's name, what (the entry before and after) and why, kept where the
//! entries are (newest first, the last `AUDIT_KEPT`), logged, and counted
//! by action. A record holds the token's name, never the token.

use serde::Serialize;
use tracing::info;

use super::Changed;
use crate::domain::tenants::Entry;

/// An entry's JSON text (its stored form).
pub(super) fn json(entry: &Entry) -> String {
    // An entry has no map keys that are not strings, nor floats: infallible.
    serde_json::to_string(entry).unwrap_or_else(|_| "null".into())
}

/// One change, as the record states it (`before` is added where the
/// entries live: only there is it known for sure).
pub(super) struct Record<'a> {
    pub at_ms: u64,
    pub token: &'a str,
    pub action: &'a str,
    pub policy: Option<&'a str>,
    pub key: &'a str,
    /// The entry's JSON after, `None` when deleted.
    pub after: Option<&'a str>,
    pub reason: Option<&'a str>,
}

#[derive(Serialize)]
struct Head<'a> {
    at: String,
    token: &'a str,
    action: &'a str,
    policy: Option<&'a str>,
    key: &'a str,
    after: serde_json::Value,
    reason: Option<&'a str>,
}

/// The record's text around its `before`: `head` + before's JSON (or
/// `null`) + `tail` is the whole JSON object.
pub(super) fn parts(record: &Record<'_>) -> (String, String) {
    let after = record
        .after
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or(serde_json::Value::Null);
    let head = Head {
        at: rfc3339(record.at_ms),
        token: record.token,
        action: record.action,
        policy: record.policy,
        key: record.key,
        after,
        reason: record.reason,
    };
    let mut text = serde_json::to_string(&head).unwrap_or_else(|_| "{}".into());
    // `{...}` → `{...,"before":` and the closing brace as the tail.
    text.pop();
    text.push_str(",\"before\":");
    (text, "}".into())
}

/// RFC 3339 in UTC, to the millisecond.
pub fn rfc3339(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| format!("{t:.3}"))
        .unwrap_or_default()
}

/// The change's log line.
pub(super) fn log(
    action: &str,
    token: &str,
    policy: Option<&str>,
    key: &str,
    changed: &Changed,
    reason: Option<&str>,
) {
    let before = changed.before.as_ref().map(json);
    let after = changed.after.as_ref().map(json);
    info!(
        action,
        token,
        policy,
        key,
        before = before.as_deref().unwrap_or("null"),
        after = after.as_deref().unwrap_or("null"),
        reason,
        "{action} by {token}"
    );
}
