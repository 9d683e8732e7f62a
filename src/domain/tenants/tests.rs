//! Runtime entries: validation against the policies, the merged limits,
//! precedence, expiry and the caps.

use super::*;
use crate::domain::{Algorithm, Bounds, PolicySet};

const POLICIES: &str = r#"
[policies.api]
limits = [
  { name = "burst", algorithm = "token_bucket", limit = 10, window = "1s", burst = 20 },
  { name = "daily", algorithm = "fixed_window", limit = 10000, window = "1d" },
]
[policies.api.overrides."k_file"]
limits = [ { name = "daily", algorithm = "fixed_window", limit = 5, window = "1d" } ]

[policies.monthly]
limits = [ { name = "month", limit = 100, calendar = "month" } ]
"#;

fn policies() -> PolicySet {
    PolicySet::parse(POLICIES, &Bounds::default(), None).unwrap()
}

fn change(name: &str, limit: u64) -> LimitChange {
    LimitChange {
        name: name.into(),
        limit,
        burst: None,
        window: None,
    }
}

fn entry(kind: Kind, policy: Option<&str>, key: &str, limits: Vec<LimitChange>) -> Entry {
    Entry {
        kind,
        policy: policy.map(str::to_owned),
        key: key.into(),
        limits,
        expires_at_ms: None,
        reason: None,
        set_by: "alice".into(),
        set_at_ms: 0,
    }
}

fn invalid(e: &Entry) -> (String, String) {
    let error = e.validate(&policies(), &Bounds::default()).unwrap_err();
    (error.field, error.message)
}

#[test]
fn an_override_changes_only_the_limits_it_names_and_keeps_their_algorithm() {
    let set = policies();
    let e = entry(Kind::Override, Some("api"), "k1", vec![change("daily", 50)]);
    e.validate(&set, &Bounds::default()).unwrap();
    let view = View::build([&e], &set, &Bounds::default(), 7);
    let limits = view.override_for("api", "k1", 0).unwrap();
    let api = set.get("api").unwrap();
    assert_eq!(limits[0], api.limits[0]);
    assert_eq!(limits[1].name, api.limits[1].name);
    assert_eq!(limits[1].rule.algorithm, Algorithm::FixedWindow);
    assert_eq!(limits[1].rule.window, api.limits[1].rule.window);
    assert_eq!(limits[1].rule.limit, 50);
    assert_eq!(view.version, 7);
    assert!(view.override_for("api", "k2", 0).is_none());
    assert!(view.override_for("monthly", "k1", 0).is_none());
}

#[test]
fn a_bucket_takes_a_burst_and_defaults_it_to_the_new_limit() {
    let set = policies();
    let mut with_burst = change("burst", 5);
    with_burst.burst = Some(8);
    let e = entry(Kind::Override, Some("api"), "k", vec![with_burst]);
    let view = View::build([&e], &set, &Bounds::default(), 1);
    assert_eq!(view.override_for("api", "k", 0).unwrap()[0].rule.burst, 8);
    let e = entry(Kind::Override, Some("api"), "k", vec![change("burst", 5)]);
    let view = View::build([&e], &set, &Bounds::default(), 1);
    assert_eq!(view.override_for("api", "k", 0).unwrap()[0].rule.burst, 5);
}

#[test]
fn the_api_override_comes_before_the_files_which_comes_before_the_policy() {
    let set = policies();
    let api = set.get("api").unwrap();
    let bounds = Bounds::default();
    let e = entry(
        Kind::Override,
        Some("api"),
        "k_file",
        vec![change("daily", 7)],
    );
    let view = View::build([&e], &set, &bounds, 1);
    let runtime = view.override_for("api", "k_file", 0);
    let (check, from) = api
        .check_overridden("k_file".into(), None, &bounds, runtime)
        .unwrap();
    assert_eq!(
        (check.limits[1].rule.limit, from),
        (7, Some(Overridden::Api))
    );
    // The API override starts from the policy's limits, not the file's.
    assert_eq!(check.limits[0], api.limits[0]);
    let (check, from) = api
        .check_overridden("k_file".into(), None, &bounds, None)
        .unwrap();
    assert_eq!(
        (check.limits[1].rule.limit, from),
        (5, Some(Overridden::File))
    );
    let (check, from) = api
        .check_overridden("other".into(), None, &bounds, None)
        .unwrap();
    assert_eq!((check.limits[1].rule.limit, from), (10_000, None));
}

