//! The bodies of `/v1/overrides`, `/v1/blocks` and `/v1/exemptions`, and
//! their answers, converted to and from the domain's [`Entry`].

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::ApiError;
use super::super::check::WindowSpec;
use crate::domain::tenants::{Entry, Kind, LimitChange};
use crate::domain::{MAX_WINDOW_US, WindowInput, parse_duration_us};

/// An override: the policy's limits it changes, for how long, and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OverrideBody {
    /// Each names a limit of the policy; the others keep the policy's.
    #[schema(min_items = 1, max_items = 16)]
    pub limits: Vec<LimitChangeBody>,
    /// How long it lasts (`"10m"`, `"1h"`), above 0 and up to `"366d"`; or
    /// give `expires_at`, not both; neither: until deleted.
    #[schema(example = "1h", pattern = "^[0-9]+(ms|s|m|h|d)$")]
    pub ttl: Option<String>,
    /// When it ends, RFC 3339 (`"2026-12-31T00:00:00Z"`), in the next 366
    /// days, in place of `ttl`.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Why, for the audit trail: up to 256 bytes.
    #[schema(max_length = 256)]
    pub reason: Option<String>,
}

/// One limit of the policy, changed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitChangeBody {
    /// The policy's limit.
    #[schema(example = "minute", pattern = "^[a-z0-9_.-]{1,64}$")]
    pub name: String,
    /// The new limit, applied to what was already spent in the window.
    #[schema(example = 50, minimum = 1, maximum = 1_000_000_000_000_u64)]
    pub limit: u64,
    /// token_bucket and gcra only; default: the new `limit`.
    #[schema(minimum = 1, maximum = 1_000_000_000_000_u64)]
    pub burst: Option<u64>,
    /// A limit with a window of a length only (not a calendar, not
    /// concurrency): `"30s"` or whole seconds.
    #[schema(value_type = Option<String>)]
    pub window: Option<WindowSpec>,
}

/// A block or an exemption: of one policy or of every check of the key,
/// for how long, and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkerBody {
    /// Only this loaded policy's checks; absent: every policy and inline
    /// check of the key.
    #[schema(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub policy: Option<String>,
    /// As an override's.
    #[schema(example = "10m", pattern = "^[0-9]+(ms|s|m|h|d)$")]
    pub ttl: Option<String>,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(max_length = 256)]
    pub reason: Option<String>,
}

/// One override, block or exemption as set.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryView {
    /// `override`, `block` or `exemption`.
    pub kind: &'static str,
    pub policy: Option<String>,
    pub key: String,
    /// An override's changed limits.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitChangeView>,
    /// RFC 3339; null: until deleted.
    pub expires_at: Option<String>,
    pub expires_in_ms: Option<u64>,
    pub reason: Option<String>,
    /// The name of the admin token that set it (`unnamed` for a token
    /// without a name, `anonymous` without auth).
    pub set_by: String,
    /// RFC 3339.
    pub set_at: String,
}

/// One changed limit, as set.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitChangeView {
    pub name: String,
    pub limit: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// A page of a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryPage {
    /// In key order.
    pub entries: Vec<EntryView>,
    /// Pass as `after` for the next page; null on the last.
    pub next: Option<String>,
}

/// `GET /v1/audit`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditResponse {
    /// Newest first.
    pub entries: Vec<AuditRecord>,
}

/// One change to an override, a block or an exemption.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditRecord {
    /// When, RFC 3339 (UTC, milliseconds).
    pub at: String,
    /// The name of the admin token that made it (`unnamed`, `anonymous`,
    /// or `expiry` for the sweep that removes expired entries).
    pub token: String,
    /// `override.set`, `override.delete`, `override.expire`, and the same
    /// for `block` and `exemption`.
    #[schema(example = "override.set")]
    pub action: String,
    pub policy: Option<String>,
    pub key: String,
    /// The entry before, as stored; null when there was none.
    #[schema(value_type = Option<StoredEntry>)]
    pub before: Option<serde_json::Value>,
    /// The entry after, as stored; null when deleted.
    #[schema(value_type = Option<StoredEntry>)]
    pub after: Option<serde_json::Value>,
    pub reason: Option<String>,
}

