//! The policies file: every rule, with the line and column of each problem.

use super::*;
use crate::domain::{Algorithm, FailureMode};

fn parse(text: &str) -> Result<PolicySet, PolicyFileError> {
    PolicySet::parse(text, &Bounds::default(), None)
}

/// The one problem of `text`, as (path, line, column, message).
fn problems(text: &str) -> Vec<(String, usize, usize, String)> {
    parse(text)
        .expect_err("the file is invalid")
        .problems
        .into_iter()
        .map(|p| (p.path, p.line, p.column, p.message))
        .collect()
}

const API: &str = r#"
[policies.api]
description = "public API"
failure_mode = "closed"
limits = [
  { name = "burst", algorithm = "token_bucket", limit = 10, window = "1s", burst = 20 },
  { name = "daily", algorithm = "fixed_window", limit = 10000, window = "1d" },
]

[policies.api.overrides."k_acme"]
limits = [ { name = "daily", algorithm = "fixed_window", limit = 100000, window = 86400 } ]
"#;

#[test]
fn parses_the_issue_example() {
    let set = parse(API).unwrap();
    assert_eq!(set.len(), 1);
    let api = set.get("api").unwrap();
    assert_eq!(api.description.as_deref(), Some("public API"));
    assert_eq!(api.failure_mode, Some(FailureMode::Closed));
    assert!(!api.shadow);
    let names: Vec<&str> = api.limits.iter().map(|l| &*l.name).collect();
    assert_eq!(names, ["burst", "daily"]);
    assert_eq!(api.limits[0].rule.algorithm, Algorithm::TokenBucket);
    assert_eq!(api.limits[0].rule.burst, 20);
    assert_eq!(api.limits[1].rule.window_us(), 86_400_000_000);
    assert_eq!(set.sha256, sha256_hex(API.as_bytes()));
    assert_eq!(set.sha256.len(), 64);
}

#[test]
fn an_override_replaces_its_limit_for_that_key_only_keeping_order() {
    let set = parse(API).unwrap();
    let api = set.get("api").unwrap();
    let acme = api.limits_for("k_acme");
    let names: Vec<&str> = acme.iter().map(|l| &*l.name).collect();
    assert_eq!(names, ["burst", "daily"]);
    assert_eq!(acme[0], api.limits[0]);
    assert_eq!(acme[1].rule.limit, 100_000);
    assert_eq!(api.limits_for("k_other")[1].rule.limit, 10_000);
}

#[test]
fn defaults_sliding_window_no_shadow_service_failure_mode() {
    let set = parse("[policies.p]\nlimits = [{ name = \"a\", limit = 5, window = 60 }]\n").unwrap();
    let p = set.get("p").unwrap();
    assert_eq!(p.limits[0].rule.algorithm, Algorithm::SlidingWindow);
    assert_eq!(p.limits[0].rule.window_us(), 60_000_000);
    assert_eq!(p.failure_mode, None);
    assert!(!p.shadow);
    assert!(p.description.is_none());
}

#[test]
fn an_empty_file_is_a_valid_empty_set() {
    for text in ["", "# nothing yet\n", "[policies]\n"] {
        let set = parse(text).unwrap();
        assert!(set.is_empty());
        assert_eq!(set.sha256, sha256_hex(text.as_bytes()));
    }
}

#[test]
fn a_syntax_error_has_line_and_column() {
    let found = problems("[policies.api]\nlimits = [\n  { name = \"a\" limit = 1 },\n]\n");
    assert_eq!(found.len(), 1);
    // At the unexpected `limit`.
    assert_eq!((found[0].1, found[0].2), (3, 16), "{found:?}");
}

