use crate::domain::Window;
use std::collections::HashMap;
use std::sync::Arc;

use super::space_saving::ENTRY_OVERHEAD;
use super::*;
use crate::domain::{Algorithm, Check, Decision, ManualClock, Outcome, Rule};

const SECOND: u64 = 1_000_000;

fn check(policy: Option<&str>, key: &str, cost: u64) -> Check {
    let rule = Rule {
        algorithm: Algorithm::FixedWindow,
        limit: 10,
        window: Window::Length(60 * SECOND),
        burst: 10,
    };
    let mut check = Check::single(key, rule, cost);
    check.policy = policy.map(Into::into);
    check
}

fn decided(check: &Check, allowed: bool) -> Decision {
    let outcome = Outcome {
        allowed,
        remaining: 0,
        retry_after_us: if allowed { 0 } else { SECOND },
        reset_after_us: SECOND,
    };
    Decision::from_outcomes(check, &vec![outcome; check.limits.len()])
}

fn observe(top: &Top, policy: Option<&str>, key: &str, cost: u64, allowed: bool) {
    // Built once per thread: a decision does not depend on the key, and
    // building one per observation made these tests slow in debug builds.
    thread_local! {
        static DECISIONS: (Check, Decision, Decision) = {
            let check = check(None, "", 1);
            let (yes, no) = (decided(&check, true), decided(&check, false));
            (check, yes, no)
        };
    }
    DECISIONS.with(|(template, yes, no)| {
        let mut check = template.clone();
        check.key = key.to_string();
        check.cost = cost;
        check.policy = policy.map(Into::into);
        top.observe(&check, if allowed { yes } else { no });
    });
}

/// A deterministic generator (64-bit LCG, high bits).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 53) as f64
    }
}

/// `draws` keys from a Zipf(1.1) law over `n` keys, with their true counts.
fn zipf(n: usize, draws: usize, seed: u64) -> (Vec<String>, HashMap<String, u64>) {
    let weights: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
    let sum: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(n);
    let mut acc = 0.0;
    for w in weights {
        acc += w / sum;
        cdf.push(acc);
    }
    let mut rng = Lcg(seed);
    let mut truth = HashMap::new();
    let stream = (0..draws)
        .map(|_| {
            let u = rng.unit();
            let rank = cdf.partition_point(|&c| c < u).min(n - 1);
            let key = format!("client-{rank:05}");
            *truth.entry(key.clone()).or_insert(0) += 1;
            key
        })
        .collect();
    (stream, truth)
}

fn true_top(truth: &HashMap<String, u64>, n: usize) -> Vec<String> {
    let mut all: Vec<(&String, &u64)> = truth.iter().collect();
    all.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    all.into_iter().take(n).map(|(k, _)| k.clone()).collect()
}

fn assert_within_bounds(report: &TopKeys, truth: &HashMap<String, u64>) {
    for hitter in &report.keys {
        let real = truth.get(&hitter.key).copied().unwrap_or(0);
        assert!(
            hitter.count - hitter.error <= real && real <= hitter.count,
            "{}: true {real} outside [{}, {}]",
            hitter.key,
            hitter.count - hitter.error,
            hitter.count
        );
    }
    let listed: Vec<&String> = report.keys.iter().map(|h| &h.key).collect();
    for (key, &real) in truth {
        if !listed.contains(&key) {
            assert!(real <= report.unlisted_max, "{key}: {real} unlisted");
        }
    }
}

#[test]
fn zipf_traffic_reports_the_true_top_ten_within_the_stated_bounds() {
    let clock = ManualClock::new(0);
    let top = Top::new(256, 16, Arc::new(clock));
    let (stream, truth) = zipf(20_000, 200_000, 42);
    for key in &stream {
        observe(&top, Some("api"), key, 1, true);
    }
    let report = top.top("api", By::Checked, Period::Minute, 50).unwrap();
    let reported: Vec<String> = report.keys.iter().take(10).map(|h| h.key.clone()).collect();
    assert_eq!(reported, true_top(&truth, 10));
    assert_within_bounds(&report, &truth);
    assert_eq!(report.total, 200_000);
}

#[test]
fn zipf_traffic_over_ten_minutes_of_slices_merges_within_the_bounds() {
    let clock = ManualClock::new(0);
    let top = Top::new(256, 16, Arc::new(clock.clone()));
    let (stream, truth) = zipf(20_000, 120_000, 7);
    // Spread over 9 minutes: 54 slices, 9 merged minutes, the rest fine.
    let step = 9 * 60 * SECOND / stream.len() as u64;
    for key in &stream {
        observe(&top, Some("api"), key, 1, false);
        clock.advance_us(step);
    }
    let report = top.top("api", By::Denied, Period::TenMinutes, 40).unwrap();
    let reported: Vec<String> = report.keys.iter().take(10).map(|h| h.key.clone()).collect();
    assert_eq!(reported, true_top(&truth, 10));
    assert_within_bounds(&report, &truth);
    assert_eq!(report.total, 120_000);
}