/// An entry as it is stored (in Redis, or in `tenants.file`) and as the
/// audit trail shows it: times in milliseconds since the Unix epoch.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // The schema of `domain::tenants::Entry`'s JSON; never built.
pub struct StoredEntry {
    /// `override`, `block` or `exemption`.
    kind: String,
    #[schema(nullable = false)]
    policy: Option<String>,
    key: String,
    #[schema(nullable = false)]
    limits: Option<Vec<LimitChangeView>>,
    #[schema(nullable = false)]
    expires_at_ms: Option<u64>,
    #[schema(nullable = false)]
    reason: Option<String>,
    set_by: String,
    set_at_ms: u64,
}

impl OverrideBody {
    /// The entry it sets; policy, key and who set it are the caller's.
    pub(super) fn entry(self, now_ms: u64) -> Result<Entry, ApiError> {
        let expires_at_ms = expiry(self.ttl.as_deref(), self.expires_at.as_deref(), now_ms)?;
        let limits = self
            .limits
            .into_iter()
            .map(|l| LimitChange {
                name: l.name,
                limit: l.limit,
                burst: l.burst,
                window: l.window.map(|w| match w.0 {
                    WindowInput::Seconds(s) => format!("{s}s"),
                    WindowInput::Text(t) => t,
                }),
            })
            .collect();
        Ok(Entry {
            kind: Kind::Override,
            policy: None,
            key: String::new(),
            limits,
            expires_at_ms,
            reason: self.reason,
            set_by: String::new(),
            set_at_ms: now_ms,
        })
    }
}

impl MarkerBody {
    pub(super) fn entry(self, kind: Kind, now_ms: u64) -> Result<Entry, ApiError> {
        let expires_at_ms = expiry(self.ttl.as_deref(), self.expires_at.as_deref(), now_ms)?;
        Ok(Entry {
            kind,
            policy: self.policy,
            key: String::new(),
            limits: Vec::new(),
            expires_at_ms,
            reason: self.reason,
            set_by: String::new(),
            set_at_ms: now_ms,
        })
    }
}

/// `ttl` or `expires_at` as milliseconds since the epoch: in the future,
/// at most 366 days ahead.
fn expiry(ttl: Option<&str>, at: Option<&str>, now_ms: u64) -> Result<Option<u64>, ApiError> {
    let invalid = |m: String| ApiError::InvalidRequest(m);
    let max_ms = MAX_WINDOW_US / 1_000;
    let at_ms = match (ttl, at) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(invalid("ttl, expires_at: give one, not both".into()));
        }
        (Some(ttl), None) => {
            let us = parse_duration_us(ttl).map_err(|e| invalid(format!("ttl: {e}")))?;
            now_ms.saturating_add(us / 1_000)
        }
        (None, Some(at)) => {
            let stamp: jiff::Timestamp = at
                .parse()
                .map_err(|e| invalid(format!("expires_at: not an RFC 3339 time ({e})")))?;
            u64::try_from(stamp.as_millisecond()).unwrap_or(0)
        }
    };
    if at_ms <= now_ms {
        return Err(invalid("ttl, expires_at: must end in the future".into()));
    }
    if at_ms - now_ms > max_ms {
        return Err(invalid("ttl, expires_at: at most 366 days ahead".into()));
    }
    Ok(Some(at_ms))
}

impl EntryView {
    pub fn of(entry: &Entry, now_ms: u64) -> EntryView {
        let rfc3339 = crate::tenants::rfc3339;
        EntryView {
            kind: entry.kind.as_str(),
            policy: entry.policy.clone(),
            key: entry.key.clone(),
            limits: entry
                .limits
                .iter()
                .map(|l| LimitChangeView {
                    name: l.name.clone(),
                    limit: l.limit,
                    burst: l.burst,
                    window: l.window.clone(),
                })
                .collect(),
            expires_at: entry.expires_at_ms.map(rfc3339),
            expires_in_ms: entry.expires_at_ms.map(|at| at.saturating_sub(now_ms)),
            reason: entry.reason.clone(),
            set_by: entry.set_by.clone(),
            set_at: rfc3339(entry.set_at_ms),
        }
    }
}
