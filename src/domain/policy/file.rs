//! The policies file: TOML text in, a validated [`PolicySet`] or every
//! problem out, each with its line and column. No file IO here: the edge
//! reads the bytes, this module judges them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use toml::Spanned;

use super::forward::build_forward;
use super::hierarchy_build::{RawPolicies, build_hierarchy};
use super::names::{check_policy_name, toml_key};
use super::problem::{PolicyFileError, Report};
use super::raw::{RawFile, RawLimit, RawOverride, RawPolicy};
use super::{Policy, PolicySet};
use crate::domain::{
    Algorithm, Bounds, FailureMode, Limit, Rule, RuleInput, ValidationError, validate_count,
    validate_leases, validate_name,
};

/// Hex SHA-256 of a file's bytes: what identifies a loaded version.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl PolicySet {
    /// Parses and validates a whole policies file. `Err` lists every
    /// problem with its line and column; nothing of an invalid file is kept.
    /// A file without policies is valid and loads none.
    pub fn parse(
        text: &str,
        bounds: &Bounds,
        loaded_at: Option<SystemTime>,
    ) -> Result<PolicySet, PolicyFileError> {
        let mut report = Report::new(text);
        let raw: RawFile = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(error) => {
                let span = error.span().unwrap_or(0..0);
                report.add(String::new(), span, error.message().trim_end());
                return Err(report.finish());
            }
        };
        let mut policies = Vec::with_capacity(raw.policies.len());
        let mut hierarchies = Vec::new();
        let by_name: RawPolicies = raw
            .policies
            .iter()
            .map(|(name, policy)| (name.get_ref().as_str(), policy.get_ref()))
            .collect();
        for (name, policy) in &raw.policies {
            if policy.get_ref().levels.is_some() {
                let built = build_hierarchy(name, policy, &by_name, bounds, &mut report);
                hierarchies.extend(built);
            } else if let Some(policy) = build_policy(name, policy, bounds, &mut report) {
                policies.push(policy);
            }
        }
        if report.count() != 0 {
            return Err(report.finish());
        }
        let set = PolicySet::from_policies(policies, sha256_hex(text.as_bytes()), loaded_at);
        Ok(set.with_hierarchies(hierarchies))
    }
}

fn build_policy(
    name: &Spanned<String>,
    raw: &Spanned<RawPolicy>,
    bounds: &Bounds,
    report: &mut Report,
) -> Option<Policy> {
    let path = format!("policies.{}", toml_key(name.get_ref()));
    let before = report.count();
    check_policy_name(&path, name, report);
    let policy = raw.get_ref();
    let failure_mode = failure_mode_of(&path, policy, report);
    let limits = match &policy.limits {
        Some(limits) => build_limits(&path, limits, bounds, report),
        None => {
            report.add(
                format!("{path}.limits"),
                name.span(),
                "missing: a policy needs at least one limit",
            );
            Vec::new()
        }
    };
    let mut overrides = HashMap::with_capacity(policy.overrides.len());
    for (key, raw_override) in &policy.overrides {
        let merged = build_override(&path, &limits, key, raw_override, bounds, report);
        if let Some(merged) = merged {
            overrides.insert(key.get_ref().clone(), merged);
        }
    }
    let forward = build_forward(&path, policy, report);
    if let Some(ids_from) = &policy.ids_from {
        report.add(
            format!("{path}.ids_from"),
            ids_from.span(),
            "only a policy with `levels` takes `ids_from`; this one is keyed by `key_from`",
        );
    }
    let lease = policy
        .lease
        .as_ref()
        .and_then(|raw| super::lease::build_lease(&path, raw, &limits, &overrides, report));
    if let Some(key_from) = &policy.key_from {
        refuse_leases_for_forward_auth(&path, key_from.span(), &limits, &overrides, report);
    }
    (report.count() == before).then(|| Policy {
        name: Arc::from(name.get_ref().as_str()),
        description: policy.description.clone(),
        failure_mode,
        shadow: policy.shadow.unwrap_or(false),
        limits: limits.into(),
        overrides,
        forward,
        lease,
    })
}

