//! The body of `GET /v1/policies`: the views of the policies in force (with
//! the file's SHA-256 and load time) and the rendering cached per set. Apart
//! from the handler so that the service state can hold the cache without
//! importing the route.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::{Hierarchy, Limit, Policy, PolicySet, US_PER_MS, Window};

#[derive(Debug, Serialize, ToSchema)]
pub struct PoliciesResponse {
    /// The policies file the set was loaded from; null without one.
    #[schema(example = "/etc/ratekeeper/policies.toml")]
    pub file: Option<String>,
    /// Hex SHA-256 of the file's bytes; empty without a file.
    pub sha256: String,
    /// When the set was loaded (RFC 3339, UTC); null without a file.
    #[schema(example = "2026-01-01T12:00:00.250Z")]
    pub loaded_at: Option<String>,
    /// The version of the runtime overrides, blocks and exemptions this
    /// instance applies (`/v1/overrides`): with Redis, its change counter,
    /// the same on every instance once a change reached them all.
    pub overrides_version: u64,
    /// In name order.
    pub policies: Vec<PolicyView>,
    /// The policies with levels (checked with `ids`), in name order.
    pub hierarchies: Vec<HierarchyView>,
}

/// A policy with levels: each level's policy and key template.
#[derive(Debug, Serialize, ToSchema)]
pub struct HierarchyView {
    pub name: String,
    pub description: Option<String>,
    /// In the file's order: the order of a check's `levels`.
    pub levels: Vec<HierarchyLevelView>,
    /// Every id the key templates name: what a check's `ids` holds.
    pub ids: Vec<String>,
    /// Forward-auth: where each id comes from; empty when the file gives
    /// none (forward-auth then answers 501, unless the templates name no
    /// id).
    pub ids_from: BTreeMap<String, String>,
    /// Forward-auth: the status of a denial (429 unless set).
    pub deny_status: u16,
    /// Forward-auth: the status when an id's source is absent (401 unless set).
    pub missing_key_status: u16,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HierarchyLevelView {
    pub name: String,
    pub policy: String,
    /// The key template, `org:{org}`.
    pub key: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyView {
    pub name: String,
    pub description: Option<String>,
    /// `open`, `closed` or `local`; null: the service's `[failure] mode`.
    pub failure_mode: Option<String>,
    pub shadow: bool,
    /// In the file's order: the order of a check's `limits`.
    pub limits: Vec<PolicyLimitView>,
    /// Per client key with an override: the limits that apply to it (the
    /// policy's, with the override's replacing those of the same name).
    pub overrides: BTreeMap<String, Vec<PolicyLimitView>>,
    /// Forward-auth (`/v1/auth/{policy}`): the key sources tried in order.
    pub key_from: Vec<String>,
    /// Forward-auth: the status of a denial (429 unless set).
    pub deny_status: u16,
    /// Forward-auth: the status when no key source is present (401 unless set).
    pub missing_key_status: u16,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyLimitView {
    pub name: String,
    /// `fixed_window`, `sliding_window`, `sliding_log`, `token_bucket` or `gcra`.
    pub algorithm: String,
    pub limit: u64,
    /// The window; for calendar periods, the unit's usual length (1, 7, 30
    /// or 365 days), while `calendar` and `timezone` say what it is.
    pub window_ms: u64,
    /// `day`, `week`, `month` or `year`: the limit counts per calendar
    /// period in `timezone`. Absent for a window of a fixed length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calendar: Option<String>,
    /// The calendar's IANA time zone. Absent without `calendar`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Bucket capacity (token_bucket, gcra); equal to `limit` otherwise.
    pub burst: u64,
}

/// The body of `GET /v1/policies` for the set in force, rendered once per
/// set: a file near the 1 MiB cap renders to several MiB of JSON, too much
/// to rebuild on every request.
#[derive(Default)]
pub(crate) struct PoliciesJson {
    /// The set the body was rendered from. Holding it weakly keeps its
    /// allocation, so no later set can take its address while it is here.
    /// And the runtime entries' version it shows.
    cached: Mutex<Option<(Weak<PolicySet>, u64, Bytes)>>,
}

impl PoliciesJson {
    pub(crate) fn body(&self, set: &Arc<PolicySet>, overrides_version: u64) -> Bytes {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((rendered, version, body)) = &*cached
            && std::ptr::eq(rendered.as_ptr(), Arc::as_ptr(set))
            && *version == overrides_version
        {
            return body.clone();
        }
        // Rendering under the lock: concurrent first requests for a new set
        // wait for one rendering instead of each making their own.
        let mut view = PoliciesResponse::from(&**set);
        view.overrides_version = overrides_version;
        let body = Bytes::from(serde_json::to_vec(&view).expect("the policies view serializes"));
        *cached = Some((Arc::downgrade(set), overrides_version, body.clone()));
        body
    }
}

impl From<&PolicySet> for PoliciesResponse {
    fn from(set: &PolicySet) -> Self {
        PoliciesResponse {
            file: set.source.clone(),
            sha256: set.sha256.clone(),
            loaded_at: set.loaded_at.map(rfc3339),
            overrides_version: 0,
            policies: set.iter().map(|p| PolicyView::from(&**p)).collect(),
            hierarchies: set
                .hierarchies()
                .map(|h| HierarchyView::from(&**h))
                .collect(),
        }
    }
}

impl From<&Hierarchy> for HierarchyView {
    fn from(h: &Hierarchy) -> Self {
        HierarchyView {
            name: h.name.to_string(),
            description: h.description.clone(),
            levels: h
                .levels
                .iter()
                .map(|l| HierarchyLevelView {
                    name: l.name.to_string(),
                    policy: l.policy.to_string(),
                    key: l.key.text.clone(),
                })
                .collect(),
            ids: h.ids.iter().map(|i| i.to_string()).collect(),
            ids_from: h.ids_from_text.clone(),
            deny_status: h.deny_status,
            missing_key_status: h.missing_key_status,
        }
    }
}

impl From<&Policy> for PolicyView {
    fn from(policy: &Policy) -> Self {
        let view = |limits: &[Limit]| limits.iter().map(PolicyLimitView::from).collect();
        PolicyView {
            name: policy.name.to_string(),
            description: policy.description.clone(),
            failure_mode: policy.failure_mode.map(|m| m.as_str().to_string()),
            shadow: policy.shadow,
            limits: view(&policy.limits),
            overrides: policy
                .overrides
                .iter()
                .map(|(key, limits)| (key.clone(), view(limits)))
                .collect(),
            key_from: policy.forward.key_from_text.to_vec(),
            deny_status: policy.forward.deny_status,
            missing_key_status: policy.forward.missing_key_status,
        }
    }
}

impl From<&Limit> for PolicyLimitView {
    fn from(limit: &Limit) -> Self {
        let calendar = match limit.rule.window {
            Window::Calendar(calendar) => Some(calendar),
            Window::Length(_) => None,
        };
        PolicyLimitView {
            name: limit.name.to_string(),
            algorithm: limit.rule.algorithm.as_str().to_string(),
            limit: limit.rule.limit,
            window_ms: limit.rule.window_us() / US_PER_MS,
            calendar: calendar.map(|c| c.unit.as_str().to_owned()),
            timezone: calendar.map(|c| c.zone.name().to_owned()),
            burst: limit.rule.burst,
        }
    }
}

/// RFC 3339 in UTC with milliseconds (`2026-01-01T12:00:00.250Z`).
fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn renders_once_per_set() {
        let json = PoliciesJson::default();
        let first = Arc::new(PolicySet::empty());
        let a = json.body(&first, 0);
        let b = json.body(&first, 0);
        // The same bytes, not a second rendering.
        assert_eq!(a.as_ptr(), b.as_ptr());
        let second = Arc::new(PolicySet::empty());
        let c = json.body(&second, 0);
        assert_ne!(a.as_ptr(), c.as_ptr());
        assert_eq!(a, c, "equal sets render equal bodies");
        let view: serde_json::Value = serde_json::from_slice(&c).unwrap();
        assert_eq!(view["policies"], serde_json::json!([]));
    }

    #[test]
    fn formats_rfc3339_utc() {
        let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_secs(s) + Duration::from_millis(ms);
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day in a century leap year) 23:59:59.999
        assert_eq!(rfc3339(at(951_868_799, 999)), "2000-02-29T23:59:59.999Z");
        assert_eq!(rfc3339(at(1_767_225_600, 250)), "2026-01-01T00:00:00.250Z");
        assert_eq!(rfc3339(at(4_107_542_400, 0)), "2100-03-01T00:00:00.000Z");
    }
}
