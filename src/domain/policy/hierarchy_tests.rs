//! Hierarchies in the policies file: key templates, ids, and every
//! refusal with its place.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::super::{Bounds, PolicyFileError, PolicySet};
use super::*;
use crate::domain::forward::Header;

const LLM: &str = r#"
[policies.org_monthly]
limits = [ { name = "tokens", algorithm = "fixed_window", limit = 1000000, window = "30d" } ]

[policies.team_daily]
limits = [ { name = "tokens", algorithm = "fixed_window", limit = 50000, window = "1d" } ]

[policies.user_minute]
limits = [ { name = "tokens", limit = 20000, window = "1m" } ]

[policies.llm]
description = "one request spends on its org, team and user"
levels = [
  { name = "org", policy = "org_monthly", key = "org:{org}" },
  { name = "team", policy = "team_daily", key = "team:{org}/{team}" },
  { policy = "user_minute", key = "user:{user}" },
]
ids_from = { org = "header:x-org-id", team = "header:x-team-id", user = "header:x-user-id" }
"#;

fn parse(text: &str) -> Result<PolicySet, PolicyFileError> {
    PolicySet::parse(text, &Bounds::default(), None)
}

fn problems(text: &str) -> Vec<(String, String)> {
    parse(text)
        .expect_err("the file is invalid")
        .problems
        .into_iter()
        .map(|p| (p.path, p.message))
        .collect()
}

