use super::*;
use crate::domain::state_key::StateKey;
use crate::domain::{Algorithm, Rule};

fn rule(algorithm: Algorithm, limit: u64) -> Rule {
    Rule::with_length(algorithm, limit, 60_000_000, limit)
}

fn policy_check(key: &str, policy: &str, limits: &[(&str, u64)]) -> Check {
    let limits = limits
        .iter()
        .map(|(name, n)| Limit {
            name: Arc::from(*name),
            rule: rule(Algorithm::FixedWindow, *n),
            scope: None,
            level: None,
        })
        .collect();
    Check {
        policy: Some(Arc::from(policy)),
        ..Check::multi(key, limits, 1)
    }
}

fn level(check: Check) -> LevelInput {
    LevelInput { check, name: None }
}

fn hierarchy() -> Check {
    Check::levels(
        vec![
            level(policy_check("org:1", "org", &[("month", 1_000_000)])),
            level(policy_check(
                "team:4",
                "team",
                &[("day", 50_000), ("hour", 5_000)],
            )),
            level(Check::single("user:7", rule(Algorithm::Gcra, 60), 1)),
        ],
        Some(40),
    )
    .unwrap()
}

#[test]
fn a_levels_check_holds_every_levels_limits_in_order_each_with_its_level() {
    let check = hierarchy();
    assert!(check.has_levels());
    assert_eq!(check.cost, 40);
    assert_eq!(check.key, "org:1");
    assert_eq!(check.policy.as_deref(), Some("org"));
    let ranges: Vec<(usize, &str, std::ops::Range<usize>)> = check
        .level_ranges()
        .into_iter()
        .map(|(l, r)| (l.index, &*l.key, r))
        .collect();
    assert_eq!(
        ranges,
        [(0, "org:1", 0..1), (1, "team:4", 1..3), (2, "user:7", 3..4)]
    );
    assert_eq!(&*check.limits[3].level.as_ref().unwrap().name, "2");
    assert!(check.lease.is_none() && !check.shadow);
}

#[test]
fn a_levels_limit_keeps_the_counter_its_level_uses_alone() {
    let check = hierarchy();
    let team = policy_check("team:4", "team", &[("day", 50_000), ("hour", 5_000)]);
    for (alone, levelled) in team.limits.iter().zip(&check.limits[1..3]) {
        assert_eq!(
            StateKey::of(&team, alone).write("rk:"),
            StateKey::of(&check, levelled).write("rk:")
        );
    }
    let user = Check::single("user:7", rule(Algorithm::Gcra, 60), 1);
    assert_eq!(
        StateKey::of(&user, &user.limits[0]),
        StateKey::of(&check, &check.limits[3])
    );
    // A part is a check of its own that addresses the same state.
    let part = check.part(check.limits[1..3].to_vec());
    assert_eq!(part.key, "team:4");
    assert_eq!(part.policy.as_deref(), Some("team"));
    assert_eq!(
        StateKey::of(&part, &part.limits[0]),
        StateKey::of(&team, &team.limits[0])
    );
}

#[test]
fn levels_are_refused_when_they_cannot_be_decided_as_one() {
    let err = |levels: Vec<LevelInput>, cost| Check::levels(levels, cost).unwrap_err().to_string();
    assert!(err(vec![], None).contains("must hold 1 to 8 levels, got 0"));
    let nine = (0..9)
        .map(|i| {
            level(Check::single(
                format!("k{i}"),
                rule(Algorithm::FixedWindow, 5),
                1,
            ))
        })
        .collect();
    assert!(err(nine, None).contains("got 9"));
    let twice = vec![
        level(policy_check("team:4", "team", &[("day", 5)])),
        level(policy_check("team:4", "team", &[("day", 5)])),
    ];
    assert!(err(twice, None).contains("levels[1]: keeps the same counter as levels[0]"));
    let lease = Rule::with_length(Algorithm::Concurrency, 3, 60_000_000, 3);
    let concurrency = vec![level(Check::single("k", lease, 1))];
    assert!(err(concurrency, None).contains("no concurrency limit"));
    let mut shadow = policy_check("k", "trial", &[("day", 5)]);
    shadow.shadow = true;
    assert!(err(vec![level(shadow)], None).contains("shadow policy"));
    let small = vec![
        level(policy_check("org:1", "org", &[("month", 100)])),
        level(policy_check("team:1", "team", &[("day", 10)])),
    ];
    assert!(
        err(small, Some(11)).contains("at most the limit of levels[1] limit \"day\" (10), got 11")
    );
}

#[test]
fn the_same_key_under_two_policies_is_two_counters() {
    let check = Check::levels(
        vec![
            level(policy_check("k", "a", &[("day", 5)])),
            level(policy_check("k", "b", &[("day", 5)])),
        ],
        None,
    )
    .unwrap();
    assert_eq!(check.level_ranges().len(), 2);
}

#[test]
fn the_strictest_failure_mode_of_any_level_applies() {
    let mut open = policy_check("a", "a", &[("day", 5)]);
    open.failure_mode = Some(FailureMode::Open);
    let mut closed = policy_check("b", "b", &[("day", 5)]);
    closed.failure_mode = Some(FailureMode::Closed);
    let check = Check::levels(vec![level(open), level(closed)], None).unwrap();
    assert_eq!(check.failure_mode, Some(FailureMode::Closed));
}

#[test]
fn a_policy_cannot_be_named_levels() {
    // Levels checks are counted under `policy="levels"` in the metrics.
    let text = "[policies.levels]\nlimits = [{ name = \"a\", limit = 1, window = 1 }]\n";
    let err = crate::domain::PolicySet::parse(text, &Default::default(), None).unwrap_err();
    assert!(err.to_string().contains("\"levels\" is reserved"), "{err}");
}
