//! Invalidation of the deny cache, on a manual clock.

use super::*;
use crate::domain::Window;
use crate::domain::{Algorithm, ManualClock, MonotonicClock, Rule};

fn rule(algorithm: Algorithm) -> Rule {
    Rule {
        algorithm,
        limit: 5,
        window: Window::Length(1_000_000),
        burst: 5,
    }
}

fn check(key: &str, policy: Option<&str>, algorithm: Algorithm) -> Check {
    let mut check = Check::single(key, rule(algorithm), 1);
    check.policy = policy.map(Into::into);
    check
}

fn denied() -> Outcome {
    Outcome {
        allowed: false,
        remaining: 0,
        retry_after_us: 500_000,
        reset_after_us: 500_000,
    }
}

fn cache_at(us: u64) -> (DenyCache, ManualClock) {
    let clock = ManualClock::new(us);
    (DenyCache::new(100, Arc::new(clock.clone())), clock)
}

#[test]
fn invalidating_a_key_ends_all_its_entries_and_no_other() {
    let (cache, clock) = cache_at(1_000);
    let of_k = [
        check("k", None, Algorithm::SlidingWindow),
        check("k", None, Algorithm::FixedWindow),
        check("k", Some("api"), Algorithm::TokenBucket),
    ];
    let other = check("k2", None, Algorithm::SlidingWindow);
    for c in of_k.iter().chain([&other]) {
        cache.record(c, 1_000, &[denied()]);
        assert!(cache.lookup(c).is_some());
    }
    clock.advance_us(10);
    cache.invalidate("k");
    for c in &of_k {
        assert!(cache.lookup(c).is_none(), "{c:?}");
    }
    assert!(
        cache.lookup(&other).is_some(),
        "another key keeps its denial"
    );
    clock.advance_us(10);
    cache.record(&of_k[0], clock.now_us(), &[denied()]);
    assert!(
        cache.lookup(&of_k[0]).is_some(),
        "a denial asked after the invalidation is cached again"
    );
}

/// A check asked the store before a reset and got its denial back after
/// the invalidation: the store may have decided before the reset, so the
/// denial must not be cached, even if it is recorded at once.
#[test]
fn a_denial_asked_before_the_invalidation_is_refused() {
    let (cache, clock) = cache_at(1_000);
    let c = check("k", None, Algorithm::SlidingLog);
    let asked_at = cache.now_us();
    clock.advance_us(300);
    cache.invalidate("k");
    clock.advance_us(300);
    cache.record(&c, asked_at, &[denied()]);
    assert!(cache.lookup(&c).is_none());
    assert!(cache.is_empty(), "never inserted");
    // The same microsecond as the invalidation counts as before it.
    cache.invalidate("k");
    cache.record(&c, cache.now_us(), &[denied()]);
    assert!(cache.lookup(&c).is_none());
    clock.advance_us(1);
    cache.record(&c, cache.now_us(), &[denied()]);
    assert!(cache.lookup(&c).is_some(), "one microsecond later is after");
}

/// Recorded first, invalidated second (the record won the race): the
/// entry is stale on lookup.
#[test]
fn an_entry_recorded_before_the_invalidation_is_not_answered() {
    let (cache, clock) = cache_at(1_000);
    let c = check("k", None, Algorithm::SlidingWindow);
    cache.record(&c, 1_000, &[denied()]);
    cache.invalidate("k"); // same instant as asked
    assert!(cache.lookup(&c).is_none());
    clock.advance_us(1);
    assert!(cache.lookup(&c).is_none(), "removed, not revived");
}

#[test]
fn suspended_the_cache_answers_and_records_nothing_until_resumed() {
    let (cache, clock) = cache_at(1_000);
    let c = check("k", None, Algorithm::SlidingWindow);
    cache.record(&c, 1_000, &[denied()]);
    let asked_while_up = cache.now_us();
    cache.suspend();
    assert!(cache.is_suspended() && cache.is_empty());
    assert!(cache.lookup(&c).is_none());
    clock.advance_us(10);
    let asked_while_down = cache.now_us();
    cache.record(&c, asked_while_down, &[denied()]);
    assert!(cache.is_empty(), "nothing recorded while suspended");
    clock.advance_us(10);
    cache.resume();
    assert!(!cache.is_suspended());
    for asked in [asked_while_up, asked_while_down] {
        cache.record(&c, asked, &[denied()]);
        assert!(
            cache.lookup(&c).is_none(),
            "an invalidation may have been missed before the resume"
        );
    }
    clock.advance_us(1);
    cache.record(&c, cache.now_us(), &[denied()]);
    assert!(cache.lookup(&c).is_some(), "caching again");
}

/// More live marks than the map holds: everything asked so far is
/// invalidated at once instead, so no mark is lost.
#[test]
fn too_many_invalidations_at_once_invalidate_everything() {
    let (cache, clock) = cache_at(1_000);
    let first = check("key-0", None, Algorithm::SlidingWindow);
    cache.record(&first, 1_000, &[denied()]);
    let never = check("never-invalidated", None, Algorithm::SlidingWindow);
    cache.record(&never, 1_000, &[denied()]);
    for i in 0..40_000 {
        clock.advance_us(1);
        cache.invalidate(&format!("key-{i}"));
        if i % 1_000 == 0 {
            assert!(cache.lookup(&first).is_none(), "key-0 stays invalidated");
        }
    }
    assert!(cache.lookup(&first).is_none());
    assert!(
        cache.lookup(&never).is_none(),
        "the overflow invalidated everything"
    );
    let marks = cache.invalidations.mark_count();
    assert!(marks <= 16_384, "{marks}");
}

/// A mark is needed for MAX_AGE at most: no entry it covers lives longer.
#[test]
fn old_marks_are_dropped() {
    let (cache, clock) = cache_at(1_000);
    for i in 0..100 {
        cache.invalidate(&format!("key-{i}"));
    }
    clock.advance_us(MAX_AGE.as_micros() as u64 + 1);
    cache.invalidate("another");
    assert_eq!(cache.invalidations.mark_count(), 1);
}

/// Real threads on the real clock: recorders take the asking time, then
/// read the "store" (denied until the reset), then record; meanwhile the
/// state is reset and the key invalidated. Once `invalidate` returned, no
/// lookup may ever answer a denial again: every denial the store gave was
/// asked before the reset, hence before the invalidation.
#[test]
fn no_denial_from_before_the_reset_survives_racing_recorders() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for _ in 0..50 {
        let cache = Arc::new(DenyCache::new(100, Arc::new(MonotonicClock::default())));
        let reset = Arc::new(AtomicBool::new(false));
        let invalidated = Arc::new(AtomicBool::new(false));
        let c = check("k", None, Algorithm::SlidingWindow);
        let recorders: Vec<_> = (0..3)
            .map(|_| {
                let (cache, reset, invalidated, c) =
                    (cache.clone(), reset.clone(), invalidated.clone(), c.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        let after = invalidated.load(Ordering::SeqCst);
                        let asked_at = cache.now_us();
                        if !reset.load(Ordering::SeqCst) {
                            cache.record(&c, asked_at, &[denied()]);
                        }
                        if after {
                            assert!(cache.lookup(&c).is_none(), "a stale denial answered");
                        }
                    }
                })
            })
            .collect();
        std::thread::yield_now();
        reset.store(true, Ordering::SeqCst);
        cache.invalidate("k");
        invalidated.store(true, Ordering::SeqCst);
        assert!(cache.lookup(&c).is_none());
        for recorder in recorders {
            recorder.join().unwrap();
        }
        assert!(cache.lookup(&c).is_none());
    }
}
