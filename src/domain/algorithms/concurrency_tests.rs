//! concurrency on a controlled clock, apart from the algorithm so that its file
//! imports nothing of the shared test support (which imports every algorithm).

use super::super::test_support::*;
use super::super::*;
use super::{ConcurrencyState, release, renew};

fn c(limit: u64) -> Rule {
    rule(Algorithm::Concurrency, limit, 30 * SEC)
}

fn leases(s: &mut State) -> &mut ConcurrencyState {
    match s {
        State::Concurrency(c) => c,
        _ => panic!("not a concurrency state"),
    }
}

#[test]
fn acquires_up_to_the_limit_then_denies_until_the_earliest_expiry() {
    let r = c(3);
    let mut s = State::fresh(Algorithm::Concurrency);
    let t0 = 1_000 * SEC;
    for (i, expected) in [2, 1, 0].into_iter().enumerate() {
        let o = s.apply_leased(&r, t0 + i as u64 * SEC, 1, &format!("l{i}"));
        assert!(o.allowed);
        assert_eq!(o.remaining, expected);
        assert_eq!(o.reset_after_us, 30 * SEC);
    }
    let now = t0 + 5 * SEC;
    let o = s.apply_leased(&r, now, 1, "l3");
    assert!(!o.allowed);
    assert_eq!(o.remaining, 0);
    // l0 expires at t0 + 30 s: 25 s from now, exactly.
    assert_eq!(o.retry_after_us, 25 * SEC);
    assert_eq!(o.reset_after_us, 27 * SEC);
    let early = s.clone().apply_leased(&r, t0 + 30 * SEC - 1, 1, "l3");
    assert!(!early.allowed);
    let on_time = s.clone().apply_leased(&r, t0 + 30 * SEC, 1, "l3");
    assert!(on_time.allowed);
    assert_eq!(on_time.remaining, 0);
}

#[test]
fn a_look_spends_nothing_and_expired_leases_stop_counting() {
    let r = c(1);
    let mut s = State::fresh(Algorithm::Concurrency);
    assert!(s.apply_leased(&r, 0, 1, "a").allowed);
    let look = s.apply_leased(&r, SEC, 0, "");
    assert_eq!((look.allowed, look.remaining), (false, 0));
    // Never released: it frees itself at expiry.
    let after = s.apply_leased(&r, 30 * SEC, 0, "");
    assert_eq!((after.allowed, after.remaining), (true, 1));
    assert!(s.apply_leased(&r, 30 * SEC, 1, "b").allowed);
    assert_eq!(leases(&mut s).leases, vec![("b".to_string(), 60 * SEC)]);
}

#[test]
fn release_frees_one_slot_once_and_a_wrong_id_changes_nothing() {
    let r = c(2);
    let mut s = State::fresh(Algorithm::Concurrency);
    assert!(s.apply_leased(&r, 0, 1, "a").allowed);
    assert!(s.apply_leased(&r, 0, 1, "b").allowed);
    assert!(!s.apply_leased(&r, 0, 1, "c").allowed);
    let before = s.clone();
    assert!(!release(leases(&mut s), SEC, "nope"));
    assert_eq!(s, before);
    assert!(release(leases(&mut s), SEC, "a"));
    assert!(!release(leases(&mut s), SEC, "a"), "idempotent");
    let o = s.apply_leased(&r, SEC, 1, "c");
    assert_eq!((o.allowed, o.remaining), (true, 0));
    // An expired lease is not released: it was gone already.
    assert!(!release(leases(&mut s), 40 * SEC, "b"));
}

#[test]
fn renew_extends_a_live_lease_only() {
    let r = c(1);
    let mut s = State::fresh(Algorithm::Concurrency);
    assert!(s.apply_leased(&r, 0, 1, "a").allowed);
    assert!(!renew(leases(&mut s), &r, 10 * SEC, "b"));
    assert!(renew(leases(&mut s), &r, 10 * SEC, "a"));
    // Now a lives until 40 s.
    let o = s.apply_leased(&r, 35 * SEC, 1, "b");
    assert_eq!((o.allowed, o.retry_after_us), (false, 5 * SEC));
    assert!(!renew(leases(&mut s), &r, 40 * SEC, "a"), "expired");
    assert!(s.apply_leased(&r, 40 * SEC, 1, "b").allowed);
}
