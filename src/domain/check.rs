//! A validated check: the limits to apply, the client key, and the cost.
//!
//! Every check holds a list of limits and is decided all-or-nothing: it is
//! allowed iff every limit allows `cost`, and only then does every limit
//! spend it. The single-rule request of the first API is the case of one
//! limit named `default`, not a second path.

use std::sync::{Arc, LazyLock};

use super::limit::Limit;
use super::rule::{Algorithm, Bounds, Rule, RuleInput, ValidationError, validate_name};
use super::{FailureMode, LeaseMode};

/// The name of the single-rule form's one limit (and of its `RateLimit` item).
pub const DEFAULT_LIMIT_NAME: &str = "default";

static DEFAULT_NAME: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(DEFAULT_LIMIT_NAME));

/// A request to spend `cost` units of every limit in `limits` on `key`,
/// already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub key: String,
    /// At least one, at most `limits.max_limits_per_check`.
    pub limits: Arc<[Limit]>,
    pub cost: u64,
    /// The policy this check applies. `None` for inline checks.
    ///
    /// Also the state's namespace: a policy's limits keep their counters
    /// under the policy and limit names, so two policies never share state,
    /// and neither shares with inline checks. Inline checks keep state by
    /// algorithm and window only, as the single-rule API always has: two
    /// inline rules with the same algorithm and window on one key share it.
    pub policy: Option<Arc<str>>,
    /// A shadow policy decides and spends as usual but always answers allowed.
    pub shadow: bool,
    /// The policy's own failure mode; `None`: the service's.
    pub failure_mode: Option<FailureMode>,
    /// The policy's lease mode: a hot key may be answered from a chunk of
    /// its capacity this instance reserved (`limiter::lease`).
    pub lease: Option<LeaseMode>,
}

/// The single-rule form, as it arrives from a transport.
#[derive(Debug, Clone)]
pub struct CheckInput {
    pub key: String,
    pub rule: RuleInput,
    pub cost: Option<u64>,
}

/// One limit of the inline multi-limit form. `name` defaults to the
/// limit's position in the list (`"0"`, `"1"`, ...).
#[derive(Debug, Clone)]
pub struct LimitInput {
    pub name: Option<String>,
    pub rule: RuleInput,
}

impl Check {
    /// The single-rule form: one limit named `default`.
    pub fn new(input: CheckInput, bounds: &Bounds) -> Result<Check, ValidationError> {
        validate_key(&input.key, bounds)?;
        let rule = Rule::new(&input.rule, bounds)?;
        let limit = Limit {
            name: DEFAULT_NAME.clone(),
            rule,
            scope: None,
            level: None,
        };
        Check::build(input.key, Arc::new([limit]), input.cost, None)
    }

    /// The inline multi-limit form. Errors name the path (`limits[1].window`).
    pub fn inline(
        key: String,
        limits: Vec<LimitInput>,
        cost: Option<u64>,
        bounds: &Bounds,
    ) -> Result<Check, ValidationError> {
        validate_key(&key, bounds)?;
        validate_count("limits", limits.len(), bounds)?;
        let mut built: Vec<Limit> = Vec::with_capacity(limits.len());
        for (i, input) in limits.into_iter().enumerate() {
            let path = format!("limits[{i}]");
            let name = input.name.unwrap_or_else(|| i.to_string());
            validate_name(&format!("{path}.name"), &name)?;
            let rule = Rule::new(&input.rule, bounds).map_err(|e| e.within(&path))?;
            if let Some(j) = built.iter().position(|l| *l.name == *name) {
                return Err(ValidationError::new(
                    format!("{path}.name"),
                    format!("{name:?} is also the name of limits[{j}]; names must be unique"),
                ));
            }
            // Inline state is keyed by algorithm and window (see `policy`):
            // two such limits in one check would be one counter spent twice.
            if let Some(j) = built
                .iter()
                .position(|l| l.rule.algorithm == rule.algorithm && l.rule.window == rule.window)
            {
                return Err(ValidationError::new(
                    path,
                    format!(
                        "same algorithm and window as limits[{j}]: inline limits on one key \
                         share state by algorithm and window, so these would share one counter"
                    ),
                ));
            }
            built.push(Limit {
                name: name.into(),
                rule,
                scope: None,
                level: None,
            });
        }
        Check::build(key, built.into(), cost, None)
    }

    /// A check of a policy's limits (already validated when the policy
    /// was loaded): validates the key and the cost only.
    pub fn for_policy(
        key: String,
        policy: Arc<str>,
        limits: Arc<[Limit]>,
        cost: Option<u64>,
        bounds: &Bounds,
    ) -> Result<Check, ValidationError> {
        validate_key(&key, bounds)?;
        Check::build(key, limits, cost, Some(policy))
    }

    /// One limit, no validation: for tests and tools that build rules directly.
    pub fn single(key: impl Into<String>, rule: Rule, cost: u64) -> Check {
        Check {
            key: key.into(),
            limits: Arc::new([Limit {
                name: DEFAULT_NAME.clone(),
                rule,
                scope: None,
                level: None,
            }]),
            cost,
            policy: None,
            shadow: false,
            failure_mode: None,
            lease: None,
        }
    }

