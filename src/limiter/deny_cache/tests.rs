//! The deny cache on a manual clock.

use super::*;
use crate::domain::Window;
use crate::domain::{Algorithm, ManualClock, Rule};

fn rule(algorithm: Algorithm, limit: u64) -> Rule {
    Rule {
        algorithm,
        limit,
        window: Window::Length(1_000_000),
        burst: limit,
    }
}

fn check(cost: u64, limit: u64) -> Check {
    Check::single("k", rule(Algorithm::SlidingWindow, limit), cost)
}

fn two(first: Algorithm, cost: u64) -> Check {
    Check::multi(
        "k",
        vec![
            Limit {
                name: "a".into(),
                rule: rule(first, 5),
                scope: None,
                level: None,
            },
            Limit {
                name: "b".into(),
                rule: Rule {
                    window: Window::Length(60_000_000),
                    ..rule(Algorithm::FixedWindow, 100)
                },
                scope: None,
                level: None,
            },
        ],
        cost,
    )
}

fn denied(retry: u64) -> Outcome {
    Outcome {
        allowed: false,
        remaining: 0,
        retry_after_us: retry,
        reset_after_us: retry * 2,
    }
}

#[test]
fn answers_one_unit_checks_until_the_denial_ends() {
    let clock = ManualClock::new(1_000);
    let cache = DenyCache::new(10, Arc::new(clock.clone()));
    cache.record(&check(1, 5), 1_000, &[denied(500)]);
    clock.advance_us(200);
    let hit = cache.lookup(&check(0, 5)).unwrap()[0];
    assert_eq!((hit.retry_after_us, hit.reset_after_us), (300, 800));
    assert!(
        cache.lookup(&check(2, 5)).is_none(),
        "cost 2 has its own retry"
    );
    assert!(
        cache.lookup(&check(1, 6)).is_none(),
        "another limit is another rule"
    );
    clock.advance_us(300);
    assert!(
        cache.lookup(&check(1, 5)).is_none(),
        "expired exactly at until"
    );
    assert!(cache.is_empty());
}

#[test]
fn ignores_denials_of_larger_costs_and_allowed_checks() {
    let cache = DenyCache::new(10, Arc::new(ManualClock::new(0)));
    cache.record(&check(5, 10), 0, &[denied(500)]);
    let allowed = Outcome {
        allowed: true,
        ..denied(0)
    };
    cache.record(&check(1, 10), 0, &[allowed]);
    assert!(cache.is_empty());
}

#[test]
fn entries_answer_for_at_most_max_age() {
    let clock = ManualClock::new(0);
    let cache = DenyCache::new(10, Arc::new(clock.clone()));
    cache.record(&check(1, 5), 0, &[denied(60_000_000)]);
    clock.advance_us(MAX_AGE.as_micros() as u64 - 1);
    assert_eq!(
        cache.lookup(&check(1, 5)).unwrap()[0].retry_after_us,
        60_000_000 - MAX_AGE.as_micros() as u64 + 1
    );
    clock.advance_us(1);
    assert!(
        cache.lookup(&check(1, 5)).is_none(),
        "asks the store again after MAX_AGE"
    );
}

/// An inline bucket's state is its rule's alone (the key holds `limit` and
/// `burst`), so its denials are cached; with `redis.legacy_keys` it is also
/// spent on the old, shared name, and they are not.
#[test]
fn inline_buckets_are_cached_unless_their_state_is_shared() {
    let cache = DenyCache::new(10, Arc::new(ManualClock::new(0)));
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let c = Check::single("k", rule(algorithm, 5), 1);
        cache.record(&c, 0, &[denied(500)]);
        assert!(cache.lookup(&c).is_some(), "{algorithm}");
    }
    let shared = DenyCache::new(10, Arc::new(ManualClock::new(0))).with_shared_inline_buckets(true);
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let c = Check::single("k", rule(algorithm, 5), 1);
        shared.record(&c, 0, &[denied(500)]);
        assert!(shared.is_empty(), "{algorithm}");
    }
    // Denied by another limit while the bucket allowed: cached.
    let allowed = Outcome {
        allowed: true,
        remaining: 3,
        retry_after_us: 0,
        reset_after_us: 100,
    };
    shared.record(&two(Algorithm::TokenBucket, 1), 0, &[allowed, denied(500)]);
    assert_eq!(shared.len(), 1);
    shared.record(&two(Algorithm::TokenBucket, 0), 0, &[denied(500), allowed]);
    assert_eq!(shared.len(), 1, "a denying shared bucket is not");
}

