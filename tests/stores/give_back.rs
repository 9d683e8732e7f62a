//! Give-backs through every store (embedded and Redis) on a controlled
//! clock: every answer carries the store time it ran at; a give-back of a
//! reservation answers like a look and leaves exactly what a smaller
//! reservation would have, as the Rust twins say; each limit of a policy
//! on its own; nothing after a reset, nor from a key written before its
//! birth was recorded; the other algorithms refused with nothing written.

use crate::support::StoreExt;
use std::sync::Arc;

use ratekeeper::domain::algorithms::{State, apply_all, give_back_all};
use ratekeeper::domain::{Algorithm, Check, LeaseId, Limit, ManualClock, Outcome, Rule, Window};
use ratekeeper::store::{Applied, Op, Store, StoreError};

use crate::support::stores::redis_options;
use crate::support::{RedisServer, unique_key};

for_each_store!(
    every_answer_carries_the_store_time,
    a_give_back_restores_exactly_what_the_reservation_left,
    a_policy_gives_back_on_each_limit_on_its_own,
    a_give_back_after_a_reset_gives_back_nothing,
    other_algorithms_refuse_and_nothing_is_written,
);

const T0: u64 = 1_767_225_600_000_000; // a boundary of every window used here
const SEC: u64 = 1_000_000;

/// 10 per 10 s.
fn rule(algorithm: Algorithm) -> Rule {
    Rule {
        algorithm,
        limit: 10,
        window: Window::Length(10 * SEC),
        burst: 10,
    }
}

fn with_cost(check: &Check, cost: u64) -> Check {
    Check {
        cost,
        ..check.clone()
    }
}

async fn one(store: &dyn Store, op: Op<'_>) -> Result<Applied, StoreError> {
    store.apply(&[op]).await.remove(0)
}

async fn look(store: &dyn Store, check: &Check) -> Vec<Outcome> {
    store.check(&with_cost(check, 0)).await.unwrap()
}

async fn every_answer_carries_the_store_time(store: Arc<dyn Store>, clock: ManualClock) {
    let name = store.name();
    let c = Check::single(unique_key("at"), rule(Algorithm::FixedWindow), 2);
    let lease = LeaseId::from_text("lease-1".to_string());
    let concurrency = Rule {
        algorithm: Algorithm::Concurrency,
        limit: 2,
        window: Window::Length(10 * SEC),
        burst: 2,
    };
    let cc = Check::single(unique_key("at-cc"), concurrency, 1);
    let ops = [
        Op::check(&c),
        Op::refund(&c),
        Op::settle(&c, 3),
        Op::give_back(&c, T0),
        Op::reset(&c),
        Op::acquire(&cc, &lease),
        Op::renew(&cc, &lease),
        Op::release(&cc, &lease),
    ];
    for (i, op) in ops.into_iter().enumerate() {
        let now = T0 + i as u64 * 1_000;
        clock.set_us(now);
        let applied = one(&*store, op).await.unwrap();
        assert_eq!(applied.at_us, Some(now), "{name}: {:?}", op.kind);
    }
    // In a call of several operations too, each its own answer's.
    clock.set_us(T0 + SEC);
    for answer in store.apply(&[Op::check(&c), Op::give_back(&c, T0)]).await {
        assert_eq!(answer.unwrap().at_us, Some(T0 + SEC), "{name}");
    }
}

