//! Settling a reservation afterwards through every store (embedded and
//! Redis) on a controlled clock: below it a refund, above it a spend past
//! the limit paid back as each algorithm recovers, the same answers as the
//! Rust twins, every limit of a policy on its own, the overdraft's bound,
//! the deny cache dropped, and on Redis a key that outlives its debt.

use crate::support;
use crate::support::LimiterExt;
use crate::support::StoreExt;
use ratekeeper::domain::Window;

use std::sync::Arc;

use ratekeeper::domain::algorithms::{State, apply_all, settle_all};
use ratekeeper::domain::{Algorithm, Check, Clock, Limit, ManualClock, Outcome, Rule};
use ratekeeper::store::Store;
use ratekeeper::store::redis::RedisStore;

use support::stores::redis_options;
use support::{RedisServer, unique_key};

for_each_store!(
    every_algorithm_settles_like_its_twin,
    a_policy_settles_each_limit_on_its_own,
    the_overdraft_stops_at_101_capacities,
    the_limiter_drops_cached_denials_on_settle,
);

// The scenarios share reset and refund's rule and helpers.
use crate::stores_adjust::{MS, SEC, T0, rule, spend, with_cost};

async fn settle(store: &dyn Store, check: &Check, reserved: u64, actual: u64) -> Vec<Outcome> {
    store
        .settle(&with_cost(check, reserved), actual)
        .await
        .unwrap()
        .outcomes
}

/// The LLM gateway's flow on every algorithm: a check of an estimate, a
/// settle below it, another above it that goes past the limit, then checks
/// denied until the key recovers, each answer the Rust twin's.
async fn every_algorithm_settles_like_its_twin(store: Arc<dyn Store>, clock: ManualClock) {
    for algorithm in Algorithm::RATES {
        let at = format!("{} {algorithm:?}", store.name());
        clock.set_us(T0);
        let r = rule(algorithm);
        let c = Check::single(unique_key("settle"), r, 0);
        let mut twin = [State::fresh(algorithm)];
        let now = |clock: &ManualClock| clock.now_us();

        let steps: [(u64, &str, u64, u64); 8] = [
            (0, "check", 3, 0),
            (100, "settle", 3, 1),
            (200, "check", 2, 0),
            (300, "settle", 2, 9),
            (400, "settle", 1, 1),
            (2_500, "check", 1, 0),
            (9_000, "check", 0, 0),
            (25_000, "check", 5, 0),
        ];
        for (ms, op, cost, actual) in steps {
            clock.set_us(T0 + ms * MS);
            let (got, want) = if op == "check" {
                (
                    spend(&*store, &c, cost).await,
                    apply_all(&mut twin, &[&r], now(&clock), cost),
                )
            } else {
                (
                    settle(&*store, &c, cost, actual).await,
                    settle_all(&mut twin, &[&r], now(&clock), cost, actual),
                )
            };
            assert_eq!(got, want, "{at}: {op} {cost}/{actual} at +{ms}ms");
        }
        // A key 7 past its limit: denied until the retry-after, to the
        // millisecond.
        clock.set_us(T0);
        let c = Check::single(unique_key("settle-retry"), r, 0);
        assert!(spend(&*store, &c, 5).await[0].allowed);
        let after = settle(&*store, &c, 5, 12).await[0];
        let denied = spend(&*store, &c, 1).await[0];
        assert!(!after.allowed && !denied.allowed, "{at}: past the limit");
        let retry = denied.retry_after_us.div_ceil(MS) * MS;
        clock.set_us(T0 + retry - MS);
        assert!(!spend(&*store, &c, 1).await[0].allowed, "{at}: 1 ms early");
        clock.set_us(T0 + retry);
        assert!(
            spend(&*store, &c, 1).await[0].allowed,
            "{at}: at retry_after"
        );
    }
}

/// A policy of two limits: a settle applies to each on its own, so one
/// limit's overdraft does not wait for the other, and the answer shows
/// both.
async fn a_policy_settles_each_limit_on_its_own(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let limit = |name: &str, algorithm, limit| Limit {
        name: name.into(),
        rule: Rule {
            algorithm,
            limit,
            window: Window::Length(60 * SEC),
            burst: limit,
        },
        scope: None,
        level: None,
    };
    let limits = vec![
        limit("minute", Algorithm::TokenBucket, 10),
        limit("daily", Algorithm::FixedWindow, 1_000),
    ];
    let mut c = Check::multi(unique_key("settle-policy"), limits.clone(), 0);
    c.policy = Some("llm".into());
    assert!(spend(&*store, &c, 4).await.iter().all(|o| o.allowed));
    let after = settle(&*store, &c, 4, 30).await;
    let rules: Vec<&Rule> = limits.iter().map(|l| &l.rule).collect();
    let mut twin = [
        State::fresh(Algorithm::TokenBucket),
        State::fresh(Algorithm::FixedWindow),
    ];
    apply_all(&mut twin, &rules, T0, 4);
    assert_eq!(after, settle_all(&mut twin, &rules, T0, 4, 30));
    assert!(!after[0].allowed, "the bucket owes 20: {after:?}");
    assert_eq!(after[0].retry_after_us, 21 * 6 * SEC);
    assert_eq!((after[1].allowed, after[1].remaining), (true, 970));
    // And back: a settle below the reservation refunds each limit.
    let back = settle(&*store, &c, 10, 0).await;
    assert_eq!(back, settle_all(&mut twin, &rules, T0, 10, 0));
    assert_eq!(back[1].remaining, 980);
}