/// A policy's limit has state of its own, read by that one rule: its bucket
/// denials are final and cached like the others.
#[test]
fn a_policy_bucket_denial_is_cached() {
    let clock = ManualClock::new(0);
    let cache = DenyCache::new(10, Arc::new(clock.clone()));
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let mut c = Check::single(format!("k-{algorithm}"), rule(algorithm, 5), 1);
        c.policy = Some("api".into());
        cache.record(&c, 0, &[denied(500)]);
        clock.advance_us(100);
        let hit = cache.lookup(&c).expect("cached");
        assert_eq!(hit[0].retry_after_us, 400, "{algorithm}");
        clock.set_us(0);
    }
}

#[test]
fn stays_bounded() {
    let cache = DenyCache::new(100, Arc::new(ManualClock::new(0)));
    for i in 0..10_000 {
        let mut c = check(1, 5);
        c.key = format!("k{i}");
        cache.record(&c, 0, &[denied(1_000)]);
    }
    assert!(cache.len() <= 200, "{}", cache.len());
}

/// A denied check spends nothing, so the store reports an allowing limit
/// as it is, whatever the cost asked (0 or 1): the cache answers both
/// costs with what was recorded.
#[test]
fn an_allowing_limit_reports_its_state_as_recorded_for_either_cost() {
    let clock = ManualClock::new(0);
    let cache = DenyCache::new(10, Arc::new(clock.clone()));
    let allowing = |remaining| Outcome {
        allowed: true,
        remaining,
        retry_after_us: 0,
        reset_after_us: 100,
    };
    cache.record(
        &two(Algorithm::SlidingWindow, 0),
        0,
        &[denied(500), allowing(7)],
    );
    for cost in [0, 1] {
        let hit = cache.lookup(&two(Algorithm::SlidingWindow, cost)).unwrap();
        assert_eq!((hit[1].allowed, hit[1].remaining), (true, 7), "cost {cost}");
        assert_eq!(
            (hit[0].allowed, hit[0].remaining),
            (false, 0),
            "cost {cost}"
        );
    }
}

#[test]
fn a_multi_limit_denial_answers_until_its_first_denying_limit_could_pass() {
    let clock = ManualClock::new(0);
    let cache = DenyCache::new(10, Arc::new(clock.clone()));
    let c = two(Algorithm::SlidingWindow, 1);
    cache.record(&c, 0, &[denied(300), denied(700)]);
    clock.advance_us(100);
    let hit = cache.lookup(&c).unwrap();
    assert_eq!((hit[0].retry_after_us, hit[1].retry_after_us), (200, 600));
    assert!(
        cache.lookup(&two(Algorithm::SlidingLog, 1)).is_none(),
        "another set of limits is another question"
    );
    let mut other_policy = c.clone();
    other_policy.policy = Some("api".into());
    assert!(cache.lookup(&other_policy).is_none());
    clock.advance_us(200);
    assert!(
        cache.lookup(&c).is_none(),
        "the first limit may pass now: ask the store"
    );
}

/// After a reset or refund clears the cache, neither a recorded denial nor
/// one asked for before the clear (still in flight then) answers.
#[test]
fn clear_forgets_entries_and_denials_asked_before_it() {
    let clock = ManualClock::new(1_000);
    let cache = DenyCache::new(10, Arc::new(clock.clone()));
    let c = check(1, 5);
    cache.record(&c, 1_000, &[denied(500_000)]);
    assert!(cache.lookup(&c).is_some());
    let in_flight = cache.now_us();
    clock.advance_us(10);
    cache.clear();
    assert!(cache.lookup(&c).is_none());
    cache.record(&c, in_flight, &[denied(500_000)]);
    assert!(cache.lookup(&c).is_none(), "asked before the clear");
    clock.advance_us(10);
    cache.record(&c, cache.now_us(), &[denied(500_000)]);
    assert!(cache.lookup(&c).is_some(), "asked after it");
}