#[test]
fn unknown_keys_are_errors_everywhere() {
    let cases = [
        ("[policy.api]\n", 1, "policy"),
        ("[policies.api]\nshadoww = true\n", 2, "shadoww"),
        (
            "[policies.api]\nlimits = [{ name = \"a\", limit = 1, window = 1, brust = 2 }]\n",
            2,
            "brust",
        ),
        (
            "[policies.api]\nlimits = [{ name = \"a\", limit = 1, window = 1 }]\n[policies.api.overrides.k]\nlimit = []\n",
            4,
            "limit",
        ),
    ];
    for (text, line, key) in cases {
        let found = problems(text);
        assert_eq!(found.len(), 1, "{text}: {found:?}");
        assert_eq!(found[0].1, line, "{text}: {found:?}");
        assert!(found[0].3.contains(key), "{text}: {found:?}");
    }
}

#[test]
fn every_invalid_value_is_reported_at_once_in_file_order() {
    let text = r#"[policies.api]
failure_mode = "sometimes"
limits = [
  { name = "Burst", limit = 10, window = "1s" },
  { name = "daily", limit = 0, window = "1d" },
  { name = "weekly", limit = 5, window = "1y" },
  { name = "x", algorithm = "leaky", limit = 5, window = 1 },
  { name = "y", algorithm = "fixed_window", limit = 5, window = 1, burst = 9 },
  { name = "daily", limit = 5, window = 1 },
]

[policies."Bad Name"]
limits = [{ name = "a", limit = 1, window = 1 }]
"#;
    let found = problems(text);
    let located: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|(p, l, c, _)| (p.as_str(), *l, *c))
        .collect();
    assert_eq!(
        located,
        [
            ("policies.api.failure_mode", 2, 16),
            ("policies.api.limits[0].name", 4, 12),
            ("policies.api.limits[1].limit", 5, 29),
            ("policies.api.limits[2].window", 6, 42),
            ("policies.api.limits[3].algorithm", 7, 29),
            ("policies.api.limits[4].burst", 8, 76),
            ("policies.api.limits[5].name", 9, 12),
            ("policies.\"Bad Name\"", 12, 11),
        ],
        "{found:#?}"
    );
    assert!(found[0].3.contains("\"sometimes\""));
    assert!(found[2].3.contains("between 1 and"));
    assert!(found[4].3.contains("token_bucket"));
    assert!(found[5].3.contains("only applies to token_bucket and gcra"));
    assert!(found[6].3.contains("unique"));
    assert!(found[7].3.contains("[a-z0-9_.-]"));
}

#[test]
fn the_error_displays_path_line_and_column() {
    let error =
        parse("[policies.api]\nlimits = [{ name = \"a\", limit = -1, window = 1 }]\n").unwrap_err();
    assert_eq!(
        error.to_string(),
        "1 problem:\n  policies.api.limits[0].limit (line 2, column 33): must be between 1 and 1000000000000, got 0"
    );
}

#[test]
fn limit_count_is_bounded_and_empty_or_missing_limits_are_errors() {
    let bounds = Bounds {
        max_limits_per_check: 2,
        ..Bounds::default()
    };
    let three = "[policies.p]\nlimits = [\n{ name = \"a\", limit = 1, window = 1 },\n{ name = \"b\", limit = 1, window = 2 },\n{ name = \"c\", limit = 1, window = 3 },\n]\n";
    let error = PolicySet::parse(three, &bounds, None).unwrap_err();
    assert_eq!(error.problems.len(), 1);
    assert_eq!(error.problems[0].path, "policies.p.limits");
    assert_eq!((error.problems[0].line, error.problems[0].column), (2, 10));
    assert!(error.problems[0].message.contains("max_limits_per_check"));

    let found = problems("[policies.p]\nlimits = []\n");
    assert_eq!(found[0].0, "policies.p.limits");
    let found = problems("[policies.p]\ndescription = \"no limits\"\n");
    assert_eq!((found[0].0.as_str(), found[0].1), ("policies.p.limits", 1));
}

