//! One limit of a check: a named rule, and where its state lives. Apart
//! from `check.rs` so that what reads limits (lease modes) need not import
//! the check.

use std::sync::Arc;

use super::rule::Rule;

/// One limit of a check: a named rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limit {
    /// From the policies file, the inline request (or its position there),
    /// or `default` for the single-rule form. Matches `[a-z0-9_.-]{1,64}`.
    pub name: Arc<str>,
    pub rule: Rule,
    /// Where this limit's state lives when it differs from limit to limit
    /// within one check: an Envoy RLS descriptor's entries (its client key).
    /// `None` for every other limit. Part of the state key after the
    /// policy and limit names, so it never changes the cluster slot.
    pub scope: Option<Arc<str>>,
    /// A levels check's limit: the level whose client key and policy hold
    /// its state (`domain::level`). `None` for every other check.
    pub level: Option<Arc<Level>>,
}

/// One level of a levels check: where its limits' state lives, and its
/// name in metrics and answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Level {
    /// Its position in the check's `levels`.
    pub index: usize,
    /// Its position as text (`"0"`, `"1"`, ...), or the name a policy's
    /// hierarchy gives it: the `level` label of metrics, so always one of
    /// a bounded set, never the client's words.
    pub name: Arc<str>,
    /// The level's client key.
    pub key: Box<str>,
    /// The level's policy, `None` for inline limits.
    pub policy: Option<Arc<str>>,
}
