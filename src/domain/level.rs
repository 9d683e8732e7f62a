//! Levels: one check over several client keys at once, all or nothing
//! (an organisation's monthly budget, its team's daily one and its user's
//! rate, say). Each level is a check form of its own (a policy and a key,
//! inline limits and a key, or one rule and a key) without a cost; the
//! check's cost applies to every level.
//!
//! A levels check is one [`Check`] whose limits are every level's limits in
//! order, each carrying its [`Level`]: where its state lives (the level's
//! client key and policy). So every stage and both stores decide it as any
//! check of several limits, all or nothing, and a level's limits keep the
//! very counters a check of that level alone uses (`domain::state_key`).
//! The check's own `key` and `policy` are the first level's: its
//! reservation's record lives beside that level's state.

use std::ops::Range;
use std::sync::Arc;

use super::FailureMode;
use super::check::{Check, validate_cost};
use super::limit::{Level, Limit};
use super::rule::ValidationError;
use super::state_key::StateKey;

/// The most levels one check may carry.
pub const MAX_LEVELS: usize = 8;

/// One level of a levels check as parsed: a check of its own (its cost is
/// ignored) and its name, if a policy's hierarchy gives it one.
#[derive(Debug, Clone)]
pub struct LevelInput {
    pub check: Check,
    pub name: Option<Arc<str>>,
}

impl Check {
    /// A check of `levels`, all or nothing, spending `cost` (default 1) on
    /// every one. Errors name the path (`levels[1].key`).
    pub fn levels(levels: Vec<LevelInput>, cost: Option<u64>) -> Result<Check, ValidationError> {
        if levels.is_empty() || levels.len() > MAX_LEVELS {
            return Err(ValidationError::new(
                "levels",
                format!("must hold 1 to {MAX_LEVELS} levels, got {}", levels.len()),
            ));
        }
        let mut limits: Vec<Limit> = Vec::new();
        for (index, input) in levels.iter().enumerate() {
            let path = format!("levels[{index}]");
            let part = &input.check;
            if part.shadow {
                return Err(ValidationError::new(
                    format!("{path}.policy"),
                    "a shadow policy cannot be a level: its denial answers allowed, \
                     which would spend the other levels past what they allow",
                ));
            }
            if part.concurrency().is_some() {
                return Err(ValidationError::new(
                    path,
                    "a level takes no concurrency limit: a lease is released by the check \
                     that took it, not by a hierarchy",
                ));
            }
            let level = Arc::new(Level {
                index,
                name: input
                    .name
                    .clone()
                    .unwrap_or_else(|| Arc::from(index.to_string())),
                key: part.key.as_str().into(),
                policy: part.policy.clone(),
            });
            limits.extend(part.limits.iter().map(|l| Limit {
                level: Some(level.clone()),
                ..l.clone()
            }));
        }
        let first = &levels[0].check;
        let check = Check {
            key: first.key.clone(),
            limits: limits.into(),
            cost: cost.unwrap_or(1),
            policy: first.policy.clone(),
            shadow: false,
            // The strictest mode any level's policy asks for: a level
            // whose policy fails closed must not be spent past while the
            // store is away because another level's fails open.
            failure_mode: strictest(levels.iter().filter_map(|l| l.check.failure_mode)),
            // Hot-key leasing answers from a chunk of one key's capacity;
            // a hierarchy spends on several, so it always asks the store.
            lease: None,
        };
        validate_distinct(&check)?;
        validate_cost(&check.limits, check.cost)?;
        Ok(check)
    }

    /// Whether this is a levels check.
    pub fn has_levels(&self) -> bool {
        self.limits.first().is_some_and(|l| l.level.is_some())
    }

    /// Each level and the range of its limits in `limits`, in order; empty
    /// for a check without levels.
    pub fn level_ranges(&self) -> Vec<(&Arc<Level>, Range<usize>)> {
        let mut ranges: Vec<(&Arc<Level>, Range<usize>)> = Vec::new();
        for (i, limit) in self.limits.iter().enumerate() {
            let Some(level) = &limit.level else { continue };
            match ranges.last_mut() {
                Some((last, range)) if last.index == level.index => range.end = i + 1,
                _ => ranges.push((level, i..i + 1)),
            }
        }
        ranges
    }

    /// The check of `range` of this check's limits (one level's, or one
    /// cluster slot's), as a check of its own: the same cost, the key and
    /// policy of its first limit's level.
    pub fn part(&self, limits: Vec<Limit>) -> Check {
        let level = limits[0].level.clone();
        Check {
            key: level
                .as_ref()
                .map_or_else(|| self.key.clone(), |l| l.key.to_string()),
            policy: level.map_or_else(|| self.policy.clone(), |l| l.policy.clone()),
            limits: limits.into(),
            ..self.clone()
        }
    }
}

/// Two levels that keep one counter (the same key and policy, or the same
/// key with inline limits of one algorithm and window) would spend it
/// twice for one request.
fn validate_distinct(check: &Check) -> Result<(), ValidationError> {
    let keys: Vec<StateKey> = check
        .limits
        .iter()
        .map(|l| StateKey::of(check, l))
        .collect();
    for (i, key) in keys.iter().enumerate() {
        if let Some(j) = keys[..i].iter().position(|k| k == key) {
            let (a, b) = (level_of(check, j), level_of(check, i));
            return Err(ValidationError::new(
                format!("levels[{b}]"),
                format!(
                    "keeps the same counter as levels[{a}] (the same key and policy, or the \
                     same key, algorithm and window): one request would spend it twice"
                ),
            ));
        }
    }
    Ok(())
}

fn level_of(check: &Check, limit: usize) -> usize {
    check.limits[limit].level.as_ref().map_or(0, |l| l.index)
}

/// Closed before local before open: what may be spent while the store is
/// away only shrinks.
fn strictest(modes: impl Iterator<Item = FailureMode>) -> Option<FailureMode> {
    modes.min_by_key(|mode| match mode {
        FailureMode::Closed => 0,
        FailureMode::Local => 1,
        FailureMode::Open => 2,
    })
}

#[cfg(test)]
#[path = "level_tests.rs"]
mod tests;