fn failure_mode_of(path: &str, policy: &RawPolicy, report: &mut Report) -> Option<FailureMode> {
    policy.failure_mode.as_ref().and_then(|mode| {
        let found = FailureMode::ALL
            .into_iter()
            .find(|m| m.as_str() == mode.get_ref());
        if found.is_none() {
            report.add(
                format!("{path}.failure_mode"),
                mode.span(),
                format!(
                    "must be \"open\", \"closed\" or \"local\", got {:?}",
                    mode.get_ref()
                ),
            );
        }
        found
    })
}

/// Forward-auth cannot release a lease (there is no hook at the end of the
/// proxied request), so a policy written for it (`key_from`) may not hold
/// a concurrency limit, in its limits or an override's.
fn refuse_leases_for_forward_auth(
    path: &str,
    span: std::ops::Range<usize>,
    limits: &[Limit],
    overrides: &HashMap<String, Arc<[Limit]>>,
    report: &mut Report,
) {
    let leased = limits
        .iter()
        .chain(overrides.values().flat_map(|l| l.iter()))
        .find(|l| l.rule.algorithm == Algorithm::Concurrency);
    if let Some(limit) = leased {
        report.add(
            format!("{path}.key_from"),
            span,
            format!(
                "forward-auth cannot apply a concurrency limit ({:?}): nothing releases its lease \
                 when the proxied request ends; check it with POST /v1/check and release it with \
                 POST /v1/release, or drop key_from",
                &*limit.name
            ),
        );
    }
}

/// A list of limits: each valid, names unique, 1 to the configured count.
fn build_limits(
    path: &str,
    raw: &Spanned<Vec<Spanned<RawLimit>>>,
    bounds: &Bounds,
    report: &mut Report,
) -> Vec<Limit> {
    let list_path = format!("{path}.limits");
    if let Err(e) = validate_count(&list_path, raw.get_ref().len(), bounds) {
        report.add(list_path.clone(), raw.span(), e.message);
    }
    let mut built: Vec<Limit> = Vec::with_capacity(raw.get_ref().len());
    // Each name's first position: a set, not a scan, since a bad file may
    // hold thousands of limits (it is rejected, but judged in full first).
    let mut names: HashMap<&str, usize> = HashMap::with_capacity(raw.get_ref().len());
    for (i, limit) in raw.get_ref().iter().enumerate() {
        let at = format!("{list_path}[{i}]");
        let name = limit.get_ref().name.get_ref().as_str();
        if let Some(&j) = names.get(name) {
            report.add(
                format!("{at}.name"),
                limit.get_ref().name.span(),
                format!(
                    "{name:?} is also the name of limits[{j}]; names must be unique in a policy"
                ),
            );
        }
        names.entry(name).or_insert(i);
        if let Some(limit) = build_limit(&at, limit.get_ref(), bounds, report) {
            built.push(limit);
        }
    }
    if let Err(e) = validate_leases(&built) {
        report.add(
            format!("{list_path}{}", &e.field["limits".len()..]),
            raw.span(),
            e.message,
        );
    }
    built
}

