//! envoyproxy/ratelimit's YAML config format, read unchanged, and its
//! validation into a descriptor tree ([`RlsDomain`]).
//!
//! Unknown keys are errors, as they are there. Keys that project accepts
//! and ratekeeper does not implement (`quota_mode`, `value_to_metric`,
//! `share_threshold`, `metadata`) are refused as unknown fields, and
//! wildcard values (`*`) with a message saying so: silently ignoring them
//! would change what is limited.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use super::{ConfigLimit, KeyNodes, Node, RlsDomain, RlsLimit, Unit, limit_name};
use crate::domain::{Algorithm, Bounds, Rule, RuleInput, WindowInput};

/// The deepest descriptor tree accepted: bounds recursion on load.
const MAX_DEPTH: usize = 16;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoot {
    domain: String,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: String,
    value: Option<String>,
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    /// Accepted for compatibility; metrics never carry descriptor values.
    #[serde(default)]
    detailed_metric: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: u64,
    #[serde(default)]
    unlimited: bool,
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<RawReplace>,
    /// Our extension: default fixed_window, as envoyproxy/ratelimit counts.
    algorithm: Option<String>,
    /// Our extension: token_bucket and gcra capacity.
    burst: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplace {
    name: String,
}

/// Parses one file's text (its name only labels errors upstream).
pub fn parse_domain(text: &str, bounds: &Bounds) -> Result<RlsDomain, String> {
    // The parser's time grows with the square of the flow depth: bound it first.
    super::yaml_depth::check_flow_depth(text).map_err(|e| e.to_string())?;
    let raw: RawRoot = serde_norway::from_str(text).map_err(|e| e.to_string())?;
    if raw.domain.is_empty() || raw.domain.len() > 255 {
        return Err("domain must be 1 to 255 bytes".into());
    }
    let root = build_level(&raw.descriptors, "", 0, bounds)?;
    Ok(RlsDomain {
        policy: format!("rls.{}", limit_name(&raw.domain)).into(),
        name: raw.domain.into(),
        root,
    })
}

fn build_level(
    raw: &[RawDescriptor],
    parent: &str,
    depth: usize,
    bounds: &Bounds,
) -> Result<Node, String> {
    if depth >= MAX_DEPTH {
        return Err(format!(
            "descriptors nested deeper than {MAX_DEPTH} at {parent}"
        ));
    }
    let mut children: HashMap<Box<str>, KeyNodes> = HashMap::new();
    for d in raw {
        if d.key.is_empty() {
            return Err(format!("descriptor has empty key (under {parent:?})"));
        }
        let value = d.value.as_deref().filter(|v| !v.is_empty());
        let path = match value {
            Some(v) => format!("{parent}{}_{v}", d.key),
            None => format!("{parent}{}", d.key),
        };
        if d.key.contains('*') || value.is_some_and(|v| v.contains('*')) {
            return Err(format!("{path}: wildcard values (`*`) are not supported"));
        }
        let mut node = build_level(&d.descriptors, &format!("{path}."), depth + 1, bounds)?;
        node.shadow = d.shadow_mode;
        let _ = d.detailed_metric;
        if let Some(rl) = &d.rate_limit {
            node.limit = Some(build_limit(rl, &path, bounds).map_err(|e| format!("{path}: {e}"))?);
        }
        let slot = children.entry(d.key.as_str().into()).or_default();
        let duplicate = match value {
            Some(v) => slot.values.insert(v.into(), node).is_some(),
            None => slot.any.replace(Box::new(node)).is_some(),
        };
        if duplicate {
            return Err(format!("duplicate descriptor composite key '{path}'"));
        }
    }
    Ok(Node {
        children,
        ..Node::default()
    })
}

fn build_limit(rl: &RawRateLimit, path: &str, bounds: &Bounds) -> Result<ConfigLimit, String> {
    let unit = rl.unit.as_deref().map(Unit::parse).transpose()?;
    let replaces: Vec<Arc<str>> = rl.replaces.iter().map(|r| r.name.as_str().into()).collect();
    if replaces.iter().any(|r| r.is_empty()) {
        return Err("should not have an empty replaces entry".into());
    }
    let name: Option<Arc<str>> = rl.name.as_deref().filter(|n| !n.is_empty()).map(Into::into);
    if name.as_ref().is_some_and(|n| replaces.contains(n)) {
        return Err("replaces should not contain name of same descriptor".into());
    }
    let kind = if rl.unlimited {
        if unit.is_some() {
            return Err("should not specify rate limit unit when unlimited".into());
        }
        None
    } else {
        let unit = unit.ok_or("rate_limit needs a unit")?;
        let algorithm = match rl.algorithm.as_deref() {
            None => Algorithm::FixedWindow,
            Some(a) => Algorithm::RATES
                .into_iter()
                .find(|x| x.as_str() == a)
                .ok_or_else(|| format!("unknown algorithm {a:?}"))?,
        };
        let rule = Rule::new(
            &RuleInput {
                limit: rl.requests_per_unit,
                window: Some(WindowInput::Seconds(unit.seconds())),
                algorithm: Some(algorithm),
                burst: rl.burst,
                ..RuleInput::default()
            },
            bounds,
        )
        .map_err(|e| format!("rate_limit.{}: {}", e.field, e.message))?;
        Some(RlsLimit {
            unit,
            rule,
            limit_name: limit_name(name.as_deref().unwrap_or(path)).into(),
        })
    };
    Ok(ConfigLimit {
        kind,
        name,
        replaces,
    })
}