/// A reservation's instant, the others' spends after it (instant, cost),
/// and the give-back's instant.
type Scenario = (u64, &'static [(u64, u64)], u64);

/// The same steps on `store` and on the Rust twins, a reservation of 6
/// of which 4 are given back at the end, each answer equal; and the state
/// afterwards what a reservation of 2 would have left.
async fn a_give_back_restores_exactly_what_the_reservation_left(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    let name = store.name();
    let scenarios: [Scenario; 4] = [
        // The same window.
        (
            T0 + SEC,
            &[(T0 + 2 * SEC, 1), (T0 + 3 * SEC, 2)],
            T0 + 9 * SEC,
        ),
        // The next window, nothing spent since: still the stored count.
        (T0 + 5 * SEC, &[], T0 + 13 * SEC),
        // The next window after a spend there (a sliding window's prev).
        (T0 + 5 * SEC, &[(T0 + 12 * SEC, 1)], T0 + 15 * SEC),
        // Two windows on: nothing left to give back.
        (T0 + 5 * SEC, &[(T0 + 12 * SEC, 1)], T0 + 21 * SEC),
    ];
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let r = rule(algorithm);
        for (i, (reserve_at, others, give_back_at)) in scenarios.iter().enumerate() {
            let at = format!("{name} {algorithm} scenario {i}");
            let c = Check::single(unique_key("gb"), r, 0);
            let mut twin = [State::fresh(algorithm)];
            let mut smaller = [State::fresh(algorithm)];
            clock.set_us(*reserve_at);
            let reserved = one(&*store, Op::check(&with_cost(&c, 6))).await.unwrap();
            assert_eq!(
                reserved.outcomes,
                apply_all(&mut twin, &[&r], *reserve_at, 6)
            );
            apply_all(&mut smaller, &[&r], *reserve_at, 2);
            for (t, cost) in others.iter().copied() {
                clock.set_us(t);
                let got = store.check(&with_cost(&c, cost)).await.unwrap();
                assert_eq!(got, apply_all(&mut twin, &[&r], t, cost), "{at}");
                apply_all(&mut smaller, &[&r], t, cost);
            }
            clock.set_us(*give_back_at);
            let given = store
                .give_back(&with_cost(&c, 4), reserved.at_us.unwrap())
                .await
                .unwrap();
            let want = give_back_all(&mut twin, &[&r], *give_back_at, *reserve_at, 4).unwrap();
            assert_eq!(given.outcomes, want, "{at}");
            assert_eq!(given.outcomes, look(&*store, &c).await, "{at}: a look");
            // Exact while the reservation's count is kept: a fixed
            // window's only in its own period, a sliding window's for the
            // next one too.
            let kept = i == 0 || (algorithm == Algorithm::SlidingWindow && i < 3);
            if kept {
                assert_eq!(twin, smaller, "{at}: as if it had reserved 2");
            }
            // Later answers agree too: the stored state is the twin's.
            let later = give_back_at + 3 * SEC;
            clock.set_us(later);
            let got = store.check(&with_cost(&c, 1)).await.unwrap();
            assert_eq!(got, apply_all(&mut twin, &[&r], later, 1), "{at}: later");
        }
    }
}

async fn a_policy_gives_back_on_each_limit_on_its_own(store: Arc<dyn Store>, clock: ManualClock) {
    let limit = |name: &str, algorithm, limit, window_us| Limit {
        name: name.into(),
        rule: Rule {
            algorithm,
            limit,
            window: Window::Length(window_us),
            burst: limit,
        },
        scope: None,
        level: None,
    };
    let limits = vec![
        limit("burst", Algorithm::SlidingWindow, 10, 10 * SEC),
        limit("daily", Algorithm::FixedWindow, 100, 86_400 * SEC),
    ];
    let mut c = Check::multi(unique_key("policy"), limits, 8);
    c.policy = Some("api".into());
    clock.set_us(T0);
    let reserved = one(&*store, Op::check(&c)).await.unwrap();
    assert_eq!(
        reserved.iter().map(|o| o.remaining).collect::<Vec<_>>(),
        [2, 92]
    );
    // 25 s later: the sliding window's count is two windows old, the
    // daily one still counts it. Each gives back what it still holds.
    clock.set_us(T0 + 25 * SEC);
    let given = store
        .give_back(&with_cost(&c, 5), reserved.at_us.unwrap())
        .await
        .unwrap();
    assert_eq!(
        given.iter().map(|o| o.remaining).collect::<Vec<_>>(),
        [10, 97],
        "{}",
        store.name()
    );
}

