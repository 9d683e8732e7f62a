//! The same scenarios against every store (embedded and Redis), on a
//! controlled clock. What only Redis has is in `tests/stores/redis_store.rs`.

use crate::support;
use crate::support::StoreExt;
use std::sync::Arc;

use ratekeeper::domain::{Algorithm, Check, ManualClock, Outcome};
use ratekeeper::store::Store;

use support::{check, unique_key};

for_each_store!(
    seed_example_through_every_store,
    boundary_burst_only_passes_fixed_window,
    retry_after_is_exact_in_every_store_and_algorithm,
    state_expires_and_reset_after_says_when,
    same_key_under_other_rules_never_shares_state,
    a_large_cost_on_the_sliding_log_is_one_entry,
    lowering_the_limit_of_a_spent_key_reports_zero_remaining,
);

const T0: u64 = 1_767_225_600_000_000; // a window boundary for every window used here
const SEC: u64 = 1_000_000;
const MS: u64 = 1_000;

async fn run(store: &dyn Store, c: &Check) -> Outcome {
    store.check(c).await.unwrap()[0]
}

async fn seed_example_through_every_store(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let key = unique_key("seed");
    let spend = |cost| check(&key, Algorithm::SlidingWindow, 100, "1m", cost);
    // 80 units in the previous minute...
    clock.set_us(T0 + 30 * SEC);
    assert!(run(&*store, &spend(80)).await.allowed);
    // ...30 in this one, then a look 25% (15 s) into it.
    clock.set_us(T0 + 60 * SEC + SEC);
    assert!(run(&*store, &spend(20)).await.allowed);
    clock.set_us(T0 + 60 * SEC + 15 * SEC);
    assert!(run(&*store, &spend(10)).await.allowed);
    let probe = run(&*store, &spend(0)).await;
    assert_eq!(probe.remaining, 10, "{}: 80 * 0.75 + 30 = 90", store.name());
    // Up to a weighted 99 passes (floor(99) < 100); 101 does not.
    assert!(run(&*store, &spend(9)).await.allowed);
    assert!(
        run(&*store, &spend(1)).await.allowed,
        "{}: weighted 100 after",
        store.name()
    );
    assert!(!run(&*store, &spend(1)).await.allowed, "{}", store.name());
}

async fn boundary_burst_only_passes_fixed_window(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    for (algorithm, expected) in [
        (Algorithm::FixedWindow, 20),
        (Algorithm::SlidingWindow, 10),
        (Algorithm::SlidingLog, 10),
    ] {
        let key = unique_key("burst");
        let c = check(&key, algorithm, 10, "10s", 1);
        let mut allowed = 0;
        clock.set_us(T0 + 10 * SEC - MS);
        for _ in 0..20 {
            allowed += run(&*store, &c).await.allowed as usize;
        }
        clock.set_us(T0 + 10 * SEC);
        for _ in 0..20 {
            allowed += run(&*store, &c).await.allowed as usize;
        }
        assert_eq!(allowed, expected, "{} {algorithm}", store.name());
    }
}

async fn retry_after_is_exact_in_every_store_and_algorithm(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    for algorithm in Algorithm::RATES {
        for cost in [0, 1, 3] {
            let key = unique_key("retry");
            let start = T0 + 3 * SEC + 250 * MS;
            clock.set_us(start);
            assert!(
                run(&*store, &check(&key, algorithm, 5, "2s", 5))
                    .await
                    .allowed
            );
            let c = check(&key, algorithm, 5, "2s", cost);
            let denied = run(&*store, &c).await;
            assert!(!denied.allowed, "{} {algorithm} cost {cost}", store.name());
            let retry_ms = denied.retry_after_us.div_ceil(MS);
            // One millisecond early is still denied (and consumes nothing)...
            clock.set_us(start + (retry_ms - 1) * MS);
            assert!(
                !run(&*store, &c).await.allowed,
                "{} {algorithm} cost {cost} early",
                store.name()
            );
            // ...and on time passes.
            clock.set_us(start + retry_ms * MS);
            assert!(
                run(&*store, &c).await.allowed,
                "{} {algorithm} cost {cost} at {retry_ms}ms",
                store.name()
            );
        }
    }
}

async fn state_expires_and_reset_after_says_when(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    for algorithm in Algorithm::RATES {
        let key = unique_key("expiry");
        clock.set_us(T0 + 100 * MS);
        let spent = run(&*store, &check(&key, algorithm, 4, "1s", 4)).await;
        assert_eq!(spent.remaining, 0);
        assert!(spent.reset_after_us > 0);
        clock.set_us(T0 + 100 * MS + spent.reset_after_us);
        let fresh = run(&*store, &check(&key, algorithm, 4, "1s", 0)).await;
        assert_eq!(
            (fresh.remaining, fresh.reset_after_us),
            (4, 0),
            "{} {algorithm}: full capacity after reset_after",
            store.name()
        );
    }
}

async fn same_key_under_other_rules_never_shares_state(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let key = unique_key("shared {braces}\nand spaces ü");
    for algorithm in Algorithm::RATES {
        assert!(
            run(&*store, &check(&key, algorithm, 1, "1m", 1))
                .await
                .allowed
        );
        assert!(
            !run(&*store, &check(&key, algorithm, 1, "1m", 1))
                .await
                .allowed
        );
        assert!(
            run(&*store, &check(&key, algorithm, 1, "2m", 1))
                .await
                .allowed,
            "{algorithm} other window"
        );
    }
}

async fn a_large_cost_on_the_sliding_log_is_one_entry(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let key = unique_key("big");
    let c = check(&key, Algorithm::SlidingLog, 100_000, "1m", 100_000);
    let o = run(&*store, &c).await;
    assert_eq!((o.allowed, o.remaining), (true, 0), "{}", store.name());
    let denied = run(
        &*store,
        &check(&key, Algorithm::SlidingLog, 100_000, "1m", 1),
    )
    .await;
    assert_eq!(denied.retry_after_us, 60 * SEC);
}

async fn lowering_the_limit_of_a_spent_key_reports_zero_remaining(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    // A policy's limit keeps its state when lowered, and so does an inline
    // window; an inline bucket's state is its rule's (its key holds limit
    // and burst), so a lowered one starts afresh.
    for algorithm in Algorithm::RATES {
        for policy in [None, Some("api")] {
            if policy.is_none() && algorithm.has_burst() {
                continue;
            }
            let key = unique_key("lowered");
            let named = |c: Check| Check {
                policy: policy.map(Into::into),
                ..c
            };
            let spent = run(&*store, &named(check(&key, algorithm, 10, "1m", 10))).await;
            assert!(spent.allowed);
            let lowered = run(&*store, &named(check(&key, algorithm, 5, "1m", 1))).await;
            assert!(!lowered.allowed, "{} {algorithm} {policy:?}", store.name());
            assert_eq!(lowered.remaining, 0, "{} {algorithm}", store.name());
        }
    }
}