#[test]
fn a_wrong_override_is_refused_naming_the_field() {
    // The field an override of policy "api", key "k" is refused for.
    let of = |policy: &str, key: &str, changes: Vec<LimitChange>| {
        invalid(&entry(Kind::Override, Some(policy), key, changes))
    };
    let (field, message) = of("api", "k", vec![change("hourly", 5)]);
    assert_eq!(field, "limits[0].name");
    assert!(
        message.contains("burst") && message.contains("daily"),
        "{message}"
    );
    assert_eq!(
        of("api", "k", vec![change("daily", 0)]).0,
        "limits[0].limit"
    );
    let mut burst = change("daily", 5);
    burst.burst = Some(9);
    let (field, message) = of("api", "k", vec![burst]);
    assert_eq!(field, "limits[0].burst", "{message}");
    let twice = vec![change("daily", 5), change("daily", 6)];
    assert_eq!(of("api", "k", twice).0, "limits[1].name");
    assert_eq!(of("api", "k", vec![]).0, "limits");
    assert_eq!(of("nope", "k", vec![change("daily", 5)]).0, "policy");
    assert_eq!(of("api", "", vec![change("daily", 5)]).0, "key");
    let mut long = entry(Kind::Block, None, "k", vec![]);
    long.reason = Some("x".repeat(MAX_REASON_BYTES + 1));
    assert_eq!(invalid(&long).0, "reason");
    let block = entry(Kind::Block, None, "k", vec![change("daily", 5)]);
    assert_eq!(invalid(&block).0, "limits");
}

#[test]
fn an_override_keeps_the_window_which_names_the_counter() {
    let mut other = change("daily", 5);
    other.window = Some("1h".into());
    let (field, message) = invalid(&entry(Kind::Override, Some("api"), "k", vec![other]));
    assert_eq!(field, "limits[0].window");
    assert!(message.contains("afresh"), "{message}");
    let mut same = change("daily", 5);
    same.window = Some("1d".into());
    let ok = entry(Kind::Override, Some("api"), "k", vec![same]);
    ok.validate(&policies(), &Bounds::default()).unwrap();
    let mut calendar = change("month", 5);
    calendar.window = Some("30d".into());
    let (field, _) = invalid(&entry(Kind::Override, Some("monthly"), "k", vec![calendar]));
    assert_eq!(field, "limits[0].window");
}

#[test]
fn blocks_and_exemptions_apply_to_their_policy_or_every_check_until_they_expire() {
    let set = policies();
    let mut block = entry(Kind::Block, Some("api"), "k", vec![]);
    block.expires_at_ms = Some(1_000);
    let exempt = entry(Kind::Exemption, None, "k", vec![]);
    let view = View::build([&block, &exempt], &set, &Bounds::default(), 2);
    let rules = view.rules("k").unwrap();
    let b = rules.block.as_ref().unwrap();
    assert!(b.applies(Some("api"), 999));
    assert!(!b.applies(Some("api"), 1_000), "expired");
    assert!(!b.applies(Some("monthly"), 0));
    assert!(!b.applies(None, 0), "an inline check is no policy's");
    assert_eq!(b.expires_in_ms(400), Some(600));
    let e = rules.exemption.as_ref().unwrap();
    assert!(e.applies(None, u64::MAX) && e.applies(Some("api"), 0));
    assert_eq!(view.counts, [0, 1, 1]);
    assert!(view.rules("other").is_none());
}

#[test]
fn an_override_that_no_longer_fits_the_policies_is_stale_and_applies_nowhere() {
    let e = entry(Kind::Override, Some("api"), "k", vec![change("daily", 5)]);
    let reloaded = PolicySet::parse(
        "[policies.api]\nlimits = [{ name = \"hourly\", limit = 5, window = \"1h\" }]\n",
        &Bounds::default(),
        None,
    )
    .unwrap();
    let view = View::build([&e], &reloaded, &Bounds::default(), 1);
    assert_eq!(view.stale, 1);
    assert!(view.override_for("api", "k", 0).is_none());
}

#[test]
fn ids_tell_kinds_policies_and_keys_apart() {
    assert_eq!(entry_id(Kind::Override, Some("api"), "a:b"), "o:api:a:b");
    assert_eq!(entry_id(Kind::Block, Some("api"), "k"), "b:k");
    // What makes an override's id unambiguous: no policy name holds `:`.
    assert!(crate::domain::validate_name("policy", "a:b").is_err());
}

#[test]
fn the_caps_count_all_entries_and_one_policys_overrides() {
    let caps = Caps {
        max_entries: 3,
        max_per_policy: 2,
    };
    let o = |key: &str| entry(Kind::Override, Some("api"), key, vec![change("daily", 1)]);
    let held = [o("a"), o("b")];
    let third = o("c");
    let message = caps.admit(&third, held.iter()).unwrap_err();
    assert!(message.contains("tenants.max_per_policy = 2"), "{message}");
    let block = entry(Kind::Block, None, "c", vec![]);
    caps.admit(&block, held.iter()).unwrap();
    let full = [o("a"), o("b"), block.clone()];
    let message = caps.admit(&block, full.iter()).unwrap_err();
    assert!(message.contains("tenants.max_entries = 3"), "{message}");
}

#[test]
fn an_entry_reads_back_from_its_stored_json() {
    let mut e = entry(Kind::Override, Some("api"), "k", vec![change("daily", 5)]);
    e.expires_at_ms = Some(5);
    e.reason = Some("ticket".into());
    let text = serde_json::to_string(&e).unwrap();
    assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), e);
}
