//! Checks of several limits against every store (embedded and Redis), on a
//! controlled clock: all or nothing, state namespaced by policy and limit,
//! and one cluster slot per check. (`tests/stores/stores.rs` has the single-limit
//! scenarios; `tests/stores/multi_parity.rs` the random ones.)

use crate::support;
use crate::support::StoreExt;
use ratekeeper::domain::Window;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::domain::{Algorithm, Check, Limit, ManualClock, Outcome, Rule};
use ratekeeper::store::Store;
use ratekeeper::store::redis::{RedisSettings, RedisStore};
use support::stores::{redis_options, redis_settings, stores};
use support::{RedisServer, unique_key};

for_each_store!(
    a_denied_check_spends_none_of_its_limits,
    policies_and_inline_checks_never_share_counters,
    a_denied_check_leaves_a_sliding_log_as_it_was,
    a_changed_limit_keeps_its_counters_and_a_changed_window_starts_afresh,
);

const T0: u64 = 1_767_225_600_000_000; // a window boundary for every window used here
const SEC: u64 = 1_000_000;
const MS: u64 = 1_000;
const HOUR: u64 = 3_600 * SEC;
const DAY: u64 = 24 * HOUR;

fn limit(name: &str, algorithm: Algorithm, limit: u64, window_us: u64) -> Limit {
    Limit {
        name: name.into(),
        rule: Rule {
            algorithm,
            limit,
            window: Window::Length(window_us),
            burst: limit,
        },
        scope: None,
        level: None,
    }
}

fn check(key: &str, policy: Option<&str>, limits: &[Limit], cost: u64) -> Check {
    let mut check = Check::multi(key, limits.to_vec(), cost);
    check.policy = policy.map(Arc::from);
    check
}

async fn run(store: &dyn Store, check: &Check) -> Vec<Outcome> {
    store.check(check).await.unwrap()
}

/// envoyproxy/ratelimit #1060: with 2/hour and 100/day on one key, requests
/// denied by the hourly limit used to spend the daily one. Here, after two
/// allowed checks, ten denied ones leave the daily limit spent by exactly
/// two, for every algorithm pair, inline and under a policy.
async fn a_denied_check_spends_none_of_its_limits(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0 + 5 * SEC);
    for (hourly, daily) in [
        (Algorithm::FixedWindow, Algorithm::FixedWindow),
        (Algorithm::SlidingWindow, Algorithm::SlidingLog),
        (Algorithm::Gcra, Algorithm::TokenBucket),
        (Algorithm::TokenBucket, Algorithm::Gcra),
        (Algorithm::SlidingLog, Algorithm::SlidingWindow),
    ] {
        for policy in [None, Some("api")] {
            let key = unique_key("envoy-1060");
            let limits = [
                limit("hourly", hourly, 2, HOUR),
                limit("daily", daily, 100, DAY),
            ];
            let what = format!("{} {hourly}+{daily} {policy:?}", store.name());
            for _ in 0..2 {
                let o = run(&*store, &check(&key, policy, &limits, 1)).await;
                assert!(o.iter().all(|o| o.allowed), "{what}");
            }
            for _ in 0..10 {
                let o = run(&*store, &check(&key, policy, &limits, 1)).await;
                assert!(!o[0].allowed && o[1].allowed, "{what}: {o:?}");
                assert_eq!(o[1].remaining, 98, "{what}: as it is, nothing spent");
            }
            // The daily limit alone, in the same namespace: spent twice.
            let probe = run(&*store, &check(&key, policy, &limits[1..], 0)).await;
            assert_eq!(probe[0].remaining, 98, "{what}");
        }
    }
}

async fn policies_and_inline_checks_never_share_counters(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    let key = unique_key("shared");
    let limits = [
        limit("burst", Algorithm::Gcra, 1, SEC),
        limit("daily", Algorithm::FixedWindow, 10, DAY),
    ];
    let spend = |policy| check(&key, policy, &limits, 1);
    let name = store.name();
    // Each namespace admits its first check and denies its second.
    for policy in [Some("api"), Some("web"), None] {
        assert!(
            run(&*store, &spend(policy)).await[0].allowed,
            "{name} {policy:?}"
        );
        assert!(
            !run(&*store, &spend(policy)).await[0].allowed,
            "{name} {policy:?}"
        );
    }
    // The same limits renamed within a policy are other counters too.
    let renamed = [limit("b2", Algorithm::Gcra, 1, SEC)];
    assert!(run(&*store, &check(&key, Some("api"), &renamed, 1)).await[0].allowed);
    // Each daily counter was spent once.
    for policy in [Some("api"), Some("web"), None] {
        let probe = run(&*store, &check(&key, policy, &limits[1..], 0)).await;
        assert_eq!(probe[0].remaining, 9, "{name} {policy:?}");
    }
}

