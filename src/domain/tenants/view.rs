//! The entries as a check reads them: by client key, one map lookup, the
//! overrides already merged into their policy's limits. Built whole from
//! the stored entries and the policies in force, and swapped in whole,
//! like a policy set.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Entry, Kind, LimitChange, MAX_CHANGES, window_input};
use crate::domain::{Bounds, Limit, PolicySet, ValidationError, validate_leases};

/// A block or an exemption as a check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// `None`: every policy and inline check of the key.
    pub policy: Option<Arc<str>>,
    pub expires_at_ms: Option<u64>,
    pub reason: Option<Arc<str>>,
}

impl Marker {
    fn of(entry: &Entry) -> Marker {
        Marker {
            policy: entry.policy.as_deref().map(Arc::from),
            expires_at_ms: entry.expires_at_ms,
            reason: entry.reason.as_deref().map(Arc::from),
        }
    }

    /// Whether it applies to a check of `policy` (`None`: inline) at `now_ms`.
    pub fn applies(&self, policy: Option<&str>, now_ms: u64) -> bool {
        let live = self.expires_at_ms.is_none_or(|at| now_ms < at);
        live && self.policy.as_deref().is_none_or(|p| Some(p) == policy)
    }

    /// Milliseconds left at `now_ms`; `None` when it never expires.
    pub fn expires_in_ms(&self, now_ms: u64) -> Option<u64> {
        self.expires_at_ms.map(|at| at.saturating_sub(now_ms))
    }
}

/// A policy's limits under an override, and when it stops applying.
type Overriding = (Arc<str>, Arc<[Limit]>, Option<u64>);

/// Everything set for one client key.
#[derive(Debug, Clone, Default)]
pub struct KeyRules {
    /// Per policy, the merged limits and when they stop applying.
    overrides: Vec<Overriding>,
    pub block: Option<Marker>,
    pub exemption: Option<Marker>,
}

/// The entries in force, by key, and the version they were read at.
#[derive(Debug, Default, Clone)]
pub struct View {
    /// Keys and rules shared between versions: a change copies the map's
    /// pointers, and the one key's rules it patches.
    by_key: HashMap<Arc<str>, Arc<KeyRules>>,
    /// The store's version of the entries this view was built from.
    pub version: u64,
    /// How many of each kind ([`Kind::ALL`]'s order), expired included.
    pub counts: [usize; 3],
    /// Entries that no longer fit the policies in force (a limit renamed
    /// in the file, say): kept in the store, applied nowhere.
    pub stale: usize,
}

impl View {
    /// The view of `entries` under `policies`. An entry that no longer
    /// validates is counted in `stale` and skipped, never half applied.
    pub fn build<'e>(
        entries: impl IntoIterator<Item = &'e Entry>,
        policies: &PolicySet,
        bounds: &Bounds,
        version: u64,
    ) -> View {
        let mut view = View {
            version,
            ..View::default()
        };
        for entry in entries {
            view.add(entry, policies, bounds);
        }
        view
    }

    /// This view with one entry changed from `old` to `new` (either absent:
    /// added or removed), at `version`: a copy of the map with one key's
    /// rules patched, so a change costs no merge of the other entries.
    pub fn patched(
        &self,
        old: Option<&Entry>,
        new: Option<&Entry>,
        policies: &PolicySet,
        bounds: &Bounds,
        version: u64,
    ) -> View {
        let mut view = self.clone();
        view.version = version;
        if let Some(old) = old {
            view.counts[old.kind as usize] -= 1;
            let slot = view.by_key.get_mut(old.key.as_str()).map(Arc::make_mut);
            let removed = match (old.kind, slot) {
                (Kind::Override, Some(rules)) => {
                    let before = rules.overrides.len();
                    let policy = old.policy.as_deref().unwrap_or_default();
                    rules.overrides.retain(|(p, _, _)| &**p != policy);
                    rules.overrides.len() < before
                }
                (Kind::Block, Some(rules)) => rules.block.take().is_some(),
                (Kind::Exemption, Some(rules)) => rules.exemption.take().is_some(),
                (_, None) => false,
            };
            if !removed && old.kind == Kind::Override {
                view.stale -= 1;
            }
            if view
                .by_key
                .get(old.key.as_str())
                .is_some_and(|r| r.is_empty())
            {
                view.by_key.remove(old.key.as_str());
            }
        }
        if let Some(new) = new {
            view.add(new, policies, bounds);
        }
        view
    }

    fn add(&mut self, entry: &Entry, policies: &PolicySet, bounds: &Bounds) {
        self.counts[entry.kind as usize] += 1;
        let merged = match entry.kind {
            Kind::Override => match merge(entry, policies, bounds) {
                Ok(merged) => Some(merged),
                Err(_) => {
                    self.stale += 1;
                    return;
                }
            },
            Kind::Block | Kind::Exemption => None,
        };
        let slot = match self.by_key.get_mut(entry.key.as_str()) {
            Some(slot) => Arc::make_mut(slot),
            None => {
                let key: Arc<str> = Arc::from(entry.key.as_str());
                Arc::make_mut(self.by_key.entry(key).or_default())
            }
        };
        match (entry.kind, merged) {
            (Kind::Override, Some((policy, limits))) => {
                slot.overrides.push((policy, limits, entry.expires_at_ms));
            }
            (Kind::Block, _) => slot.block = Some(Marker::of(entry)),
            (Kind::Exemption, _) => slot.exemption = Some(Marker::of(entry)),
            (Kind::Override, None) => {}
        }
    }

    /// What is set for `key`: the one lookup of a check, skipped while
    /// nothing is set at all.
    pub fn rules(&self, key: &str) -> Option<&KeyRules> {
        if self.by_key.is_empty() {
            return None;
        }
        self.by_key.get(key).map(|rules| &**rules)
    }

    /// The API override of `policy` for `key` in force at `now_ms`.
    pub fn override_for(&self, policy: &str, key: &str, now_ms: u64) -> Option<&Arc<[Limit]>> {
        self.rules(key)?.override_for(policy, now_ms)
    }
}

