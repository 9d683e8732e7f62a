//! Envoy's rate limit service (RLS v3), as a pure function from a request's
//! descriptors to limits: envoyproxy/ratelimit's config format and its
//! matching rules. The transport (tonic) lives in `crate::rls`.
//!
//! Matching, as envoyproxy/ratelimit's `GetLimit` does it: walk the request
//! descriptor's entries from the domain's top level; at each entry take the
//! child with the exact `key` and `value`, else the child with that `key`
//! and no value; no child ends the walk with no limit. The limit is the
//! `rate_limit` of the node reached by the LAST entry: a request with more
//! entries than the tree is deep, or whose last node has no `rate_limit`,
//! has none (a shallower node's limit does not apply).

mod config;
mod scope;
#[cfg(test)]
mod tests;
pub mod yaml_depth;

use std::collections::HashMap;
use std::sync::Arc;

pub use config::parse_domain;
pub use scope::{bounded_scope, limit_name, scope_of};

use super::{Algorithm, Bounds, Limit, Rule, RuleInput, WindowInput};

/// Bounds on one request, whatever the config: a request beyond them is
/// refused as invalid rather than walked. Only what Envoy's own config
/// decides (the number of actions and of entries per action, the domain,
/// the entry keys) can reach these: a client's HTTP request only chooses
/// entry values (any bytes, of any length), whether an entry is sent at
/// all (`skip_if_absent`, so a descriptor may arrive with none), and no
/// value is ever refused (see [`bounded_scope`]).
pub const MAX_DESCRIPTORS: usize = 64;
pub const MAX_ENTRIES: usize = 32;

/// envoyproxy/ratelimit's units (its proto enum); MONTH is 30 days and
/// YEAR 365, as there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    fn parse(s: &str) -> Result<Unit, String> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return Err(format!("invalid rate limit unit '{s}'")),
        })
    }

    pub fn seconds(self) -> u64 {
        const DAY: u64 = 86_400;
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        }
    }
}

/// One domain's descriptor tree (one config file).
#[derive(Debug)]
pub struct RlsDomain {
    pub name: Arc<str>,
    /// The checks' policy name: `rls.` and the sanitized domain. A metrics
    /// label, so it comes from the config, never from a request.
    pub policy: Arc<str>,
    root: Node,
}

#[derive(Debug, Default)]
struct Node {
    children: HashMap<Box<str>, KeyNodes>,
    limit: Option<ConfigLimit>,
    shadow: bool,
}

/// The children of one key: by exact value, and the key-only default.
#[derive(Debug, Default)]
struct KeyNodes {
    values: HashMap<Box<str>, Node>,
    any: Option<Box<Node>>,
}

#[derive(Debug)]
struct ConfigLimit {
    /// `None`: `unlimited`.
    kind: Option<RlsLimit>,
    /// The config's `name`, which `replaces` refers to.
    name: Option<Arc<str>>,
    replaces: Vec<Arc<str>>,
}

#[derive(Debug, Clone)]
struct RlsLimit {
    unit: Unit,
    rule: Rule,
    limit_name: Arc<str>,
}

/// All domains in force.
#[derive(Debug, Default)]
pub struct RlsConfig {
    pub domains: HashMap<Arc<str>, RlsDomain>,
}

/// One request descriptor, as the transport hands it over.
#[derive(Debug, Clone)]
pub struct DescriptorInput {
    /// (key, value) as sent: protobuf `string`s, but Envoy copies a
    /// header's bytes as they are, so a value (or key) need not be UTF-8.
    /// Such bytes never equal a configured key or value (the config is
    /// UTF-8): a value falls to its key's default, with a counter of its
    /// own ([`scope_of`]).
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// `RateLimitOverride`: requests per unit, and the unit (`None`: a
    /// unit number this server does not know).
    pub override_limit: Option<(u64, Option<Unit>)>,
    pub hits_addend: Option<u64>,
}

/// What applies to one descriptor.
#[derive(Debug, Clone, PartialEq)]
pub enum Planned {
    /// No match (or an unknown domain, or replaced): OK, no limit.
    NoLimit,
    /// `unlimited: true`: OK, no limit, remaining reported as u32::MAX.
    Unlimited,
    Limited {
        limit: Limit,
        unit: Unit,
        shadow: bool,
        cost: u64,
    },
    /// A descriptor that cannot be evaluated (a bad `limit` override, or an
    /// enforced limit past `limits.max_limits_per_check` distinct ones): it answers
    /// OVER_LIMIT, so the request does. Refusing the whole request instead
    /// would make Envoy (`failure_mode_deny: false` by default) let it
    /// through with no limit at all. The text is for logs only.
    Refused(String),
}

/// A request refused as a whole (INVALID_ARGUMENT).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRequest(pub String);

