//! A hierarchy from the policies file (`levels = [...]` in place of
//! `limits`): its levels, its ids and forward-auth's sources of them, each
//! problem with its place.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use toml::Spanned;

use super::forward::build_forward;
use super::hierarchy::{Hierarchy, HierarchyLevel, IdSource, KeyTemplate, MAX_IDS};
use super::names::{check_policy_name, toml_key};
use super::problem::Report;
use super::raw::{RawLevel, RawLimit, RawPolicy};
use crate::domain::forward::Source;
use crate::domain::{Bounds, MAX_LEVELS, validate_name};

/// The file's policies by name: built once per file, so that judging
/// every level of every hierarchy is one lookup each, not a scan.
pub(super) type RawPolicies<'a> = HashMap<&'a str, &'a RawPolicy>;

pub(super) fn build_hierarchy(
    name: &Spanned<String>,
    raw: &Spanned<RawPolicy>,
    all: &RawPolicies,
    bounds: &Bounds,
    report: &mut Report,
) -> Option<Hierarchy> {
    let path = format!("policies.{}", toml_key(name.get_ref()));
    let before = report.count();
    check_policy_name(&path, name, report);
    let policy = raw.get_ref();
    refuse_policy_fields(&path, policy, raw.span(), report);
    let levels_raw = policy.levels.as_ref()?;
    let count = levels_raw.get_ref().len();
    if count == 0 || count > MAX_LEVELS {
        report.add(
            format!("{path}.levels"),
            levels_raw.span(),
            format!("must hold 1 to {MAX_LEVELS} levels, got {count}"),
        );
    }
    let mut levels = Vec::with_capacity(count);
    for (i, raw_level) in levels_raw.get_ref().iter().enumerate() {
        let at = format!("{path}.levels[{i}]");
        if let Some(level) = build_level(&at, raw_level.get_ref(), all, bounds, report) {
            refuse_repeats(&at, &level, &levels, raw_level.span(), report);
            levels.push(level);
        }
    }
    let ids: BTreeSet<Arc<str>> = levels.iter().flat_map(|l| l.key.ids().cloned()).collect();
    if ids.len() > MAX_IDS {
        report.add(
            format!("{path}.levels"),
            levels_raw.span(),
            format!(
                "the key templates name {} ids, at most {MAX_IDS}",
                ids.len()
            ),
        );
    }
    let ids_from = build_ids_from(&path, policy, &ids, report);
    let forward = build_forward(&path, policy, report);
    (report.count() == before).then(|| Hierarchy {
        name: Arc::from(name.get_ref().as_str()),
        description: policy.description.clone(),
        levels: levels.into(),
        ids: ids.into_iter().collect(),
        ids_from: ids_from.map(Into::into),
        ids_from_text: policy.ids_from.as_ref().map_or_else(BTreeMap::new, |m| {
            m.get_ref()
                .iter()
                .map(|(k, v)| (k.clone(), v.get_ref().clone()))
                .collect()
        }),
        deny_status: forward.deny_status,
        missing_key_status: forward.missing_key_status,
    })
}

/// What a plain policy has and a hierarchy takes from its levels' policies.
fn refuse_policy_fields(path: &str, raw: &RawPolicy, span: Range<usize>, report: &mut Report) {
    let has = [
        ("limits", raw.limits.is_some()),
        ("overrides", !raw.overrides.is_empty()),
        ("shadow", raw.shadow.is_some()),
        ("failure_mode", raw.failure_mode.is_some()),
        ("lease", raw.lease.is_some()),
        ("key_from", raw.key_from.is_some()),
    ];
    for (field, _) in has.iter().filter(|(_, present)| *present) {
        let hint = match *field {
            "key_from" => "forward-auth takes each id from `ids_from`",
            _ => "each level's policy carries its own",
        };
        report.add(
            format!("{path}.{field}"),
            span.clone(),
            format!("a policy with `levels` takes no `{field}`: {hint}"),
        );
    }
}

fn build_level(
    at: &str,
    raw: &RawLevel,
    all: &RawPolicies,
    bounds: &Bounds,
    report: &mut Report,
) -> Option<HierarchyLevel> {
    let before = report.count();
    let policy = raw.policy.get_ref();
    match all.get(policy.as_str()) {
        None => report.add(
            format!("{at}.policy"),
            raw.policy.span(),
            format!("{policy:?} is not a policy of this file"),
        ),
        Some(found) => refuse_as_level(at, raw, found, report),
    }
    let name = raw.name.as_ref().map_or(policy.as_str(), |n| n.get_ref());
    if let Err(e) = validate_name("name", name) {
        let span = raw.name.as_ref().map_or(raw.policy.span(), |n| n.span());
        report.add(format!("{at}.name"), span, e.message);
    }
    let key = KeyTemplate::parse(raw.key.get_ref())
        .and_then(|key| fits(key, bounds.max_key_bytes))
        .map_err(|message| report.add(format!("{at}.key"), raw.key.span(), message))
        .ok();
    (report.count() == before).then(|| HierarchyLevel {
        name: Arc::from(name),
        policy: Arc::from(policy.as_str()),
        key: key.expect("parsed when no problem was added"),
    })
}

