//! The script as a Redis function (`src/store/redis/function.rs`): checks
//! go by FCALL once the library is loaded, survive its loss (a restart
//! without persistence, `FUNCTION FLUSH`) with the same answers while it is
//! loaded again, and go by EVALSHA for a user whose ACL refuses functions.

use crate::support;
use crate::support::StoreExt;

use ratekeeper::domain::{Algorithm, Check, ManualClock, Rule};
use ratekeeper::store::Store;
use ratekeeper::store::redis::RedisStore;
use ratekeeper::store::scripts::LIBRARY;

use support::stores::redis_options;
use support::{RedisServer, unique_key};

const T0: u64 = 1_700_000_000_000_000;

/// Calls of `command` (fcall, evalsha, eval) since the last CONFIG RESETSTAT.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

fn check(key: &str) -> Check {
    Check::single(
        key,
        Rule::with_length(Algorithm::FixedWindow, 3, 60_000_000, 3),
        1,
    )
}

async fn allowed(store: &RedisStore, key: &str) -> bool {
    store.check(&check(key)).await.unwrap()[0].allowed
}

#[tokio::test]
async fn checks_go_by_fcall_and_survive_the_library_s_loss() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 60_000)).unwrap();
    store.ping().await.unwrap();
    let (name, _) = &*LIBRARY;
    assert!(server.cli(&["FUNCTION", "LIST"]).contains(name.as_str()));

    let key = unique_key("fcall");
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(allowed(&store, &key).await);
    assert_eq!((calls(&server, "fcall"), calls(&server, "evalsha")), (1, 0));

    // Lost, as after a restart without persistence: the next calls find it
    // missing and go by EVALSHA, answered from the same counts, until the
    // probe (a ping) loads it again.
    server.cli(&["FUNCTION", "FLUSH"]);
    assert!(allowed(&store, &key).await);
    assert!(allowed(&store, &key).await);
    assert!(
        !allowed(&store, &key).await,
        "3 of 3 spent across the reload"
    );
    assert!(!server.cli(&["FUNCTION", "LIST"]).contains(name.as_str()));
    store.ping().await.unwrap();
    assert!(server.cli(&["FUNCTION", "LIST"]).contains(name.as_str()));
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(!allowed(&store, &key).await);
    assert_eq!(calls(&server, "fcall"), 1, "FCALL again after the reload");
    store.quit().await;
}

/// Refused at the load (`-function`), or only at the first FCALL
/// (`-fcall`): either way every check is answered, by EVALSHA.
#[tokio::test]
async fn a_user_whose_acl_refuses_functions_gets_evalsha() {
    for (user, refused) in [("noload", "-function"), ("nocall", "-fcall")] {
        let server = RedisServer::start();
        server.cli(&[
            "ACL", "SETUSER", user, "on", ">secret", "~*", "&*", "+@all", refused,
        ]);
        let clock = ManualClock::new(T0);
        let mut options = redis_options(&server, &clock, 60_000);
        options.settings.url = format!(
            "redis://{user}:secret@{}",
            server.url().trim_start_matches("redis://")
        );
        let store = RedisStore::connect(options).unwrap();
        store.ping().await.unwrap();
        let key = unique_key("acl");
        server.cli(&["CONFIG", "RESETSTAT"]);
        for _ in 0..3 {
            assert!(allowed(&store, &key).await, "{refused}");
        }
        assert!(!allowed(&store, &key).await, "{refused}");
        // `-fcall`: the first check tried FCALL (refused) and was answered
        // by EVALSHA; none after it tried again.
        let tried = u64::from(refused == "-fcall");
        assert_eq!(calls(&server, "evalsha"), 4, "{refused}");
        assert_eq!(
            calls(&server, "fcall"),
            0,
            "{refused}: refused calls are not counted"
        );
        assert_eq!(
            server
                .cli(&["INFO", "errorstats"])
                .contains("errorstat_NOPERM"),
            tried == 1,
            "{refused}"
        );
        store.quit().await;
    }
}

/// At maxmemory Redis refuses an FCALL as a whole, where it lets EVAL run
/// and refuses only its writes: the store runs it again by EVALSHA, so a
/// denied check is still answered by the store, not by the failure policy.
#[tokio::test]
async fn at_maxmemory_a_denied_check_is_still_answered() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 60_000)).unwrap();
    store.ping().await.unwrap();
    let key = unique_key("oom");
    for _ in 0..3 {
        assert!(allowed(&store, &key).await);
    }
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let answer = store
        .check(&check(&key))
        .await
        .expect("answered by the store");
    assert!(!answer[0].allowed);
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    store.ping().await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(!allowed(&store, &key).await);
    assert_eq!(
        calls(&server, "fcall"),
        1,
        "FCALL again once the probe reloaded"
    );
    store.quit().await;
}