#[test]
fn sliding_log_cap_and_bucket_rules_apply_as_inline() {
    let text = "[policies.p]\nlimits = [\n  { name = \"a\", algorithm = \"sliding_log\", limit = 200000, window = 1 },\n  { name = \"b\", algorithm = \"token_bucket\", limit = 5000, window = \"1ms\", burst = 1 },\n]\n";
    let found = problems(text);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(
        (found[0].0.as_str(), found[0].1),
        ("policies.p.limits[0].limit", 3)
    );
    assert!(found[0].3.contains("max_sliding_log_limit"));
    assert_eq!(
        (found[1].0.as_str(), found[1].1),
        ("policies.p.limits[1].limit", 4)
    );
}

#[test]
fn an_override_must_name_a_limit_of_its_policy() {
    let text = r#"[policies.api]
limits = [{ name = "daily", limit = 10, window = "1d" }]

[policies.api.overrides."k 1"]
limits = [
  { name = "dialy", limit = 100, window = "1d" },
  { name = "daily", limit = 0, window = "1d" },
]
"#;
    let found = problems(text);
    let located: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|(p, l, c, _)| (p.as_str(), *l, *c))
        .collect();
    assert_eq!(
        located,
        [
            ("policies.api.overrides.\"k 1\".limits[0].name", 6, 12),
            ("policies.api.overrides.\"k 1\".limits[1].limit", 7, 29),
        ],
        "{found:#?}"
    );
    assert!(
        found[0]
            .3
            .contains("not a limit of this policy (its limits: daily)")
    );
}

#[test]
fn an_override_limit_may_change_algorithm_and_window() {
    let text = r#"[policies.api]
limits = [{ name = "a", limit = 10, window = "1s" }, { name = "b", limit = 99, window = "1d" }]
[policies.api.overrides.vip]
limits = [{ name = "a", algorithm = "gcra", limit = 100, window = "1m", burst = 10 }]
"#;
    let set = parse(text).unwrap();
    let vip = set.get("api").unwrap().limits_for("vip").clone();
    assert_eq!(vip[0].rule.algorithm, Algorithm::Gcra);
    assert_eq!(vip[1].rule.limit, 99);
}

#[test]
fn a_check_of_a_policy_carries_its_shadow_and_failure_mode() {
    let text = "[policies.s]\nshadow = true\nfailure_mode = \"local\"\nlimits = [{ name = \"a\", limit = 3, window = 1 }]\n";
    let set = parse(text).unwrap();
    let check = set
        .get("s")
        .unwrap()
        .check("k".into(), Some(2), &Bounds::default())
        .unwrap();
    assert!(check.shadow);
    assert_eq!(check.failure_mode, Some(FailureMode::Local));
    assert_eq!(check.policy.as_deref(), Some("s"));
}

#[test]
fn columns_count_characters_not_bytes() {
    let text = "[policies.p]\ndescription = \"été\"; limits = 1\n";
    let found = problems(text);
    assert_eq!(found[0].1, 2);
    // "é" is two bytes: the limit's column would be 34 in bytes.
    let text = "[policies.p]\nlimits = [{ name = \"é\", limit = 0, window = 1 }]\n";
    let found = problems(text);
    assert_eq!((found[0].1, found[0].2), (2, 20), "{found:?}");
    assert_eq!((found[1].1, found[1].2), (2, 33), "{found:?}");
}

#[test]
fn the_example_file_is_valid() {
    let text = include_str!("../../../config/policies.example.toml");
    let set = parse(text).unwrap();
    let names: Vec<&str> = set.iter().map(|p| &*p.name).collect();
    assert_eq!(names, ["api", "export", "login"]);
    assert!(set.get("login").unwrap().shadow);
    assert_eq!(
        set.get("export").unwrap().failure_mode,
        Some(FailureMode::Local)
    );
    assert_eq!(
        set.get("api").unwrap().limits_for("k_acme")[1].rule.limit,
        100_000
    );
}

