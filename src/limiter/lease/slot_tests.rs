//! One key's leasing state, on a clock stepped by hand.

use super::*;
use crate::domain::{Algorithm, Check, Rule};

const MODE: LeaseMode = LeaseMode {
    max_units: 100,
    ttl_us: 1_000_000,
    hot_rate: 50,
};

fn limits(limit: u64) -> Arc<[Limit]> {
    let rule = Rule::with_length(Algorithm::FixedWindow, limit, 10_000_000, limit);
    Check::single("k", rule, 1).limits
}

fn outcome(remaining: u64) -> Outcome {
    Outcome {
        allowed: true,
        remaining,
        retry_after_us: 0,
        reset_after_us: 5_000_000,
    }
}

fn chunk(limits: &Arc<[Limit]>, left: u64, at: Instant) -> Chunk {
    Chunk {
        limits: limits.clone(),
        left,
        at_us: 42,
        give_back_at: at + Duration::from_secs(1),
        usable_until: at + Duration::from_secs(5),
        counted_until: at + Duration::from_secs(10),
        outcomes: vec![outcome(1_000)],
        answered_at: at,
    }
}

/// A slot that has seen `rate` units per second for a rate period, with
/// `remaining` left in the store.
fn hot(rate: u64, remaining: u64, t0: Instant, limits: &[Limit]) -> (Slot, Instant) {
    let mut slot = Slot::new("p".into(), t0);
    slot.observed(&[outcome(remaining)]);
    let n = rate * RATE_PERIOD.as_millis() as u64 / 1_000;
    for _ in 0..n - 1 {
        assert_eq!(slot.take(&MODE, limits, 1, t0), Take::Direct);
    }
    let t = t0 + RATE_PERIOD;
    (slot, t)
}

#[test]
fn a_cold_key_is_checked_in_the_store() {
    let l = limits(10_000);
    let t0 = Instant::now();
    let (mut slot, t) = hot(40, 10_000, t0, &l);
    assert_eq!(slot.take(&MODE, &l, 1, t), Take::Direct);
    assert_eq!(slot.rate(), 40);
}

#[test]
fn a_hot_key_reserves_once_then_answers_from_its_chunk() {
    let l = limits(10_000);
    let t0 = Instant::now();
    let (mut slot, t) = hot(400, 10_000, t0, &l);
    // The check that measured the rate: half a second at 400/s, capped.
    assert_eq!(slot.take(&MODE, &l, 1, t), Take::Reserve(100));
    assert_eq!(
        slot.take(&MODE, &l, 1, t),
        Take::Direct,
        "one reservation at a time"
    );
    assert!(
        slot.refilled(slot.generation, Some(chunk(&l, 100, t)))
            .is_none()
    );
    let mut refills = 0;
    for i in 1..=100u64 {
        match slot.take(&MODE, &l, 1, t) {
            Take::Served { outcomes, refill } => {
                assert_eq!(outcomes[0].remaining, 1_000 + 100 - i);
                assert!(outcomes[0].allowed);
                if refill.is_some() {
                    refills += 1;
                    assert!(100 - i < 50, "only once below half a chunk");
                }
            }
            other => panic!("check {i}: {other:?}"),
        }
    }
    assert_eq!(refills, 1, "the refill under way is not asked for twice");
    assert_eq!(slot.take(&MODE, &l, 1, t), Take::Direct);
}

#[test]
fn a_chunk_is_not_used_past_its_ttl_or_its_window_or_by_other_limits() {
    let l = limits(10_000);
    let t0 = Instant::now();
    let (mut slot, t) = hot(400, 10_000, t0, &l);
    let _ = slot.take(&MODE, &l, 1, t);
    slot.refilled(slot.generation, Some(chunk(&l, 60, t)));
    let other = limits(20_000);
    assert!(!matches!(
        slot.take(&MODE, &other, 1, t),
        Take::Served { .. }
    ));
    let late = t + Duration::from_secs(1);
    assert!(!matches!(
        slot.take(&MODE, &l, 1, late),
        Take::Served { .. }
    ));
    let (due, lapsed) = slot.due(Some(&MODE), late);
    assert_eq!((due.len(), due[0].left, lapsed), (1, 60, 0), "given back");

    slot.refilled(slot.generation, Some(chunk(&l, 60, t)));
    let ended = t + Duration::from_secs(5);
    let (due, lapsed) = slot.due(Some(&MODE), ended);
    assert_eq!(
        (due.len(), lapsed),
        (1, 0),
        "a longer limit still counts it"
    );
    slot.refilled(slot.generation, Some(chunk(&l, 60, t)));
    let (due, lapsed) = slot.due(Some(&MODE), t + Duration::from_secs(10));
    assert!(due.is_empty());
    assert_eq!(lapsed, 60, "no limit counts it any more");
}

#[test]
fn a_key_that_cools_gives_its_chunk_back_before_the_ttl() {
    let l = limits(10_000);
    let t0 = Instant::now();
    let (mut slot, t) = hot(400, 10_000, t0, &l);
    let _ = slot.take(&MODE, &l, 1, t);
    slot.refilled(slot.generation, Some(chunk(&l, 60, t)));
    assert!(slot.due(Some(&MODE), t).0.is_empty(), "hot: kept");
    // A period at 10 units/s, under half the hot rate.
    let _ = slot.take(&MODE, &l, 1, t + RATE_PERIOD);
    let (due, _) = slot.due(Some(&MODE), t + RATE_PERIOD);
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].left, 59);
}

#[test]
fn an_invalidation_drops_chunks_and_voids_a_refill_under_way() {
    let l = limits(10_000);
    let t0 = Instant::now();
    let (mut slot, t) = hot(400, 10_000, t0, &l);
    let _ = slot.take(&MODE, &l, 1, t);
    slot.refilled(slot.generation, Some(chunk(&l, 60, t)));
    let before = slot.generation;
    assert_eq!(slot.drop_chunks(), 60);
    assert_eq!(slot.take(&MODE, &l, 1, t), Take::Reserve(100));
    // A refill started before the invalidation: its chunk is handed back.
    let stale = slot.refilled(before, Some(chunk(&l, 100, t)));
    assert_eq!(stale.map(|c| c.left), Some(100));
    assert!(slot.chunks.is_empty());
}

#[test]
fn a_key_near_its_limit_stops_leasing() {
    let l = limits(10_000);
    let t0 = Instant::now();
    let (mut slot, t) = hot(400, 10_000, t0, &l);
    slot.observed(&[outcome(3)]);
    assert_eq!(slot.take(&MODE, &l, 1, t), Take::Direct);
    slot.observed(&[outcome(40)]);
    assert_eq!(
        slot.take(&MODE, &l, 1, t),
        Take::Reserve(10),
        "a quarter of 40"
    );
}

#[test]
fn a_chunk_stops_short_of_its_window_end_by_a_margin() {
    let sent = Instant::now();
    let end = usable_until(sent, 2_000_000);
    assert_eq!(end, sent + Duration::from_millis(2_000 - 1 - 2));
}
