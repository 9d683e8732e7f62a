//! `Check` validation: fields named on error, defaults, costs and leases.

use super::*;
use crate::domain::{Algorithm, MAX_LIMIT, WindowInput};

fn input(algorithm: Algorithm) -> CheckInput {
    CheckInput {
        key: "k".into(),
        rule: RuleInput {
            limit: 10,
            window: Some(WindowInput::Text("1s".into())),
            algorithm: Some(algorithm),
            burst: None,
            ..Default::default()
        },
        cost: None,
    }
}

fn field_of(input: CheckInput) -> String {
    Check::new(input, &Bounds::default()).unwrap_err().field
}

#[test]
fn defaults_to_sliding_window_cost_one_burst_limit() {
    let mut i = input(Algorithm::Gcra);
    i.rule.algorithm = None;
    let c = Check::new(i, &Bounds::default()).unwrap();
    assert_eq!(c.rule().algorithm, Algorithm::SlidingWindow);
    assert_eq!(
        (c.cost, c.rule().burst, c.rule().window_us()),
        (1, 10, 1_000_000)
    );
}

#[test]
fn integer_window_is_seconds() {
    let mut i = input(Algorithm::FixedWindow);
    i.rule.window = Some(WindowInput::Seconds(60));
    assert_eq!(
        Check::new(i, &Bounds::default())
            .unwrap()
            .rule()
            .window_us(),
        60_000_000
    );
}

#[test]
fn names_the_bad_field() {
    let mut i = input(Algorithm::FixedWindow);
    i.key = String::new();
    assert_eq!(field_of(i), "key");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.limit = 0;
    assert_eq!(field_of(i), "limit");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.limit = MAX_LIMIT + 1;
    assert_eq!(field_of(i), "limit");
    let mut i = input(Algorithm::SlidingLog);
    i.rule.limit = 100_001;
    assert_eq!(field_of(i), "limit");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.window = Some(WindowInput::Seconds(0));
    assert_eq!(field_of(i), "window");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.window = Some(WindowInput::Text("367d".into()));
    assert_eq!(field_of(i), "window");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.window = None;
    assert_eq!(field_of(i), "window");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.calendar = Some("day".into());
    assert_eq!(field_of(i), "calendar");
    let mut i = input(Algorithm::SlidingWindow);
    i.rule.window = None;
    i.rule.calendar = Some("day".into());
    assert_eq!(field_of(i), "calendar");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.window = None;
    i.rule.calendar = Some("fortnight".into());
    assert_eq!(field_of(i), "calendar");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.timezone = Some("Europe/Berlin".into());
    assert_eq!(field_of(i), "timezone");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.window = None;
    i.rule.calendar = Some("day".into());
    i.rule.timezone = Some("Mars/Olympus_Mons".into());
    assert_eq!(field_of(i), "timezone");
    let mut i = input(Algorithm::FixedWindow);
    i.cost = Some(11);
    assert_eq!(field_of(i), "cost");
    let mut i = input(Algorithm::FixedWindow);
    i.rule.burst = Some(5);
    assert_eq!(field_of(i), "burst");
    let mut i = input(Algorithm::TokenBucket);
    i.rule.burst = Some(5);
    i.cost = Some(6);
    assert_eq!(field_of(i), "cost");
    let mut i = input(Algorithm::Gcra);
    i.rule.limit = 2_000_000;
    assert_eq!(field_of(i), "limit");
}

#[test]
fn key_may_hold_any_utf8() {
    let mut i = input(Algorithm::FixedWindow);
    i.key = "a {b}\n ü".into();
    assert!(Check::new(i, &Bounds::default()).is_ok());
}

/// D8: a lease_ttl past `limits.max_lease_ttl` (1h) was told to try "1d".
#[test]
fn a_too_long_ttl_is_told_only_examples_that_fit() {
    let mut i = input(Algorithm::Concurrency);
    i.rule.window = None;
    i.rule.lease_ttl = Some(WindowInput::Text("2h".into()));
    let e = Check::new(i, &Bounds::default()).unwrap_err();
    assert_eq!(e.field, "lease_ttl");
    assert!(e.message.contains("to 1h"), "{}", e.message);
    assert!(!e.message.contains("\"1d\""), "{}", e.message);
    let bounds = Bounds {
        max_reservation_ttl_us: 60_000_000,
        ..Bounds::default()
    };
    let e =
        crate::domain::reservation_ttl_ms(&WindowInput::Text("2m".into()), &bounds).unwrap_err();
    assert_eq!(e.field, "reservation_ttl");
    assert!(
        e.message.contains("\"1m\"") && !e.message.contains("\"1h\""),
        "{}",
        e.message
    );
    assert_eq!(
        crate::domain::reservation_ttl_ms(&WindowInput::Seconds(30), &bounds),
        Ok(30_000)
    );
}