/// However many settles come, a key uses at most 101 capacities: three
/// settles of 500 on a limit of 5 leave 505, so a token bucket of burst 5
/// refilling one unit per 2 s waits 501 refills for one unit, not 1 496.
async fn the_overdraft_stops_at_101_capacities(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    for algorithm in Algorithm::RATES {
        let r = rule(algorithm);
        let c = Check::single(unique_key("settle-cap"), r, 0);
        for _ in 0..3 {
            settle(&*store, &c, 0, 500).await;
        }
        let mut twin = [State::fresh(algorithm)];
        for _ in 0..3 {
            settle_all(&mut twin, &[&r], T0, 0, 500);
        }
        let look = spend(&*store, &c, 0).await;
        assert_eq!(look, apply_all(&mut twin, &[&r], T0, 0), "{algorithm:?}");
        if algorithm.has_burst() {
            // 505 used of 5: 501 refills of 2 s until one unit is back.
            assert_eq!(look[0].retry_after_us, 501 * 2 * SEC, "{algorithm:?}");
        }
    }
}

/// A denial the limiter cached is dropped by a settle below the
/// reservation, which made room.
async fn the_limiter_drops_cached_denials_on_settle(store: Arc<dyn Store>, clock: ManualClock) {
    use ratekeeper::deny_cache::DenyCache;
    use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
    use ratekeeper::metrics::Metrics;
    use std::time::Duration;

    clock.set_us(T0);
    let policy = FailurePolicy {
        mode: FailureMode::Open,
        closed_retry_after: Duration::from_secs(1),
    };
    let limiter = Arc::new(
        Limiter::new(store, policy, Arc::new(Metrics::new()))
            .with_deny_cache(DenyCache::new(100, Arc::new(clock.clone()))),
    );
    limiter.probe().await;
    let c = Check::single(unique_key("settle-cache"), rule(Algorithm::FixedWindow), 5);
    assert!(limiter.check(&c).await.unwrap().allowed);
    // Denied, and cached until the window ends.
    assert!(!limiter.check(&c).await.unwrap().allowed);
    assert!(!limiter.check(&c).await.unwrap().allowed);
    let settled = limiter.settle(&c, 2, None).await.unwrap().decision;
    assert!(settled.allowed, "3 of 5 used after the settle");
    assert!(limiter.check(&with_cost(&c, 2)).await.unwrap().allowed);
}

/// On Redis the key of a debt lives until the debt is paid: its PTTL
/// covers the reset a cost-0 check reports after a settle far past the
/// limit, for every algorithm.
#[tokio::test]
async fn a_settled_key_outlives_its_debt_on_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0 + 3 * SEC);
    let store = RedisStore::connect(redis_options(&server, &clock, 0)).unwrap();
    store.ping().await.unwrap();
    for algorithm in Algorithm::RATES {
        let key = unique_key("settle-pttl");
        let c = Check::single(&key, rule(algorithm), 0);
        assert!(spend(&store, &c, 5).await[0].allowed);
        let after = settle(&store, &c, 5, 400).await;
        assert!(!after[0].allowed);
        let reset_ms = after[0].reset_after_us / MS;
        let name = store.key_for(&c);
        let pttl: i64 = server.cli(&["PTTL", &name]).trim().parse().unwrap();
        assert!(
            pttl + 1_000 >= reset_ms as i64,
            "{algorithm:?}: PTTL {pttl} ms, debt until {reset_ms} ms"
        );
    }
    store.quit().await;
}

/// A token bucket written by the previous version (tokens *left* in `t`)
/// is settled from the usage it holds, as the Rust twin settles it: the
/// raised burst of the spend must not read `t` as far more used.
#[tokio::test]
async fn a_token_bucket_of_the_previous_version_settles_from_its_usage() {
    use ratekeeper::domain::algorithms::token_bucket::{Bucket, TokenBucketState};

    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 0)).unwrap();
    store.ping().await.unwrap();
    let r = Rule {
        algorithm: Algorithm::TokenBucket,
        limit: 10,
        window: Window::Length(SEC),
        burst: 10,
    };
    let key = unique_key("settle-tb-upgrade");
    // An inline bucket's name ends with its limit and burst.
    let redis_key = format!("rk:{{{key}}}:tb:1000:10:10");
    // 3 of 10 left, credited up to 150 ms ago: one more token earned.
    let credited = (T0 - 150 * MS).to_string();
    server.cli(&["HSET", &redis_key, "t", "3", "a", &credited]);
    let mut twin = [State::TokenBucket(TokenBucketState {
        bucket: Some(Bucket {
            used: 7,
            credited_at_us: T0 - 150 * MS,
        }),
    })];
    let c = Check::single(&key, r, 0);
    let settled = settle(&store, &c, 1, 6).await;
    assert_eq!(settled, settle_all(&mut twin, &[&r], T0, 1, 6));
    assert_eq!(
        settled[0].retry_after_us,
        2 * 100 * MS - 50 * MS,
        "6 used, 5 more: 1 owed, and the next token 50 ms into its interval"
    );
    store.quit().await;
}
