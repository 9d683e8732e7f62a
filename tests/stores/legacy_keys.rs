//! `redis.legacy_keys`: a rolling upgrade from the layout that kept inline
//! buckets under `<prefix>{<key>}:<tag>:<window>` must not over-admit. An
//! instance of that version is played by the one script on the old name,
//! exactly the call it sent; the new instances are Redis stores with the
//! option on and off. In each phase of the upgrade the instances together
//! admit exactly the limit, and without the option they would not.

use crate::support;
use crate::support::StoreExt;

use ratekeeper::domain::{Algorithm, Check, ManualClock, Rule};
use ratekeeper::store::Store;
use ratekeeper::store::redis::RedisStore;
use ratekeeper::store::scripts::OPS;

use support::stores::redis_options;
use support::{RedisServer, unique_key};

const T0: u64 = 1_700_000_000_000_000;
const LIMIT: u64 = 10;

fn rule(algorithm: Algorithm) -> Rule {
    Rule::with_length(algorithm, LIMIT, 60_000_000, LIMIT)
}

/// One check of cost 1 by an instance of the previous version: the script
/// on the old key name (wire.rs's ARGV: now, padding, channel, then one
/// check of one limit, nothing to publish, no lease).
fn old_instance_allows(server: &RedisServer, key: &str, algorithm: Algorithm) -> bool {
    let old_name = format!("rk:{{{key}}}:{}:60000", algorithm.key_tag());
    let now = T0.to_string();
    let (limit, window) = (LIMIT.to_string(), 60_000_000.to_string());
    let reply = server.cli(&[
        "EVAL",
        OPS.as_str(),
        "1",
        &old_name,
        &now,
        "60000",
        "",
        "1",
        "1",
        "1",
        "",
        "",
        "",
        algorithm.key_tag(),
        &limit,
        &window,
        &limit,
    ]);
    let values: Vec<&str> = reply.lines().collect();
    assert_eq!(values[0], "1", "the old call failed: {reply}");
    values[3] == "1"
}

async fn store(server: &RedisServer, clock: &ManualClock, legacy_keys: bool) -> RedisStore {
    let mut options = redis_options(server, clock, 60_000);
    options.settings.legacy_keys = legacy_keys;
    let store = RedisStore::connect(options).unwrap();
    store.ping().await.unwrap();
    store
}

async fn allows(store: &RedisStore, key: &str, algorithm: Algorithm) -> bool {
    let answer = store.check(&Check::single(key, rule(algorithm), 1)).await;
    answer.unwrap()[0].allowed
}

#[tokio::test]
async fn every_phase_of_a_rolling_upgrade_admits_exactly_the_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let legacy = store(&server, &clock, true).await;
    let plain = store(&server, &clock, false).await;
    for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
        // Phase 1: old instances and new ones with legacy_keys on.
        let key = unique_key("phase1");
        let old = (0..6)
            .filter(|_| old_instance_allows(&server, &key, algorithm))
            .count();
        let mut new = 0;
        while allows(&legacy, &key, algorithm).await {
            new += 1;
        }
        assert_eq!((old, new), (6, 4), "{algorithm}: phase 1");
        assert!(
            !old_instance_allows(&server, &key, algorithm),
            "{algorithm}: the old instance saw the new one's spend"
        );

        // Phase 2: legacy_keys on and off side by side (the second rollout,
        // after what old instances spent has refilled: a fresh key here).
        let key = unique_key("phase2");
        for _ in 0..3 {
            assert!(allows(&legacy, &key, algorithm).await);
        }
        let mut off = 0;
        while allows(&plain, &key, algorithm).await {
            off += 1;
        }
        assert_eq!(off, 7, "{algorithm}: phase 2");
        assert!(
            !allows(&legacy, &key, algorithm).await,
            "{algorithm}: legacy saw the plain spend"
        );

        // Without the option an upgrade over-admits: the old name is never read.
        let key = unique_key("unsafe");
        let old = (0..6)
            .filter(|_| old_instance_allows(&server, &key, algorithm))
            .count();
        let mut new = 0;
        while allows(&plain, &key, algorithm).await {
            new += 1;
        }
        assert_eq!(
            (old, new),
            (6, 10),
            "{algorithm}: the reason for the option"
        );
    }
    legacy.quit().await;
    plain.quit().await;
}

/// A reset through an instance with the option clears both names, so an
/// old instance starts afresh too.
#[tokio::test]
async fn a_reset_under_legacy_keys_clears_the_old_name_too() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let legacy = store(&server, &clock, true).await;
    let key = unique_key("reset");
    for _ in 0..LIMIT {
        assert!(old_instance_allows(&server, &key, Algorithm::Gcra));
    }
    assert!(!allows(&legacy, &key, Algorithm::Gcra).await);
    legacy
        .reset(&Check::single(&key, rule(Algorithm::Gcra), 1))
        .await
        .unwrap();
    assert!(old_instance_allows(&server, &key, Algorithm::Gcra));
    assert!(allows(&legacy, &key, Algorithm::Gcra).await);
    legacy.quit().await;
}
