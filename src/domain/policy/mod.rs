//! Policies: named sets of limits, loaded from a TOML file, with per-client
//! overrides. Parsing, validation and matching live here, free of any
//! transport or store; the file watcher that swaps a loaded [`PolicySet`]
//! in lives at the edge.

mod file;
mod forward;
mod hierarchy;
mod hierarchy_build;
mod lease;
#[cfg(test)]
mod lease_tests;
mod names;
mod problem;
mod raw;
#[cfg(test)]
mod tests;

pub use file::sha256_hex;
pub use hierarchy::{Hierarchy, HierarchyLevel, KeyTemplate, MAX_IDS};
pub use problem::{PolicyFileError, Problem};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use super::forward::ForwardAuth;
use super::{Bounds, Check, FailureMode, LeaseMode, Limit, ValidationError};

/// Which limits a policy check ran on, when not the policy's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overridden {
    /// An override set by API (`/v1/overrides`).
    Api,
    /// An override in the policies file.
    File,
}

impl Overridden {
    pub fn as_str(self) -> &'static str {
        match self {
            Overridden::Api => "api",
            Overridden::File => "file",
        }
    }
}

/// One named policy, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub name: Arc<str>,
    pub description: Option<String>,
    /// `None`: the service's `[failure] mode`.
    pub failure_mode: Option<FailureMode>,
    /// Decide and spend as usual, but always answer allowed.
    pub shadow: bool,
    /// The limits, in the file's order.
    pub limits: Arc<[Limit]>,
    /// Per exact client key: the policy's limits with the override's
    /// replacing those of the same name (same order), merged at load time
    /// so a check does one map lookup.
    pub overrides: HashMap<String, Arc<[Limit]>>,
    /// How `/v1/auth/{policy}` keys a request and what it answers.
    pub forward: ForwardAuth,
    /// Hot keys lease chunks of their capacity (`lease = { ... }`).
    pub lease: Option<LeaseMode>,
}

impl Policy {
    /// The limits that apply to `key`: its override's, or the policy's.
    pub fn limits_for(&self, key: &str) -> &Arc<[Limit]> {
        self.overrides.get(key).unwrap_or(&self.limits)
    }

    /// A check of this policy's limits for `key` (validates key and cost).
    pub fn check(
        &self,
        key: String,
        cost: Option<u64>,
        bounds: &Bounds,
    ) -> Result<Check, ValidationError> {
        self.check_overridden(key, cost, bounds, None)
            .map(|(check, _)| check)
    }

    /// [`check`](Self::check), where `api` is the key's override set at
    /// runtime, if any: it comes before the file's override, which comes
    /// before the policy's limits. Also says which of them applied.
    pub fn check_overridden(
        &self,
        key: String,
        cost: Option<u64>,
        bounds: &Bounds,
        api: Option<&Arc<[Limit]>>,
    ) -> Result<(Check, Option<Overridden>), ValidationError> {
        let (limits, overridden) = match api {
            Some(limits) => (limits.clone(), Some(Overridden::Api)),
            None => match self.overrides.get(&key) {
                Some(limits) => (limits.clone(), Some(Overridden::File)),
                None => (self.limits.clone(), None),
            },
        };
        let mut check = Check::for_policy(key, self.name.clone(), limits, cost, bounds)?;
        check.shadow = self.shadow;
        check.failure_mode = self.failure_mode;
        check.lease = self.lease;
        Ok((check, overridden))
    }
}

/// Every policy of one file, as loaded at one instant. Immutable: a reload
/// builds a new set and swaps it in whole, so a check sees one set or the
/// other, never half of each.
#[derive(Debug, Clone)]
pub struct PolicySet {
    policies: BTreeMap<Arc<str>, Arc<Policy>>,
    /// The policies that name levels (`hierarchy`), apart: every other
    /// reader of a policy (leasing, top, overrides) reads limits.
    hierarchies: BTreeMap<Arc<str>, Arc<Hierarchy>>,
    /// Hex SHA-256 of the file's bytes; empty for the empty set.
    pub sha256: String,
    /// When this set was loaded; `None` for the empty set.
    pub loaded_at: Option<SystemTime>,
    /// Where it was loaded from (for display); `None` for the empty set
    /// and for sets built in code.
    pub source: Option<String>,
}

impl PolicySet {
    /// No policies: what runs without a policies file.
    pub fn empty() -> PolicySet {
        PolicySet {
            policies: BTreeMap::new(),
            hierarchies: BTreeMap::new(),
            sha256: String::new(),
            loaded_at: None,
            source: None,
        }
    }

    /// A set of already validated policies (tests, and the parser).
    pub fn from_policies(
        policies: impl IntoIterator<Item = Policy>,
        sha256: String,
        loaded_at: Option<SystemTime>,
    ) -> PolicySet {
        PolicySet {
            policies: policies
                .into_iter()
                .map(|p| (p.name.clone(), Arc::new(p)))
                .collect(),
            hierarchies: BTreeMap::new(),
            sha256,
            loaded_at,
            source: None,
        }
    }

    /// This set with `hierarchies` (whose levels' policies it holds).
    pub fn with_hierarchies(mut self, hierarchies: impl IntoIterator<Item = Hierarchy>) -> Self {
        self.hierarchies = hierarchies
            .into_iter()
            .map(|h| (h.name.clone(), Arc::new(h)))
            .collect();
        self
    }

    /// A policy that names levels.
    pub fn hierarchy(&self, name: &str) -> Option<&Arc<Hierarchy>> {
        self.hierarchies.get(name)
    }

    /// The hierarchies, in name order.
    pub fn hierarchies(&self) -> impl Iterator<Item = &Arc<Hierarchy>> {
        self.hierarchies.values()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Policy>> {
        self.policies.get(name)
    }

    /// Policies in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.policies.values()
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}