async fn other_algorithms_refuse_and_nothing_is_written(store: Arc<dyn Store>, clock: ManualClock) {
    let name = store.name();
    clock.set_us(T0);
    for algorithm in [
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ] {
        let limits = vec![
            Limit {
                name: "window".into(),
                rule: rule(Algorithm::FixedWindow),
                scope: None,
                level: None,
            },
            Limit {
                name: "other".into(),
                rule: rule(algorithm),
                scope: None,
                level: None,
            },
        ];
        let mut c = Check::multi(unique_key("refused"), limits, 4);
        c.policy = Some("api".into());
        let reserved = one(&*store, Op::check(&c)).await.unwrap();
        let before = look(&*store, &c).await;
        let refused = store.give_back(&c, reserved.at_us.unwrap()).await;
        match refused {
            Err(StoreError::Backend(message)) => assert!(
                message.contains("give back is only defined for fixed_window and sliding_window"),
                "{name} {algorithm}: {message}"
            ),
            other => panic!("{name} {algorithm}: {other:?}"),
        }
        assert_eq!(look(&*store, &c).await, before, "{name} {algorithm}");
    }
}

/// A give-back on its way when a reset runs: others spend the whole limit
/// in the same window after the reset, and the give-back must not free
/// any of it (the state it finds was born after the reservation).
async fn a_give_back_after_a_reset_gives_back_nothing(store: Arc<dyn Store>, clock: ManualClock) {
    let name = store.name();
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let c = Check::single(unique_key("gb-reset"), rule(algorithm), 5);
        clock.set_us(T0 + SEC);
        let reserved = one(&*store, Op::check(&c)).await.unwrap();
        clock.set_us(T0 + 2 * SEC);
        one(&*store, Op::reset(&c)).await.unwrap();
        clock.set_us(T0 + 3 * SEC);
        assert!(store.check(&with_cost(&c, 10)).await.unwrap()[0].allowed);
        clock.set_us(T0 + 4 * SEC);
        let given = store.give_back(&c, reserved.at_us.unwrap()).await.unwrap();
        assert_eq!(given.outcomes[0].remaining, 0, "{name} {algorithm}");
        let more = store.check(&c).await.unwrap()[0].allowed;
        assert!(
            !more,
            "{name} {algorithm}: 15 admitted after the reset, limit 10"
        );
    }
}

/// A key written by the version before `b` (its creation time) gives
/// nothing back, as the twin without `born_us`; its next spend records
/// `b`, and a give-back of that spend is exact again.
#[tokio::test]
async fn a_key_without_its_birth_gives_back_nothing_until_its_next_spend() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = ratekeeper::store::redis::RedisStore::connect(redis_options(&server, &clock, 0));
    let store = store.unwrap();
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let r = rule(algorithm);
        let c = Check::single(unique_key("gb-old"), r, 5);
        let mut twin = [State::fresh(algorithm)];
        clock.set_us(T0 + SEC);
        store.check(&c).await.unwrap();
        apply_all(&mut twin, &[&r], T0 + SEC, 5);
        server.cli(&["HDEL", &store.limit_key(&c, &c.limits[0]), "b"]);
        match &mut twin[0] {
            State::FixedWindow(s) => s.born_us = None,
            State::SlidingWindow(s) => s.born_us = None,
            _ => unreachable!(),
        }
        let steps = [(T0 + 2 * SEC, T0 + SEC), (T0 + 3 * SEC, T0 + 3 * SEC)];
        for (i, (now, at)) in steps.into_iter().enumerate() {
            clock.set_us(now);
            if i == 1 {
                store.check(&c).await.unwrap();
                apply_all(&mut twin, &[&r], now, 5);
            }
            let given = store.give_back(&c, at).await.unwrap().outcomes;
            assert_eq!(given, give_back_all(&mut twin, &[&r], now, at, 5).unwrap());
            assert_eq!(given[0].remaining, 5, "{algorithm} step {i}");
        }
    }
    store.quit().await;
}
