//! `lease = { ... }` in the policies file.

use super::*;
use crate::domain::lease_mode::{DEFAULT_HOT_RATE, DEFAULT_TTL_US};

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

#[test]
fn a_lease_is_read_with_its_defaults_and_reaches_every_check() {
    let text = r#"[policies.tenant]
lease = { max_units = 200 }
limits = [
  { name = "second", algorithm = "fixed_window", limit = 1000, window = "1s" },
  { name = "minute", limit = 20000, window = "1m" },
]
"#;
    let set = parse(text).unwrap();
    let policy = set.get("tenant").unwrap();
    let expected = LeaseMode {
        max_units: 200,
        ttl_us: DEFAULT_TTL_US,
        hot_rate: DEFAULT_HOT_RATE,
    };
    assert_eq!(policy.lease, Some(expected));
    let check = policy.check("k".into(), None, &Bounds::default()).unwrap();
    assert_eq!(check.lease, Some(expected));

    let text = "[policies.t]\nlease = { max_units = 5, ttl = \"250ms\", hot_rate = 40 }\n\
                limits = [{ name = \"a\", limit = 10, window = 1 }]\n";
    let lease = parse(text).unwrap().get("t").unwrap().lease.unwrap();
    assert_eq!(
        (lease.max_units, lease.ttl_us, lease.hot_rate),
        (5, 250_000, 40)
    );
}

#[test]
fn a_policy_without_lease_never_leases() {
    let text = "[policies.t]\nlimits = [{ name = \"a\", limit = 10, window = 1 }]\n";
    assert_eq!(parse(text).unwrap().get("t").unwrap().lease, None);
}

#[test]
fn bad_values_and_limits_that_cannot_give_back_are_refused() {
    let bad = [
        (
            "lease = { max_units = 0 }",
            "policies.t.lease.max_units",
            "must be 1 to",
        ),
        (
            "lease = { max_units = 5, ttl = \"1ms\" }",
            "policies.t.lease.ttl",
            "from 10ms",
        ),
        (
            "lease = { max_units = 5, ttl = \"2m\" }",
            "policies.t.lease.ttl",
            "to 1m",
        ),
        (
            "lease = { max_units = 5, hot_rate = 0 }",
            "policies.t.lease.hot_rate",
            "at least 1",
        ),
        ("lease = { ttl = \"1s\" }", "", "missing field `max_units`"),
        (
            "lease = { max_units = 5, size = 3 }",
            "",
            "unknown field `size`",
        ),
    ];
    for (lease, path, message) in bad {
        let text = format!(
            "[policies.t]\n{lease}\nlimits = [{{ name = \"a\", limit = 10, window = 1 }}]\n"
        );
        let found = problems(&text);
        assert_eq!(found.len(), 1, "{lease}: {found:?}");
        assert!(found[0].0.starts_with(path), "{lease}: {found:?}");
        assert!(found[0].1.contains(message), "{lease}: {found:?}");
    }
    for algorithm in ["token_bucket", "gcra", "sliding_log"] {
        let text = format!(
            "[policies.t]\nlease = {{ max_units = 5 }}\n\
             limits = [{{ name = \"b\", algorithm = \"{algorithm}\", limit = 10, window = 1 }}]\n"
        );
        let found = problems(&text);
        assert_eq!(found[0].0, "policies.t.lease", "{found:?}");
        assert!(found[0].1.contains(algorithm) && found[0].1.contains("cannot lease"));
    }
    // An override's limits count too: its checks take the policy's lease.
    let text = r#"[policies.t]
lease = { max_units = 5 }
limits = [{ name = "a", limit = 10, window = 1 }]
[policies.t.overrides.vip]
limits = [{ name = "a", algorithm = "gcra", limit = 100, window = 1 }]
"#;
    assert!(problems(text)[0].1.contains("gcra"));
}

#[test]
fn the_example_of_docs_leasing_md_loads_with_its_lease() {
    let doc = include_str!("../../../docs/leasing.md");
    let block = doc
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/leasing.md shows a policies file");
    let set = parse(block).expect("the documented example is valid");
    let lease = set.get("tenant").and_then(|p| p.lease).expect("it leases");
    assert_eq!(
        (lease.max_units, lease.ttl_us, lease.hot_rate),
        (500, 1_000_000, 100)
    );
}
