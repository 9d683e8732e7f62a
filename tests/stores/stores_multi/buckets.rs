//! Reloads and upgrades of bucket state (token_bucket, gcra): keys written
//! by the previous version, and a lowered limit's usage outliving the
//! writer's TTL. Part of `tests/stores/stores_multi.rs`.

use super::*;

/// A Redis store on `clock`, and the Redis key of `limit` checked on `key`.
async fn redis_and_key(
    server: &RedisServer,
    clock: &ManualClock,
    key: &str,
    limit: &Limit,
) -> (RedisStore, String) {
    let store = RedisStore::connect(redis_options(server, clock, 60_000)).unwrap();
    store.ping().await.unwrap();
    let redis_key = store.limit_key(
        &check(key, Some("api"), std::slice::from_ref(limit), 0),
        limit,
    );
    (store, redis_key)
}

/// A bucket written by the previous version (tokens *left* in field `t`)
/// continues from where it was after the upgrade, exactly as the Rust
/// functions do from the same usage, and moves to the new format (`u`) on
/// its next spending write. A `t` beside a `u` was written by an instance
/// of the previous version during a rolling upgrade, after this version
/// last wrote (this version deletes `t`), so it wins.
#[tokio::test]
async fn a_token_bucket_of_the_previous_version_continues_after_the_upgrade() {
    use ratekeeper::domain::algorithms::State;
    use ratekeeper::domain::algorithms::token_bucket::{Bucket, TokenBucketState};

    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let bucket = limit("burst", Algorithm::TokenBucket, 10, SEC);
    for stale_u in [None, Some("9")] {
        let key = unique_key("tb-upgrade");
        let (store, redis_key) = redis_and_key(&server, &clock, &key, &bucket).await;
        // 3 of 10 left, credited up to 150 ms ago: one more token earned.
        let credited = (T0 - 150 * MS).to_string();
        let mut fields = vec!["HSET", &redis_key, "t", "3", "a", &credited];
        if let Some(u) = stale_u {
            fields.extend(["u", u]);
        }
        server.cli(&fields);
        let mut rust = State::TokenBucket(TokenBucketState {
            bucket: Some(Bucket {
                used: 7,
                credited_at_us: T0 - 150 * MS,
            }),
        });
        let spend = check(&key, Some("api"), std::slice::from_ref(&bucket), 1);
        let look = check(&key, Some("api"), std::slice::from_ref(&bucket), 0);
        let what = format!("u={stale_u:?}");
        let probe = run(&store, &look).await;
        assert_eq!(probe[0], rust.apply(&bucket.rule, T0, 0), "{what}");
        assert_eq!(probe[0].remaining, 4, "{what}: not a full bucket");
        let spent = run(&store, &spend).await;
        assert_eq!(spent[0], rust.apply(&bucket.rule, T0, 1), "{what}");
        assert_eq!(spent[0].remaining, 3, "{what}");
        let fields = server.cli(&["HGETALL", &redis_key]);
        let mut fields: Vec<(&str, &str)> = fields
            .lines()
            .collect::<Vec<_>>()
            .chunks(2)
            .map(|pair| (pair[0], pair[1]))
            .collect();
        fields.sort();
        let expect_a = (T0 - 50 * MS).to_string();
        let interval = (SEC / 10).to_string();
        assert_eq!(
            fields,
            [("a", expect_a.as_str()), ("i", &interval), ("u", "7")],
            "{what}: new format"
        );
        for step in [50 * MS, 100 * MS, 2 * SEC] {
            clock.set_us(T0 + step);
            let got = run(&store, &spend).await;
            assert_eq!(got[0], rust.apply(&bucket.rule, T0 + step, 1), "{what}");
        }
        clock.set_us(T0);
        store.quit().await;
    }
}