#[test]
fn the_inline_label_is_reserved() {
    let found =
        problems("[policies.inline]\nlimits = [{ name = \"a\", limit = 1, window = \"1s\" }]\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0.as_str(), found[0].1), ("policies.inline", 1));
    assert!(found[0].3.contains("reserved"), "{found:?}");
}

#[test]
fn forward_auth_settings_default_and_parse() {
    let set = parse(API).unwrap();
    let api = set.get("api").unwrap();
    assert_eq!(api.forward, crate::domain::forward::ForwardAuth::default());
    let text = r#"
[policies.edge]
key_from = ["header:x-api-key", "{header:x-tenant}:{ip_prefix:24,64}", "const:anon"]
deny_status = 403
missing_key_status = 403
limits = [ { name = "m", limit = 5, window = "1m" } ]
"#;
    let set = parse(text).unwrap();
    let edge = &set.get("edge").unwrap().forward;
    assert_eq!(edge.key_from.len(), 3);
    assert_eq!(
        &*edge.key_from_text[1],
        "{header:x-tenant}:{ip_prefix:24,64}"
    );
    assert_eq!((edge.deny_status, edge.missing_key_status), (403, 403));
}

#[test]
fn bad_forward_auth_settings_are_placed() {
    let text = r#"[policies.edge]
key_from = ["ip", "header:", "ip_prefix:200"]
deny_status = 302
missing_key_status = 500
limits = [ { name = "m", limit = 5, window = "1m" } ]
"#;
    let found = problems(text);
    let at = |path: &str| {
        found
            .iter()
            .find(|p| p.0 == path)
            .unwrap_or_else(|| panic!("no problem at {path}: {found:?}"))
    };
    let p = at("policies.edge.key_from[1]");
    assert_eq!((p.1, p.2), (2, 19), "{p:?}");
    assert!(p.3.contains("not a header name"), "{p:?}");
    assert!(at("policies.edge.key_from[2]").3.contains("ip_prefix"));
    let p = at("policies.edge.deny_status");
    assert_eq!((p.1, p.3.contains("4xx")), (3, true), "{p:?}");
    assert_eq!(at("policies.edge.missing_key_status").1, 4);
    assert_eq!(found.len(), 4, "{found:?}");
    let empty = problems(
        "[policies.e]\nkey_from = []\nlimits = [ { name = \"m\", limit = 5, window = \"1m\" } ]\n",
    );
    assert!(empty[0].3.contains("1 to 16"), "{empty:?}");
}

#[test]
fn a_concurrency_limit_takes_a_lease_ttl_and_is_one_per_policy() {
    let set = parse(
        r#"
[policies.jobs]
limits = [
  { name = "minute", algorithm = "fixed_window", limit = 100, window = "1m" },
  { name = "inflight", algorithm = "concurrency", limit = 5, lease_ttl = "30s" },
]
"#,
    )
    .unwrap();
    let inflight = &set.get("jobs").unwrap().limits[1];
    assert_eq!(inflight.rule.algorithm, Algorithm::Concurrency);
    assert_eq!(inflight.rule.window_us(), 30_000_000);

    let found = problems(
        r#"
[policies.two]
limits = [
  { name = "a", algorithm = "concurrency", limit = 5, lease_ttl = "30s" },
  { name = "b", algorithm = "concurrency", limit = 2, lease_ttl = "1m" },
]

[policies.windowed]
limits = [ { name = "a", algorithm = "concurrency", limit = 5, window = "30s" } ]

[policies.proxied]
key_from = ["ip"]
limits = [
  { name = "minute", limit = 100, window = "1m" },
  { name = "inflight", algorithm = "concurrency", limit = 5, lease_ttl = "30s" },
]
"#,
    );
    let paths: Vec<&str> = found.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(
        paths,
        [
            "policies.two.limits[1].algorithm",
            "policies.windowed.limits[0].window",
            "policies.proxied.key_from",
        ],
        "{found:?}"
    );
    assert!(
        found[0].3.contains("at most one concurrency limit"),
        "{found:?}"
    );
    assert!(found[1].3.contains("lease_ttl"), "{found:?}");
    assert!(found[2].3.contains("forward-auth"), "{found:?}");
}