/// A template whose shortest key (its text and a byte per id) is longer
/// than any key may be would refuse every request.
fn fits(key: KeyTemplate, max_key_bytes: usize) -> Result<KeyTemplate, String> {
    let shortest = key.text_bytes() + key.ids().count();
    if shortest > max_key_bytes {
        return Err(format!(
            "every key it builds is at least {shortest} bytes, above limits.max_key_bytes \
             ({max_key_bytes})"
        ));
    }
    Ok(key)
}

/// A level's policy must be one a levels check takes: plain, enforced,
/// without a concurrency limit (`domain::level` refuses the same per
/// check; here the file says so at load).
fn refuse_as_level(at: &str, raw: &RawLevel, policy: &RawPolicy, report: &mut Report) {
    let span = raw.policy.span();
    let why = if policy.levels.is_some() {
        Some("is itself a policy with levels; levels do not nest")
    } else if policy.shadow == Some(true) {
        Some("is a shadow policy: its denial answers allowed, which would spend the other levels")
    } else if holds_concurrency(policy) {
        Some("holds a concurrency limit: a lease is released by the check that took it")
    } else {
        None
    };
    if let Some(why) = why {
        let name = raw.policy.get_ref();
        report.add(format!("{at}.policy"), span, format!("{name:?} {why}"));
    }
}

fn holds_concurrency(policy: &RawPolicy) -> bool {
    let concurrent = |limits: &Option<Spanned<Vec<Spanned<RawLimit>>>>| {
        limits.as_ref().is_some_and(|l| {
            l.get_ref().iter().any(|l| {
                let algorithm = l.get_ref().algorithm.as_ref();
                algorithm.is_some_and(|a| a.get_ref() == "concurrency")
            })
        })
    };
    concurrent(&policy.limits)
        || policy
            .overrides
            .values()
            .any(|o| concurrent(&o.get_ref().limits))
}

/// Two levels of one name, or of one policy and template (one counter,
/// spent twice for one request).
fn refuse_repeats(
    at: &str,
    level: &HierarchyLevel,
    before: &[HierarchyLevel],
    span: Range<usize>,
    report: &mut Report,
) {
    if let Some(j) = before.iter().position(|l| l.name == level.name) {
        report.add(
            format!("{at}.name"),
            span.clone(),
            format!("{:?} is also the name of levels[{j}]", &*level.name),
        );
    }
    let same = |l: &HierarchyLevel| l.policy == level.policy && l.key.text == level.key.text;
    if let Some(j) = before.iter().position(same) {
        report.add(
            at.to_string(),
            span,
            format!("keeps the same counter as levels[{j}] (the same policy and key)"),
        );
    }
}

/// `ids_from`: a source for every id, and for nothing else.
fn build_ids_from(
    path: &str,
    raw: &RawPolicy,
    ids: &BTreeSet<Arc<str>>,
    report: &mut Report,
) -> Option<Vec<IdSource>> {
    let map = raw.ids_from.as_ref()?;
    let at = format!("{path}.ids_from");
    let mut sources = Vec::with_capacity(ids.len());
    for (id, text) in map.get_ref() {
        if !ids.contains(id.as_str()) {
            report.add(
                format!("{at}.{id}"),
                text.span(),
                format!("{id:?} is not an id of the levels' key templates"),
            );
            continue;
        }
        if text.get_ref().contains(['{', '}']) {
            let message = "an id comes from one source (\"header:<name>\", \"ip\", \
                           \"ip_prefix:<bits>\", \"const:<text>\" or \"path\"), not a template";
            report.add(format!("{at}.{id}"), text.span(), message);
            continue;
        }
        match Source::parse(text.get_ref()) {
            Ok(source) => sources.push((Arc::from(id.as_str()), source)),
            // Without the templates `key_from` offers: an id is one value.
            Err(message) => report.add(
                format!("{at}.{id}"),
                text.span(),
                message
                    .replace(
                        ", or a template such as \"{header:x-tenant}:{ip}\"",
                        " or \"path\"",
                    )
                    .replace("\"path\" or \"path\"", "\"path\""),
            ),
        }
    }
    for id in ids.iter().filter(|id| !map.get_ref().contains_key(&***id)) {
        report.add(
            at.clone(),
            map.span(),
            format!("missing a source for the id {:?}", &**id),
        );
    }
    Some(sources)
}