/// A gcra key written before the interval was kept (a plain TAT) reads as
/// written at the current interval, and the next spending write stores
/// `<tat>:<interval>:<used>`, which stays a small string.
#[tokio::test]
async fn a_plain_gcra_tat_of_the_previous_version_continues_after_the_upgrade() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    // A fixed name (the server is this test's own): MEMORY USAGE counts the
    // key, so a name of another length moves both sizes across allocation
    // classes. `unique_key`'s length depends on how many keys this process
    // made before, which differs between `cargo test` and nextest.
    let key = "gcra-upgrade-00000-00".to_string();
    let daily = limit("daily", Algorithm::Gcra, 10_000, DAY);
    let interval = DAY / 10_000;
    let (store, redis_key) = redis_and_key(&server, &clock, &key, &daily).await;
    // 8 000 of 10 000 used, written by the previous version.
    let plain = (T0 + 8_000 * interval).to_string();
    server.cli(&["SET", &redis_key, &plain]);
    let plain_bytes: u64 = server
        .cli(&["MEMORY", "USAGE", &redis_key])
        .parse()
        .unwrap();
    let probe = run(
        &store,
        &check(&key, Some("api"), std::slice::from_ref(&daily), 0),
    )
    .await;
    assert_eq!(probe[0].remaining, 2_000);
    let spent = run(
        &store,
        &check(&key, Some("api"), std::slice::from_ref(&daily), 1),
    )
    .await;
    assert_eq!(spent[0].remaining, 1_999);
    let value = server.cli(&["GET", &redis_key]);
    let tat = T0 + 8_001 * interval;
    assert_eq!(value, format!("{tat}:{interval}:8001"));
    let bytes: u64 = server
        .cli(&["MEMORY", "USAGE", &redis_key])
        .parse()
        .unwrap();
    println!("MEMORY USAGE: plain TAT {plain_bytes} B, with interval and units {bytes} B");
    // An integer-encoded TAT becomes a short embedded string: at most one
    // more 48-byte allocation (104 -> 152 B with this long key; 136 B, a
    // token bucket's hash, while the value stays under 29 characters).
    assert!(bytes <= plain_bytes + 48, "{plain_bytes} B -> {bytes} B");
    // Raised by an override to 100 000: 8 001 used, not 80 010.
    let raised = limit("daily", Algorithm::Gcra, 100_000, DAY);
    let probe = run(&store, &check(&key, Some("api"), &[raised], 0)).await;
    assert_eq!(probe[0].remaining, 100_000 - 8_001);
    store.quit().await;
}

/// A bucket's key lives as long as its writer's rule needs it (the time to
/// refill what was used). A lowered limit refills slower, so a read under
/// it lengthens the key's life, never shortens it: 8 of 10/day spent
/// expire after 0.8 day, but at 3/day they are not repaid until 2.67 days.
#[tokio::test]
async fn a_lowered_bucket_keeps_its_usage_past_the_writers_expiry() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
        for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
            clock.set_us(T0);
            let key = unique_key("lowered");
            let daily = |n| [limit("daily", algorithm, n, DAY)];
            let what = format!("{} {algorithm}", store.name());
            assert!(run(&*store, &check(&key, Some("api"), &daily(10), 8)).await[0].allowed);
            let lowered = run(&*store, &check(&key, Some("api"), &daily(3), 0)).await;
            assert_eq!(lowered[0].reset_after_us, 8 * (DAY / 3), "{what}");
            if store.name() == "redis" {
                let redis = RedisStore::connect(redis_options(&server, &clock, 60_000)).unwrap();
                let c = check(&key, Some("api"), &daily(3), 0);
                let redis_key = redis.limit_key(&c, &daily(3)[0]);
                let pttl: u64 = server.cli(&["PTTL", &redis_key]).parse().unwrap();
                assert!(pttl > 2 * DAY / MS, "{what}: PTTL {pttl} ms");
            }
            // Past the 0.8 day the 10/day writer needed: 2 of 8 repaid.
            clock.set_us(T0 + 9 * DAY / 10);
            let later = run(&*store, &check(&key, Some("api"), &daily(3), 1)).await;
            assert_eq!((later[0].allowed, later[0].remaining), (false, 0), "{what}");
            // The rule in force sets the pace: at 10/day all 8 were repaid
            // by 0.8 day (the longer life changes no answer).
            let back = run(&*store, &check(&key, Some("api"), &daily(10), 0)).await;
            assert_eq!(back[0].remaining, 10, "{what}");
        }
    }
}
