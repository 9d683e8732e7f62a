//! Tenants at runtime: a key's override of a policy's limits, a block and
//! an exemption, set by API (`/v1/overrides`, `/v1/blocks`,
//! `/v1/exemptions`) rather than in the policies file. What an entry is,
//! how it is validated against the policies in force, and the view a check
//! reads ([`View`]). Where entries are kept, and how every instance learns
//! of a change, is the edge's (`crate::tenants`).
//!
//! An entry is data: it is stored as JSON (in Redis, or in the embedded
//! store's file), so its serde form is its stored form.

#[cfg(test)]
mod tests;
mod view;

pub use view::{KeyRules, Marker, View};

// Which limits a check ran on is the policy's to say; re-exported here,
// where its runtime source (an override by API) is defined.
pub use super::policy::Overridden;

use serde::{Deserialize, Serialize};

use super::{Bounds, PolicySet, ValidationError, WindowInput, validate_name};

/// The longest `reason` kept: a ticket link and a sentence.
pub const MAX_REASON_BYTES: usize = 256;
/// The most limits one override changes (a policy has at most
/// `limits.max_limits_per_check`).
pub const MAX_CHANGES: usize = 16;

/// What an entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A key's limits of one policy.
    Override,
    /// Every check of the key denied at once.
    Block,
    /// Every check of the key allowed, and still counted.
    Exemption,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Override, Kind::Block, Kind::Exemption];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Override => "override",
            Kind::Block => "block",
            Kind::Exemption => "exemption",
        }
    }

    /// The entry's id's prefix; ids sort by kind, then policy and key.
    fn tag(self) -> char {
        match self {
            Kind::Override => 'o',
            Kind::Block => 'b',
            Kind::Exemption => 'e',
        }
    }
}

/// One limit of a policy, changed by an override.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitChange {
    /// The policy's limit this changes.
    pub name: String,
    pub limit: u64,
    /// Only for token_bucket and gcra; default: the new `limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Only for a limit with a window of a length (`"30s"`, `"1h"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// One entry as stored and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub kind: Kind,
    /// An override's policy (required); a block's or an exemption's
    /// (optional: without it, every policy and inline check of the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub key: String,
    /// An override's changes; empty for the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitChange>,
    /// Milliseconds since the Unix epoch; `None`: until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The name of the admin token that set it.
    pub set_by: String,
    pub set_at_ms: u64,
}

/// The id an entry is stored under: one override per policy and key, one
/// block and one exemption per key. Policy names hold no `:`, so the id
/// reads back unambiguously.
pub fn entry_id(kind: Kind, policy: Option<&str>, key: &str) -> String {
    match kind {
        Kind::Override => format!("{}:{}:{key}", kind.tag(), policy.unwrap_or_default()),
        Kind::Block | Kind::Exemption => format!("{}:{key}", kind.tag()),
    }
}

impl Entry {
    pub fn id(&self) -> String {
        entry_id(self.kind, self.policy.as_deref(), &self.key)
    }

    /// Whether it has expired at `now_ms`: then it applies nowhere, and is
    /// removed at the next sweep.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= now_ms)
    }

    /// Validates the entry against the policies in force: its key and
    /// reason within bounds, its policy loaded, and an override's changes
    /// each naming a limit of the policy with valid numbers. Errors name
    /// the field (`limits[0].burst`).
    pub fn validate(&self, policies: &PolicySet, bounds: &Bounds) -> Result<(), ValidationError> {
        let key_len = self.key.len();
        if key_len == 0 || key_len > bounds.max_key_bytes {
            return Err(ValidationError::new(
                "key",
                format!(
                    "must be 1 to {} bytes (limits.max_key_bytes), got {key_len}",
                    bounds.max_key_bytes
                ),
            ));
        }
        if let Some(reason) = &self.reason
            && reason.len() > MAX_REASON_BYTES
        {
            return Err(ValidationError::new(
                "reason",
                format!(
                    "must be at most {MAX_REASON_BYTES} bytes, got {}",
                    reason.len()
                ),
            ));
        }
        if let Some(policy) = &self.policy {
            validate_name("policy", policy)?;
            if let Some(hierarchy) = policies.hierarchy(policy) {
                // Its levels' keys are built per request: an entry names
                // a level's policy and the key its template builds.
                let levels: Vec<&str> = hierarchy.levels.iter().map(|l| &*l.policy).collect();
                return Err(ValidationError::new(
                    "policy",
                    format!(
                        "{policy:?} is a policy with levels: name a level's policy ({}) and the \
                         key its template builds",
                        levels.join(", ")
                    ),
                ));
            }
            if policies.get(policy).is_none() {
                return Err(ValidationError::new(
                    "policy",
                    format!("{policy:?} is not a loaded policy"),
                ));
            }
        }
        match self.kind {
            Kind::Override => view::merge(self, policies, bounds).map(|_| ()),
            Kind::Block | Kind::Exemption if !self.limits.is_empty() => Err(ValidationError::new(
                "limits",
                format!("a {} takes no limits", self.kind.as_str()),
            )),
            Kind::Block | Kind::Exemption => Ok(()),
        }
    }
}

/// A window as the API takes it: the duration text, or whole seconds.
pub fn window_input(text: &str) -> WindowInput {
    WindowInput::Text(text.to_owned())
}

/// What the caps say of adding one more entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Entries of every kind, in all.
    pub max_entries: usize,
    /// Overrides of one policy.
    pub max_per_policy: usize,
}

impl Caps {
    /// Whether `entry`, new (not a replacement), fits beside `entries`.
    pub fn admit<'e>(
        &self,
        entry: &Entry,
        mut entries: impl Iterator<Item = &'e Entry>,
    ) -> Result<(), String> {
        let (mut all, mut same_policy) = (0usize, 0usize);
        let policy = entry.policy.as_deref();
        for e in entries.by_ref() {
            all += 1;
            if e.kind == Kind::Override && e.kind == entry.kind && e.policy.as_deref() == policy {
                same_policy += 1;
            }
        }
        if all >= self.max_entries {
            return Err(format!(
                "{all} overrides, blocks and exemptions are set, the most allowed \
                 (tenants.max_entries = {}): delete some first",
                self.max_entries
            ));
        }
        if entry.kind == Kind::Override && same_policy >= self.max_per_policy {
            return Err(format!(
                "policy {:?} has {same_policy} overrides, the most allowed \
                 (tenants.max_per_policy = {}): delete some first",
                policy.unwrap_or_default(),
                self.max_per_policy
            ));
        }
        Ok(())
    }
}