/// A check of several limits that one limit denies writes nothing, not
/// even a sliding log's trim of expired entries: a clock stepping back
/// must still see them (the Lua's dry pass used to drop them, so Redis and
/// the Rust functions then disagreed).
async fn a_denied_check_leaves_a_sliding_log_as_it_was(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let key = unique_key("log");
    let limits = [
        limit("log", Algorithm::SlidingLog, 2, 7 * MS),
        limit("hourly", Algorithm::FixedWindow, 2, HOUR),
    ];
    let c = check(&key, Some("p"), &limits, 1);
    let name = store.name();
    for at in [T0, T0 + 5 * MS] {
        clock.set_us(at);
        assert!(run(&*store, &c).await.iter().all(|o| o.allowed), "{name}");
    }
    // The first entry has left the log's window (the key lives on for
    // the second); the hourly limit denies.
    clock.set_us(T0 + 8 * MS);
    let denied = run(&*store, &c).await;
    assert!(
        denied[0].allowed && !denied[1].allowed,
        "{name}: {denied:?}"
    );
    // Back to 1 ms after the first admission: both entries count.
    clock.set_us(T0 + MS);
    let probe = run(&*store, &check(&key, Some("p"), &limits[..1], 0)).await;
    assert_eq!((probe[0].allowed, probe[0].remaining), (false, 0), "{name}");
}

/// Every key of a check hashes to one cluster slot (the client key's hash
/// tag), inline and under a policy, whatever the key holds.
#[tokio::test]
async fn the_keys_of_one_check_share_a_cluster_slot() {
    let store = RedisStore::connect(RedisSettings {
        timeout: Duration::from_millis(10),
        reconnect_max_delay: Duration::from_millis(10),
        ..redis_settings("redis://127.0.0.1:1")
    })
    .unwrap();
    let limits = [
        limit("burst", Algorithm::TokenBucket, 10, SEC),
        limit("minute", Algorithm::SlidingLog, 100, 60 * SEC),
        limit("daily", Algorithm::FixedWindow, 10_000, DAY),
        limit("daily.gcra", Algorithm::Gcra, 10_000, DAY),
    ];
    for key in [
        "user:42", "a}b", "{x}y", "ü", "k_acme", "}x", "}", "{}", "x{",
    ] {
        for policy in [None, Some("api")] {
            let c = check(key, policy, &limits, 1);
            let keys: Vec<String> = limits.iter().map(|l| store.limit_key(&c, l)).collect();
            let slots: Vec<u16> = keys
                .iter()
                .map(|k| fred::util::redis_keyslot(k.as_bytes()))
                .collect();
            assert!(slots.iter().all(|s| *s == slots[0]), "{keys:?} {slots:?}");
            let distinct: std::collections::HashSet<&String> = keys.iter().collect();
            assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        }
    }
    store.quit().await;
}

/// A policy's limit whose `limit` changes (a reload) keeps its counters,
/// for every algorithm: 8 of 10/day spent, lowered to 5/day it owes 3
/// (`remaining: 0`, denied), raised to 20/day it has 12 left. (gcra used to
/// keep its usage as time and read it through the new rate: 4 of 5, 16 of
/// 20.) A changed window is another counter and starts afresh.
async fn a_changed_limit_keeps_its_counters_and_a_changed_window_starts_afresh(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    for algorithm in Algorithm::RATES {
        let key = unique_key("reload");
        let daily = |n, window| [limit("daily", algorithm, n, window)];
        let what = format!("{} {algorithm}", store.name());
        let spent = run(&*store, &check(&key, Some("api"), &daily(10, DAY), 8)).await;
        assert!(spent[0].allowed, "{what}");
        let lowered = run(&*store, &check(&key, Some("api"), &daily(5, DAY), 1)).await;
        assert_eq!(
            (lowered[0].allowed, lowered[0].remaining),
            (false, 0),
            "{what}"
        );
        let raised = run(&*store, &check(&key, Some("api"), &daily(20, DAY), 0)).await;
        assert_eq!(
            (raised[0].allowed, raised[0].remaining),
            (true, 12),
            "{what}"
        );
        // Spending under the raised limit, then back: 9 of 10 used.
        let more = run(&*store, &check(&key, Some("api"), &daily(20, DAY), 1)).await;
        assert_eq!(more[0].remaining, 11, "{what}");
        let back = run(&*store, &check(&key, Some("api"), &daily(10, DAY), 0)).await;
        assert_eq!(back[0].remaining, 1, "{what}");
        let other_window = run(&*store, &check(&key, Some("api"), &daily(5, HOUR), 0)).await;
        assert_eq!(other_window[0].remaining, 5, "{what}: a fresh counter");
    }
}

#[path = "stores_multi/buckets.rs"]
mod buckets;
