use super::*;
use crate::domain::Window;
use crate::domain::{Check, Limit, Rule};

fn rule(algorithm: Algorithm, limit: u64, window_us: u64) -> Rule {
    Rule {
        algorithm,
        limit,
        window: Window::Length(window_us),
        burst: limit,
    }
}

fn outcome(allowed: bool, remaining: u64, retry: u64, reset: u64) -> Outcome {
    Outcome {
        allowed,
        remaining,
        retry_after_us: retry,
        reset_after_us: reset,
    }
}

fn two_limits() -> Check {
    Check::multi(
        "k",
        vec![
            Limit {
                name: "burst".into(),
                rule: rule(Algorithm::Gcra, 10, 1_000_000),
                scope: None,
                level: None,
            },
            Limit {
                name: "daily".into(),
                rule: rule(Algorithm::FixedWindow, 10_000, 86_400_000_000),
                scope: None,
                level: None,
            },
        ],
        1,
    )
}

#[test]
fn headers_round_up_and_retry_after_only_when_denied() {
    let check = Check::single("k", rule(Algorithm::SlidingWindow, 100, 250_000), 1);
    let d = Decision::from_outcomes(&check, &[outcome(false, 0, 1_000_001, 59_000_001)]);
    let h: Vec<_> = d.headers().collect();
    let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string());
    assert_eq!(get("retry-after"), Some("2".to_string()));
    assert_eq!(
        get("ratelimit-policy"),
        Some("\"default\";q=100;w=1".to_string())
    );
    assert_eq!(get("ratelimit"), Some("\"default\";r=0;t=60".to_string()));
    assert_eq!(get("x-ratelimit-reset"), Some("60".to_string()));
    let allowed = Decision::from_outcomes(&check, &[outcome(true, 3, 0, 5)]);
    assert!(!allowed.headers().any(|(k, _)| k == "retry-after"));
}

#[test]
fn a_check_is_denied_by_any_limit_and_waits_for_the_slowest() {
    let check = two_limits();
    let d = Decision::from_outcomes(
        &check,
        &[
            outcome(false, 0, 100_000, 1_000_000),
            outcome(true, 9_000, 0, 3_600_000_000),
        ],
    );
    assert!(!d.allowed);
    assert_eq!((d.limit, d.remaining, d.retry_after_ms), (10, 0, 100));
    assert_eq!(d.reset_after_ms, 3_600_000, "the largest reset");
    assert_eq!(d.tightest().name.as_ref(), "burst");
    let both = Decision::from_outcomes(
        &check,
        &[
            outcome(false, 0, 100_000, 1_000_000),
            outcome(false, 0, 7_000_000, 7_000_000),
        ],
    );
    assert_eq!(
        both.retry_after_ms, 7_000,
        "the largest retry of the denials"
    );
    let h: Vec<_> = both.headers().collect();
    let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string());
    assert_eq!(
        get("ratelimit-policy"),
        Some("\"burst\";q=10;w=1, \"daily\";q=10000;w=86400".to_string())
    );
    assert_eq!(get("ratelimit"), Some("\"burst\";r=0;t=1".to_string()));
    assert_eq!(get("retry-after"), Some("7".to_string()));
}

#[test]
fn the_most_restrictive_limit_has_the_fewest_remaining_and_denials_win_ties() {
    let check = two_limits();
    let d = Decision::from_outcomes(&check, &[outcome(true, 5, 0, 1), outcome(false, 5, 10, 10)]);
    assert_eq!(d.most_restrictive, 1);
    let d = Decision::from_outcomes(&check, &[outcome(true, 4, 0, 1), outcome(true, 5, 0, 1)]);
    assert_eq!((d.most_restrictive, d.remaining), (0, 4));
}

#[test]
fn a_shadow_check_answers_allowed_and_keeps_the_real_decisions() {
    let mut check = two_limits();
    check.shadow = true;
    let d = Decision::from_outcomes(
        &check,
        &[outcome(false, 0, 100_000, 1), outcome(true, 1, 0, 1)],
    );
    assert!(d.allowed && d.shadow);
    assert_eq!(d.retry_after_ms, 0);
    assert!(!d.limits[0].allowed && d.limits[1].allowed);
    assert!(!d.headers().any(|(k, _)| k == "retry-after"));
    let d = Decision::from_outcomes(&check, &[outcome(true, 1, 0, 1), outcome(true, 1, 0, 1)]);
    assert!(
        d.allowed && !d.shadow,
        "shadow is said only when a limit denied"
    );
}

/// Issue 27 part 5: a bucket's quota in the headers is its burst, so a
/// full bucket's `r` never stands above its `q`.
#[test]
fn a_bucket_s_header_quota_is_its_burst() {
    let bucket = Rule::with_length(Algorithm::TokenBucket, 10, 1_000_000, 20);
    let check = Check::single("k", bucket, 1);
    let d = Decision::from_outcomes(&check, &[outcome(true, 19, 0, 100_000)]);
    let h: Vec<_> = d.headers().collect();
    let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string());
    assert_eq!(
        get("ratelimit-policy"),
        Some("\"default\";q=20;w=1".to_string())
    );
    assert_eq!(get("ratelimit"), Some("\"default\";r=19;t=1".to_string()));
    assert_eq!(get("x-ratelimit-limit"), Some("20".to_string()));
    assert_eq!(d.limit, 10, "the JSON limit stays the rate");
}