impl RlsConfig {
    /// The limit of every descriptor, in order; `replaces` applied.
    /// `hits` is the request's `hits_addend` (0 means 1, as in Envoy).
    pub fn plan(
        &self,
        domain: &str,
        descriptors: &[DescriptorInput],
        hits: u64,
        bounds: &Bounds,
    ) -> Result<(Option<&RlsDomain>, Vec<Planned>), InvalidRequest> {
        validate(domain, descriptors)?;
        let Some(dom) = self.domains.get(domain) else {
            // envoyproxy/ratelimit: an unknown domain has no limits (OK).
            return Ok((None, vec![Planned::NoLimit; descriptors.len()]));
        };
        let request_hits = if hits == 0 { 1 } else { hits };
        let mut replaced: Vec<&Arc<str>> = Vec::new();
        let mut planned: Vec<(Planned, Option<&Arc<str>>)> = Vec::new();
        for d in descriptors {
            let cost = d.hits_addend.unwrap_or(request_hits);
            let scope = bounded_scope(&d.entries, bounds.max_key_bytes);
            if let Some((rpu, unit)) = d.override_limit {
                // The override bypasses the config (and its shadow mode).
                planned.push((overridden(rpu, unit, scope, cost, bounds), None));
                continue;
            }
            let Some((node, cl)) = dom.find(&d.entries) else {
                planned.push((Planned::NoLimit, None));
                continue;
            };
            replaced.extend(cl.replaces.iter());
            let p = match &cl.kind {
                None => Planned::Unlimited,
                Some(l) => Planned::Limited {
                    limit: Limit {
                        name: l.limit_name.clone(),
                        rule: l.rule,
                        scope: Some(scope.into()),
                        level: None,
                    },
                    unit: l.unit,
                    shadow: node.shadow,
                    cost,
                },
            };
            planned.push((p, cl.name.as_ref()));
        }
        let out = capped(planned, &replaced, bounds.max_limits_per_check);
        Ok((Some(dom), out))
    }
}

/// `replaces` applied, then the work of one request bounded like any
/// check's: at most `max` distinct enforced limits (a descriptor repeated
/// with the same cost is one counter, applied once) and, separately, at
/// most `max` distinct shadow limits. Enforced limits past the bound are
/// refused (OVER_LIMIT), never dropped: dropping would let the request
/// through unlimited. Shadow limits past theirs are not evaluated and
/// answer OK: they never deny, so skipping one lets nothing through,
/// while refusing would make a shadow trial deny real traffic.
fn capped(
    planned: Vec<(Planned, Option<&Arc<str>>)>,
    replaced: &[&Arc<str>],
    max: usize,
) -> Vec<Planned> {
    // [enforced, shadow]: the distinct (limit, cost) pairs admitted so far.
    let mut seen: [Vec<(Limit, u64)>; 2] = Default::default();
    planned
        .into_iter()
        .map(|(p, name)| match (p, name) {
            (_, Some(n)) if replaced.contains(&n) => Planned::NoLimit,
            (
                Planned::Limited {
                    limit,
                    unit,
                    shadow,
                    cost,
                },
                _,
            ) => {
                let seen = &mut seen[usize::from(shadow)];
                let known = seen.iter().any(|(l, c)| *l == limit && *c == cost);
                if !known && seen.len() >= max {
                    return if shadow {
                        Planned::NoLimit
                    } else {
                        Planned::Refused(format!(
                            "more than {max} distinct limited descriptors (limits.max_limits_per_check)"
                        ))
                    };
                }
                if !known {
                    seen.push((limit.clone(), cost));
                }
                Planned::Limited {
                    limit,
                    unit,
                    shadow,
                    cost,
                }
            }
            (p, _) => p,
        })
        .collect()
}

impl RlsDomain {
    /// The node reached by the descriptor's last entry and its limit (see
    /// the module doc).
    fn find(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> Option<(&Node, &ConfigLimit)> {
        let mut level = &self.root;
        for (i, (key, value)) in entries.iter().enumerate() {
            let nodes = level.children.get(std::str::from_utf8(key).ok()?)?;
            let exact = std::str::from_utf8(value).ok();
            let exact = exact.and_then(|v| nodes.values.get(v));
            let next = exact.or(nodes.any.as_deref())?;
            if i == entries.len() - 1 {
                return next.limit.as_ref().map(|l| (next, l));
            }
            level = next;
        }
        None
    }
}

fn validate(domain: &str, descriptors: &[DescriptorInput]) -> Result<(), InvalidRequest> {
    let bad = |m: String| Err(InvalidRequest(m));
    if domain.is_empty() {
        return bad("rate limit domain must not be empty".into());
    }
    if descriptors.len() > MAX_DESCRIPTORS {
        return bad(format!(
            "at most {MAX_DESCRIPTORS} descriptors, got {}",
            descriptors.len()
        ));
    }
    for (i, d) in descriptors.iter().enumerate() {
        // No entries is allowed: Envoy sends that when every action of a
        // rate limit is a `skip_if_absent` header the client left out. It
        // matches nothing (no limit), as in envoyproxy/ratelimit; refusing
        // it would fail the whole call, and Envoy would let it through
        // with no limit at all.
        let n = d.entries.len();
        if n > MAX_ENTRIES {
            return bad(format!(
                "descriptors[{i}] must hold at most {MAX_ENTRIES} entries, got {n}"
            ));
        }
        if d.entries.iter().any(|(k, _)| k.is_empty()) {
            return bad(format!("descriptors[{i}] has an entry with an empty key"));
        }
    }
    Ok(())
}

/// A `limit` override's plan: refused (OVER_LIMIT) when its unit is
/// unknown or its rule invalid (`requests_per_unit: 0`, too large).
fn overridden(rpu: u64, unit: Option<Unit>, scope: String, cost: u64, bounds: &Bounds) -> Planned {
    let Some(unit) = unit else {
        return Planned::Refused("limit override: unknown unit".into());
    };
    let input = RuleInput {
        limit: rpu,
        window: Some(WindowInput::Seconds(unit.seconds())),
        algorithm: Some(Algorithm::FixedWindow),
        burst: None,
        ..RuleInput::default()
    };
    match Rule::new(&input, bounds) {
        Ok(rule) => Planned::Limited {
            limit: Limit {
                name: "override".into(),
                rule,
                scope: Some(scope.into()),
                level: None,
            },
            unit,
            shadow: false,
            cost,
        },
        Err(e) => Planned::Refused(format!("limit override: {}", e.message)),
    }
}