fn ids(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_hierarchy_loads_apart_from_the_plain_policies() {
    let set = parse(LLM).unwrap();
    assert_eq!(set.len(), 3, "only the plain policies count as policies");
    assert!(set.get("llm").is_none());
    let llm = set.hierarchy("llm").unwrap();
    let names: Vec<&str> = llm.levels.iter().map(|l| &*l.name).collect();
    assert_eq!(
        names,
        ["org", "team", "user_minute"],
        "the name defaults to the policy's"
    );
    let ids: Vec<&str> = llm.ids.iter().map(|i| &**i).collect();
    assert_eq!(ids, ["org", "team", "user"]);
    assert_eq!(llm.deny_status, 429);
    assert_eq!(llm.ids_from_text["team"], "header:x-team-id");
}

#[test]
fn ids_build_every_level_key_and_nothing_else_is_taken() {
    let set = parse(LLM).unwrap();
    let llm = set.hierarchy("llm").unwrap();
    let keys = llm
        .keys(&ids(&[("org", "1"), ("team", "4"), ("user", "7")]), 512)
        .unwrap();
    assert_eq!(keys, ["org:1", "team:1/4", "user:7"]);

    let missing = llm
        .keys(&ids(&[("org", "1"), ("team", "4")]), 512)
        .unwrap_err();
    assert_eq!(missing.field, "ids.user");
    assert!(missing.message.contains("org, team, user"), "{missing}");
    let unknown = llm
        .keys(
            &ids(&[("org", "1"), ("team", "4"), ("user", "7"), ("x", "1")]),
            512,
        )
        .unwrap_err();
    assert_eq!(unknown.field, "ids.x");
    let empty = llm
        .keys(&ids(&[("org", ""), ("team", "4"), ("user", "7")]), 512)
        .unwrap_err();
    assert_eq!(empty.field, "ids.org");
    let long = "a".repeat(513);
    let long = llm
        .keys(&ids(&[("org", "1"), ("team", "4"), ("user", &long)]), 512)
        .unwrap_err();
    assert!(long.message.contains("1 to 512 bytes"), "{long}");
}

#[test]
fn templates_parse_placeholders_and_refuse_stray_braces() {
    let t = KeyTemplate::parse("a{x}b{y}-{x}").unwrap();
    let named: Vec<&str> = t.ids().map(|i| &**i).collect();
    assert_eq!(named, ["x", "y", "x"]);
    assert_eq!(t.fill(|id| if id == "x" { "X" } else { "Y" }), "aXbY-X");
    assert_eq!(t.text_bytes(), 3);
    assert_eq!(KeyTemplate::parse("global").unwrap().ids().count(), 0);
    for bad in [
        "",
        "a{",
        "a}",
        "{}",
        "{X}",
        "{a{b}}",
        "{a-b}",
        "{a}{b}",
        "x:{a}{b}:y",
    ] {
        assert!(KeyTemplate::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn two_sets_of_ids_never_build_one_key() {
    let t = KeyTemplate::parse("team:{org}/{team}").unwrap();
    let key = |org: &str, team: &str| t.fill(|id| if id == "org" { org } else { team });
    // The text between the placeholders, and `\`, are escaped in values.
    assert_eq!(key("a/b", "c"), "team:a\\/b/c");
    assert_eq!(key("a", "b/c"), "team:a/b\\/c");
    assert_ne!(key("a\\", "/c"), key("a", "\\/c"));
    assert_eq!(key("1", "4"), "team:1/4", "plain ids go in as sent");
    // One placeholder: any value as sent, nothing to tell apart.
    let one = KeyTemplate::parse("org:{org}").unwrap();
    assert_eq!(one.fill(|_| "a:b/c\\"), "org:a:b/c\\");
}

#[test]
fn a_template_longer_than_any_key_is_refused_at_load() {
    let long = "k".repeat(511);
    let file = format!(
        "{LLM}\n[policies.long]\nlevels = [ {{ policy = \"org_monthly\", key = \"{long}{{a}}-{{b}}\" }} ]\n"
    );
    let found = problems(&file);
    assert_eq!(found[0].0, "policies.long.levels[0].key", "{found:?}");
    assert!(found[0].1.contains("at least 514 bytes"), "{found:?}");
    let fits = format!(
        "{LLM}\n[policies.long]\nlevels = [ {{ policy = \"org_monthly\", key = \"{long}{{a}}\" }} ]\n"
    );
    assert!(parse(&fits).is_ok());
}

#[test]
fn forward_auth_takes_each_id_from_its_source_untagged() {
    let set = parse(LLM).unwrap();
    let llm = set.hierarchy("llm").unwrap();
    let all = |name: &str| match name {
        "x-org-id" => Header::One("acme"),
        "x-team-id" => Header::One("ml"),
        "x-user-id" => Header::One("u7"),
        _ => Header::Absent,
    };
    let view = RequestView {
        header: &all,
        ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        path: None,
    };
    let got = llm.ids_of(&view).unwrap().unwrap();
    assert_eq!(got, ids(&[("org", "acme"), ("team", "ml"), ("user", "u7")]));

    let without_user = |name: &str| match name {
        "x-user-id" => Header::Absent,
        other => all(other),
    };
    let view = RequestView {
        header: &without_user,
        ..view
    };
    assert_eq!(llm.ids_of(&view).unwrap(), Err(Arc::from("user")));
    let twice = |name: &str| match name {
        "x-org-id" => Header::Repeated,
        other => all(other),
    };
    let view = RequestView {
        header: &twice,
        ..view
    };
    assert_eq!(llm.ids_of(&view).unwrap_err().header, "x-org-id");
}

#[test]
fn a_level_must_name_a_plain_enforced_policy_of_the_file() {
    let file = format!(
        "{LLM}\n{}",
        r#"
[policies.shadowed]
shadow = true
limits = [ { name = "l", limit = 5, window = "1m" } ]

[policies.inflight]
limits = [ { name = "c", algorithm = "concurrency", limit = 5, lease_ttl = "30s" } ]

[policies.bad]
levels = [
  { policy = "nope", key = "a:{a}" },
  { policy = "llm", key = "b:{a}" },
  { policy = "shadowed", key = "c:{a}" },
  { policy = "inflight", key = "d:{a}" },
  { name = "Bad Name", policy = "org_monthly", key = "e:{a}" },
  { policy = "team_daily", key = "f:{a" },
]
"#
    );
    let found = problems(&file);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "policies.bad.levels[0].policy",
            "policies.bad.levels[1].policy",
            "policies.bad.levels[2].policy",
            "policies.bad.levels[3].policy",
            "policies.bad.levels[4].name",
            "policies.bad.levels[5].key",
        ],
        "{found:?}"
    );
    assert!(found[1].1.contains("do not nest"), "{found:?}");
    assert!(found[2].1.contains("shadow"), "{found:?}");
    assert!(found[3].1.contains("concurrency"), "{found:?}");
}

#[test]
fn a_hierarchy_takes_no_limits_and_its_ids_from_covers_its_ids_exactly() {
    let file = format!(
        "{LLM}\n{}",
        r#"
[policies.both]
limits = [ { name = "l", limit = 5, window = "1m" } ]
key_from = ["ip"]
levels = [
  { policy = "org_monthly", key = "org:{org}" },
  { name = "again", policy = "org_monthly", key = "org:{org}" },
]
ids_from = { team = "header:x-team", org = "cookie:x" }

[policies.plain]
limits = [ { name = "l", limit = 5, window = "1m" } ]
ids_from = { org = "ip" }
"#
    );
    let found = problems(&file);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert!(paths.contains(&"policies.both.limits"), "{found:?}");
    assert!(paths.contains(&"policies.both.key_from"), "{found:?}");
    assert!(
        paths.contains(&"policies.both.levels[1]"),
        "same counter: {found:?}"
    );
    assert!(paths.contains(&"policies.both.ids_from.team"), "{found:?}");
    assert!(paths.contains(&"policies.both.ids_from.org"), "{found:?}");
    assert!(paths.contains(&"policies.plain.ids_from"), "{found:?}");
}

#[test]
fn a_hierarchy_holds_one_to_eight_levels() {
    let file = format!("{LLM}\n[policies.none]\nlevels = []\n");
    let found = problems(&file);
    assert_eq!(found[0].0, "policies.none.levels", "{found:?}");
    assert!(found[0].1.contains("1 to 8"), "{found:?}");
}
