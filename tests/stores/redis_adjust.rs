//! What only Redis has for reset and refund: the scripts as
//! `ratekeeper script` prints them, their reload after Redis lost its
//! script cache, and multi-limit keys on a cluster (one slot per check).

use crate::support;
use crate::support::StoreExt;
use crate::support::stores::redis_settings;
use ratekeeper::domain::Window;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::domain::{Algorithm, Check, Limit, ManualClock, Rule};
use ratekeeper::store::Store;
use ratekeeper::store::redis::{RedisSettings, RedisStore};
use ratekeeper::store::scripts;

use support::binary::ratekeeper;
use support::stores::redis_options;
use support::{RedisCluster, RedisServer, cached_scripts, unique_key};

const T0: u64 = 1_767_225_600_000_000;

fn limits() -> Vec<Limit> {
    let limit = |name: &str, algorithm, window_us| Limit {
        name: name.into(),
        rule: Rule {
            algorithm,
            limit: 3,
            window: Window::Length(window_us),
            burst: 3,
        },
        scope: None,
        level: None,
    };
    vec![
        limit("a", Algorithm::SlidingLog, 60_000_000),
        limit("b", Algorithm::TokenBucket, 3_600_000_000),
        limit("c", Algorithm::FixedWindow, 86_400_000_000),
    ]
}

fn check(key: &str, cost: u64) -> Check {
    let mut c = Check::multi(key, limits(), cost);
    c.policy = Some("api".into());
    c
}

#[test]
fn the_script_subcommand_prints_the_one_script() {
    let out = ratekeeper().arg("script").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed.trim_end(), scripts::OPS.trim_end());
    // Reset and refund are operations of it, their numbers generated.
    for line in [
        "local OP_CHECK = 1\n",
        "local OP_RESET = 2\n",
        "local OP_REFUND = 3\n",
        "local OP_SETTLE = 4\n",
        "local OP_RELEASE = 5\n",
        "local OP_RENEW = 6\n",
        "local OP_GIVE_BACK = 7\n",
    ] {
        assert!(printed.contains(line), "{line}");
    }
    assert!(printed.contains(
        "local give_back_by_tag = {fw = fixed_window_give_back, sw = sliding_window_give_back}\n"
    ));
    assert!(printed.contains("local function reset_all(") && printed.contains("refund_by_tag"));
}

/// `ratekeeper script --function` prints the library the store loads, and
/// a real Redis takes it and answers a check by FCALL (as bench/ceiling.sh
/// calls it).
#[test]
fn the_script_subcommand_prints_the_function_library_redis_loads() {
    let out = ratekeeper()
        .args(["script", "--function"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let (name, code) = &*scripts::LIBRARY;
    assert_eq!(printed, *code);
    let server = RedisServer::start();
    assert_eq!(
        server.cli(&["FUNCTION", "LOAD", &printed]).trim(),
        name.as_str()
    );
    // ARGV as wire.rs writes it: now, padding, channel, then one check of
    // one fixed-window limit (3 a minute) at cost 1.
    let reply = server.cli(&[
        "FCALL",
        name,
        "1",
        "rk:{cli}:fw:60000",
        "",
        "0",
        "",
        "1",
        "1",
        "1",
        "",
        "",
        "",
        "fw",
        "3",
        "60000000",
        "3",
    ]);
    let values: Vec<&str> = reply.lines().collect();
    assert_eq!(values[..2], ["1", "-1"], "{reply}");
    // The third: Redis's TIME in microseconds, the check's store time.
    assert!(
        values[2].parse::<u64>().unwrap() > 1_700_000_000_000_000,
        "{reply}"
    );
    assert_eq!(values[3..5], ["1", "2"], "{reply}");
}

/// SCRIPT FLUSH (what a restart or failover does): the next reset and
/// refund still work, in one extra round trip, and leave the scripts cached.
#[tokio::test]
async fn reset_and_refund_survive_a_flushed_script_cache() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 60_000)).unwrap();
    store.ping().await.unwrap();
    let key = unique_key("flush");
    store.check(&check(&key, 2)).await.unwrap();
    // Both forms gone: the function (FCALL) is loaded again, and the call
    // meanwhile finds the script cache empty (NOSCRIPT, then EVAL).
    let flush = || {
        server.cli(&["FUNCTION", "FLUSH"]);
        server.cli(&["SCRIPT", "FLUSH"]);
    };
    flush();
    let refunded = store.refund(&check(&key, 1)).await.unwrap();
    assert_eq!(
        refunded.iter().map(|o| o.remaining).collect::<Vec<_>>(),
        [2, 2, 2]
    );
    flush();
    let reset = store.reset(&check(&key, 0)).await.unwrap();
    assert!(
        reset
            .iter()
            .all(|o| o.remaining == 3 && o.reset_after_us == 0)
    );
    // The reset's EVAL cached the one script again (the refund's was
    // flushed after): the next refund finds it.
    assert_eq!(cached_scripts(server.port), 1);
    store.refund(&check(&key, 1)).await.unwrap();
    assert_eq!(cached_scripts(server.port), 1);
    store.quit().await;
}