/// One limit through the same validation as an inline check's.
fn build_limit(at: &str, raw: &RawLimit, bounds: &Bounds, report: &mut Report) -> Option<Limit> {
    let mut ok = true;
    if let Err(e) = validate_name("name", raw.name.get_ref()) {
        report.add(format!("{at}.name"), raw.name.span(), e.message);
        ok = false;
    }
    let algorithm = match &raw.algorithm {
        None => None,
        Some(a) => match Algorithm::ALL
            .into_iter()
            .find(|x| x.as_str() == a.get_ref())
        {
            Some(found) => Some(found),
            None => {
                let names: Vec<&str> = Algorithm::ALL.iter().map(|x| x.as_str()).collect();
                report.add(
                    format!("{at}.algorithm"),
                    a.span(),
                    format!("must be one of {}, got {:?}", names.join(", "), a.get_ref()),
                );
                return None;
            }
        },
    };
    // Negative numbers are out of range; u64::MAX is too, so Rule::new says so.
    let whole = |v: i64| u64::try_from(v).unwrap_or(0);
    let input = RuleInput {
        limit: whole(*raw.limit.get_ref()),
        window: raw.window.as_ref().map(|w| w.get_ref().0.clone()),
        calendar: raw.calendar.as_ref().map(|c| c.get_ref().clone()),
        timezone: raw.timezone.as_ref().map(|t| t.get_ref().clone()),
        lease_ttl: raw.lease_ttl.as_ref().map(|w| w.get_ref().0.clone()),
        algorithm,
        burst: raw.burst.as_ref().map(|b| whole(*b.get_ref())),
    };
    match Rule::new(&input, bounds) {
        Ok(rule) if ok => Some(Limit {
            name: Arc::from(raw.name.get_ref().as_str()),
            rule,
            scope: None,
            level: None,
        }),
        Ok(_) => None,
        Err(ValidationError { field, message }) => {
            let span = match field.as_str() {
                "window" => raw.window.as_ref().map_or(raw.name.span(), |w| w.span()),
                "calendar" => raw.calendar.as_ref().map_or(raw.name.span(), |c| c.span()),
                "timezone" => raw.timezone.as_ref().map_or(raw.name.span(), |t| t.span()),
                "lease_ttl" => raw.lease_ttl.as_ref().map_or(raw.name.span(), |t| t.span()),
                "burst" => raw.burst.as_ref().map_or(raw.limit.span(), |b| b.span()),
                _ => raw.limit.span(),
            };
            report.add(format!("{at}.{field}"), span, message);
            None
        }
    }
}

/// An override's limits, each replacing the policy's limit of its name;
/// returns the policy's whole list with those replaced (order kept).
fn build_override(
    path: &str,
    policy_limits: &[Limit],
    key: &Spanned<String>,
    raw: &Spanned<RawOverride>,
    bounds: &Bounds,
    report: &mut Report,
) -> Option<Arc<[Limit]>> {
    let at = format!("{path}.overrides.{:?}", key.get_ref());
    let before = report.count();
    let key_len = key.get_ref().len();
    if key_len == 0 || key_len > bounds.max_key_bytes {
        report.add(
            at.clone(),
            key.span(),
            format!(
                "a client key is 1 to {} bytes (limits.max_key_bytes), got {key_len}",
                bounds.max_key_bytes
            ),
        );
    }
    let Some(raw_limits) = &raw.get_ref().limits else {
        report.add(
            format!("{at}.limits"),
            key.span(),
            "missing: an override replaces at least one limit",
        );
        return None;
    };
    let replacements = build_limits(&at, raw_limits, bounds, report);
    refuse_unknown_names(&at, policy_limits, raw_limits.get_ref(), report);
    if report.count() != before {
        return None;
    }
    let merged: Vec<Limit> = policy_limits
        .iter()
        .map(|l| {
            replacements
                .iter()
                .find(|r| r.name == l.name)
                .unwrap_or(l)
                .clone()
        })
        .collect();
    if let Err(e) = validate_leases(&merged) {
        report.add(format!("{at}.limits"), raw.span(), e.message);
        return None;
    }
    Some(merged.into())
}

/// An override may only replace limits the policy has.
fn refuse_unknown_names(
    at: &str,
    policy_limits: &[Limit],
    raw_limits: &[Spanned<RawLimit>],
    report: &mut Report,
) {
    // Built once: a bad file may hold thousands of limits on either side.
    let known: HashSet<&str> = policy_limits.iter().map(|l| &*l.name).collect();
    let listed = || {
        let mut names: Vec<&str> = policy_limits.iter().take(9).map(|l| &*l.name).collect();
        if names.len() > 8 {
            names[8] = "...";
        }
        names.join(", ")
    };
    let mut listed_names: Option<String> = None;
    for (i, limit) in raw_limits.iter().enumerate() {
        let name = limit.get_ref().name.get_ref();
        if !known.contains(name.as_str()) {
            let its = listed_names.get_or_insert_with(listed);
            report.add(
                format!("{at}.limits[{i}].name"),
                limit.get_ref().name.span(),
                format!("{name:?} is not a limit of this policy (its limits: {its})"),
            );
        }
    }
}