    /// Several limits, no validation: for tests and tools.
    pub fn multi(key: impl Into<String>, limits: Vec<Limit>, cost: u64) -> Check {
        Check {
            key: key.into(),
            limits: limits.into(),
            cost,
            policy: None,
            shadow: false,
            failure_mode: None,
            lease: None,
        }
    }

    fn build(
        key: String,
        limits: Arc<[Limit]>,
        cost: Option<u64>,
        policy: Option<Arc<str>>,
    ) -> Result<Check, ValidationError> {
        let cost = cost.unwrap_or(1);
        validate_leases(&limits)?;
        validate_cost(&limits, cost)?;
        Ok(Check {
            key,
            limits,
            cost,
            policy,
            shadow: false,
            failure_mode: None,
            lease: None,
        })
    }

    /// The check's concurrency limit, if it has one (at most one).
    pub fn concurrency(&self) -> Option<&Limit> {
        self.limits
            .iter()
            .find(|l| l.rule.algorithm == Algorithm::Concurrency)
    }

    /// The largest cost a check of these limits may spend: the tightest
    /// capacity among its rate limits (a larger cost could never be
    /// allowed). A concurrency limit takes one slot whatever the cost, so
    /// it bounds nothing, unless it is alone: then 1.
    pub fn max_cost(&self) -> u64 {
        max_cost(&self.limits).0
    }

    /// The first limit's rule: the whole check in the single-rule form.
    pub fn rule(&self) -> &Rule {
        &self.limits[0].rule
    }
}

/// [`Check::max_cost`], and the rate limit that sets it (`None`: only
/// concurrency limits).
fn max_cost(limits: &[Limit]) -> (u64, Option<&Limit>) {
    limits
        .iter()
        .filter(|l| l.rule.algorithm != Algorithm::Concurrency)
        .min_by_key(|l| l.rule.capacity())
        .map_or((1, None), |l| (l.rule.capacity(), Some(l)))
}

/// `cost` is at most what the tightest of `limits` holds: a larger cost
/// could never be allowed.
pub(super) fn validate_cost(limits: &[Limit], cost: u64) -> Result<(), ValidationError> {
    let (max_cost, tightest) = max_cost(limits);
    if cost > max_cost {
        let message = match tightest {
            // Only concurrency limits: a request is one in flight.
            None => {
                format!("must be 0 (look) or 1 (take a lease) for a concurrency limit, got {cost}")
            }
            Some(tightest) => {
                let what = if tightest.rule.algorithm.has_burst() {
                    "burst"
                } else {
                    "limit"
                };
                let whose = match &tightest.level {
                    Some(level) => {
                        format!(" of levels[{}] limit {:?}", level.index, tightest.name)
                    }
                    None if limits.len() == 1 => String::new(),
                    None => format!(" of limit {:?}", tightest.name),
                };
                format!("must be at most the {what}{whose} ({max_cost}), got {cost}")
            }
        };
        return Err(ValidationError::new("cost", message));
    }
    Ok(())
}

/// At most one concurrency limit per check: a check takes one lease, and
/// a second limit on the same key could only be a looser copy.
pub fn validate_leases(limits: &[Limit]) -> Result<(), ValidationError> {
    let mut concurrency = limits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.rule.algorithm == Algorithm::Concurrency);
    if let (Some((i, _)), Some((j, _))) = (concurrency.next(), concurrency.next()) {
        return Err(ValidationError::new(
            format!("limits[{j}].algorithm"),
            format!(
                "a check holds at most one concurrency limit (limits[{i}] is one): it takes one lease"
            ),
        ));
    }
    Ok(())
}

fn validate_key(key: &str, bounds: &Bounds) -> Result<(), ValidationError> {
    let key_len = key.len();
    if key_len == 0 || key_len > bounds.max_key_bytes {
        return Err(ValidationError::new(
            "key",
            format!(
                "must be 1 to {} bytes of UTF-8, got {key_len}",
                bounds.max_key_bytes
            ),
        ));
    }
    Ok(())
}

/// `wait_ms` of a check (absent: 0), at most `limits.max_wait`.
pub fn validate_wait_ms(wait_ms: Option<u64>, bounds: &Bounds) -> Result<u64, ValidationError> {
    let wait_ms = wait_ms.unwrap_or(0);
    let max = bounds.max_wait_ms;
    if wait_ms > max {
        return Err(ValidationError::new(
            "wait_ms",
            format!("must be between 0 and {max} (limits.max_wait), got {wait_ms}"),
        ));
    }
    Ok(wait_ms)
}

/// A list of limits holds 1 to `limits.max_limits_per_check`.
pub fn validate_count(field: &str, n: usize, bounds: &Bounds) -> Result<(), ValidationError> {
    let max = bounds.max_limits_per_check;
    if n == 0 || n > max {
        return Err(ValidationError::new(
            field,
            format!("must hold 1 to {max} limits (limits.max_limits_per_check), got {n}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