/// On a cluster, each check's keys share its hash tag: reset and refund of
/// three limits run as one script on the node owning the slot, for keys
/// spread over every primary.
#[tokio::test]
async fn reset_and_refund_of_several_limits_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect(RedisSettings {
        timeout: Duration::from_secs(5),
        reconnect_max_delay: Duration::from_millis(200),
        ..redis_settings(cluster.url())
    })
    .unwrap();
    assert!(store.wait_connected(Duration::from_secs(10)).await);
    store.ping().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    for i in 0..30 {
        let key = unique_key(&format!("c{i}"));
        assert!(
            store
                .check(&check(&key, 3))
                .await
                .unwrap()
                .iter()
                .all(|o| o.allowed)
        );
        let refunded = store.refund(&check(&key, 2)).await.unwrap();
        assert!(refunded.iter().all(|o| o.remaining == 2), "{refunded:?}");
        let reset = store.reset(&check(&key, 0)).await.unwrap();
        assert!(reset.iter().all(|o| o.remaining == 3), "{reset:?}");
    }
}

/// A refund never makes a key expire before its usage would: after a spend
/// late in one window, a refund early in the next and a spend after it,
/// the key's PTTL still covers the reset a cost-0 check reports. (The
/// sliding window's refund used to roll the key to the new window and keep
/// the old expiry, so the key died a window early and the next window saw
/// no previous count.)
#[tokio::test]
async fn a_refund_in_the_next_window_keeps_the_key_alive_as_long_as_its_usage() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0 + 9_000_000);
    let store = RedisStore::connect(redis_options(&server, &clock, 0)).unwrap();
    store.ping().await.unwrap();
    for algorithm in [
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ] {
        clock.set_us(T0 + 9_000_000);
        let key = unique_key("pttl");
        let rule = Rule {
            algorithm,
            limit: 10,
            window: Window::Length(10_000_000),
            burst: 10,
        };
        let limit = Limit {
            name: "l".into(),
            rule,
            scope: None,
            level: None,
        };
        let check = |cost| Check::multi(&key, vec![limit.clone()], cost);
        assert!(store.check(&check(2)).await.unwrap()[0].allowed);
        clock.set_us(T0 + 10_001_000);
        store.refund(&check(1)).await.unwrap();
        assert!(store.check(&check(1)).await.unwrap()[0].allowed);
        let reset_ms = store.check(&check(0)).await.unwrap()[0].reset_after_us / 1_000;
        let name = store.key_for(&check(0));
        let pttl: i64 = server.cli(&["PTTL", &name]).trim().parse().unwrap();
        // Real time passed since the PEXPIRE: a second is plenty.
        assert!(
            pttl + 1_000 >= reset_ms as i64,
            "{algorithm:?}: PTTL {pttl} ms, usage until {reset_ms} ms"
        );
    }
    store.quit().await;
}

/// A policy's token bucket keeps its key when its limit changes (an inline
/// one does not: its key holds the limit), so during a rolling reload two
/// rules share it: a refund by the rule that refills faster must not
/// shorten the expiry the slower one's spend set (its usage would vanish
/// before it refilled).
#[tokio::test]
async fn a_token_bucket_refund_never_shortens_a_shared_key_s_expiry() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 0)).unwrap();
    store.ping().await.unwrap();
    let key = unique_key("shared");
    let bucket = |limit| Limit {
        name: "l".into(),
        rule: Rule {
            algorithm: Algorithm::TokenBucket,
            limit,
            window: Window::Length(60_000_000),
            burst: 10,
        },
        scope: None,
        level: None,
    };
    let in_policy = |limit, cost| Check {
        policy: Some("api".into()),
        ..Check::multi(&key, vec![bucket(limit)], cost)
    };
    // 1 a minute: 10 used take 10 minutes to refill.
    assert!(store.check(&in_policy(1, 10)).await.unwrap()[0].allowed);
    // 600 a minute (10 per second) gives one back.
    store.refund(&in_policy(600, 1)).await.unwrap();
    let name = format!("rk:{{{key}}}:p:api:l:tb:60000");
    let pttl: i64 = server.cli(&["PTTL", &name]).trim().parse().unwrap();
    assert!(pttl > 590_000, "PTTL {pttl} ms: shortened by the refund");
    store.quit().await;
}