impl KeyRules {
    fn is_empty(&self) -> bool {
        self.overrides.is_empty() && self.block.is_none() && self.exemption.is_none()
    }

    pub fn override_for(&self, policy: &str, now_ms: u64) -> Option<&Arc<[Limit]>> {
        self.overrides
            .iter()
            .find(|(p, _, at)| &**p == policy && at.is_none_or(|at| now_ms < at))
            .map(|(_, limits, _)| limits)
    }
}

/// An override's limits: its policy's, each named one changed. The
/// policy's file override of the key, if any, is not the base: an API
/// override replaces whatever the file says for the key, limit by limit
/// from the policy's own.
pub(super) fn merge(
    entry: &Entry,
    policies: &PolicySet,
    bounds: &Bounds,
) -> Result<(Arc<str>, Arc<[Limit]>), ValidationError> {
    let name = entry.policy.as_deref().unwrap_or_default();
    let Some(policy) = policies.get(name) else {
        return Err(ValidationError::new(
            "policy",
            format!("an override names a loaded policy, got {name:?}"),
        ));
    };
    if entry.limits.is_empty() || entry.limits.len() > MAX_CHANGES {
        return Err(ValidationError::new(
            "limits",
            format!(
                "an override changes 1 to {MAX_CHANGES} limits, got {}",
                entry.limits.len()
            ),
        ));
    }
    let mut limits: Vec<Limit> = policy.limits.to_vec();
    for (i, change) in entry.limits.iter().enumerate() {
        let at = format!("limits[{i}]");
        if entry.limits[..i].iter().any(|c| c.name == change.name) {
            return Err(ValidationError::new(
                format!("{at}.name"),
                format!("{:?} is changed twice", change.name),
            ));
        }
        let Some(limit) = limits.iter_mut().find(|l| *l.name == *change.name) else {
            let names: Vec<&str> = policy.limits.iter().map(|l| &*l.name).collect();
            return Err(ValidationError::new(
                format!("{at}.name"),
                format!(
                    "policy {name:?} has no limit {:?}; its limits: {names:?}",
                    change.name
                ),
            ));
        };
        limit.rule = changed(limit, change, bounds).map_err(|e| e.within(&at))?;
    }
    validate_leases(&limits).map_err(|e| e.within("limits"))?;
    Ok((policy.name.clone(), limits.into()))
}

fn changed(
    limit: &Limit,
    change: &LimitChange,
    bounds: &Bounds,
) -> Result<crate::domain::Rule, ValidationError> {
    let window = change.window.as_deref().map(window_input);
    limit
        .rule
        .changed(change.limit, change.burst, window.as_ref(), bounds)
}