#[test]
fn the_minute_view_forgets_what_is_older_than_its_slices() {
    let clock = ManualClock::new(0);
    let top = Top::new(64, 16, Arc::new(clock.clone()));
    observe(&top, None, "old", 5, false);
    clock.advance_us(75 * SECOND);
    observe(&top, None, "new", 2, true);
    let minute = top.top(INLINE, By::Checked, Period::Minute, 10).unwrap();
    assert_eq!(minute.keys.len(), 1);
    assert_eq!(minute.keys[0].key, "new");
    assert_eq!(minute.total, 2);
    assert!(
        (60_000..=70_000).contains(&minute.window_ms),
        "{}",
        minute.window_ms
    );
    let ten = top
        .top(INLINE, By::Checked, Period::TenMinutes, 10)
        .unwrap();
    assert_eq!(ten.total, 7);
    let denied = top.top(INLINE, By::Denied, Period::TenMinutes, 10).unwrap();
    let only_old = vec![Hitter {
        key: "old".into(),
        count: 5,
        error: 0,
    }];
    assert_eq!(denied.keys, only_old);
    clock.advance_us(11 * 60 * SECOND);
    let gone = top
        .top(INLINE, By::Checked, Period::TenMinutes, 10)
        .unwrap();
    assert_eq!((gone.keys.len(), gone.total), (0, 0));
}

#[test]
fn a_million_distinct_keys_hold_bounded_memory() {
    let clock = ManualClock::new(0);
    let capacity = 128;
    let top = Top::new(capacity, 16, Arc::new(clock.clone()));
    let check = check(Some("api"), "", 1);
    let (yes, no) = (decided(&check, true), decided(&check, false));
    let mut check = check;
    let padding = "k".repeat(300);
    let mut peak = 0;
    // Over 12 minutes, so that every slice of both views fills up; keys of
    // 6 to 306 bytes, some past what is kept.
    for i in 0..1_000_000u64 {
        check.key.clear();
        use std::fmt::Write;
        write!(check.key, "{i:x}-{}", &padding[..(i % 300) as usize]).unwrap();
        check.cost = 1 + i % 3;
        top.observe(&check, if i % 2 == 0 { &yes } else { &no });
        clock.advance_us(720 * SECOND / 1_000_000);
        if i % 50_000 == 0 {
            peak = peak.max(top.bytes());
        }
    }
    peak = peak.max(top.bytes());
    // Two streams, each a live slice, 6 finished slices and 10 minutes of
    // `capacity` counters, each at most the overhead and a kept key.
    let slices = 1 + 6 + 10;
    let bound = 2 * slices * capacity * (ENTRY_OVERHEAD + KEPT_KEY_BYTES);
    assert!(peak <= bound, "{peak} > {bound}");
    assert!(peak > bound / 10, "{peak}: the sketches should be in use");
    let report = top
        .top("api", By::Checked, Period::TenMinutes, 10_000)
        .unwrap();
    assert!(report.keys.len() <= 11 * capacity, "{}", report.keys.len());
    assert!(report.keys.iter().all(|h| h.key.len() <= KEPT_KEY_BYTES));
}

#[test]
fn long_keys_are_kept_short_and_distinct() {
    let top = Top::new(16, 4, Arc::new(ManualClock::new(0)));
    let long = |c: char| format!("{}{c}", "x".repeat(400));
    observe(&top, None, &long('a'), 1, true);
    observe(&top, None, &long('b'), 2, true);
    let report = top.top(INLINE, By::Checked, Period::Minute, 10).unwrap();
    assert_eq!(report.keys.len(), 2);
    for hitter in &report.keys {
        assert!(hitter.key.len() <= KEPT_KEY_BYTES, "{}", hitter.key.len());
        assert!(hitter.key.starts_with("xxxx") && hitter.key.contains("…#"));
    }
}

#[test]
fn sets_are_bounded_and_unknown_ones_report_nothing() {
    let top = Top::new(16, 2, Arc::new(ManualClock::new(0)));
    observe(&top, Some("a"), "k", 1, true);
    observe(&top, Some("b"), "k", 1, true);
    observe(&top, Some("c"), "k", 1, true);
    assert_eq!(top.sets(), ["a", "b"]);
    assert!(top.top("c", By::Checked, Period::Minute, 10).is_none());
    observe(&top, Some("a"), "k", 0, true);
    let a = top.top("a", By::Checked, Period::Minute, 10).unwrap();
    assert_eq!(a.total, 1, "a check of cost 0 spends nothing");
}

#[test]
fn at_the_cap_sets_idle_for_ten_minutes_make_room() {
    let clock = ManualClock::new(0);
    let top = Top::new(16, 2, Arc::new(clock.clone()));
    observe(&top, Some("gone"), "k", 1, true);
    observe(&top, Some("kept"), "k", 1, true);
    clock.advance_us(6 * 60 * SECOND);
    observe(&top, Some("kept"), "k", 1, true);
    observe(&top, Some("new"), "k", 1, true);
    assert_eq!(top.sets(), ["gone", "kept"], "not idle yet");
    clock.advance_us(6 * 60 * SECOND);
    observe(&top, Some("new"), "k", 1, true);
    assert_eq!(top.sets(), ["kept", "new"]);
}

#[test]
fn an_rls_check_counts_under_its_descriptor_entries() {
    let top = Top::new(16, 4, Arc::new(ManualClock::new(0)));
    let mut check = check(Some("rls.edge"), "edge", 1);
    let mut limits: Vec<_> = check.limits.to_vec();
    limits[0].scope = Some("remote_address=10.0.0.7".into());
    check.limits = limits.into();
    top.observe(&check, &decided(&check, false));
    let report = top.top("rls.edge", By::Denied, Period::Minute, 5).unwrap();
    assert_eq!(report.keys[0].key, "remote_address=10.0.0.7");
}
