//! What only the Redis store has, on real redis-server processes: key
//! layout and TTLs, the bounded sliding log in Redis's memory, scripts
//! reloaded after the cache is lost, a bad key in a batch, and refused
//! credentials. `tests/stores/stores.rs` runs the scenarios every store shares.

use crate::support;
use crate::support::StoreExt;
use crate::support::stores::redis_settings;

use std::time::Duration;

use fred::prelude::*;
use ratekeeper::domain::{Algorithm, Check, ManualClock};
use ratekeeper::store::redis::{RedisSettings, RedisStore};
use ratekeeper::store::{Store, StoreError};
use support::stores::redis_options;
use support::{RedisServer, check, unique_key};

const T0: u64 = 1_767_225_600_000_000;
const SEC: u64 = 1_000_000;
const MS: u64 = 1_000;

async fn raw_client(server: &RedisServer) -> Client {
    let client = Builder::from_config(Config::from_url(&server.url()).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    client
}

#[tokio::test]
async fn redis_keys_are_tagged_prefixed_and_expire() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 0)).unwrap();
    store.ping().await.unwrap();
    let redis = raw_client(&server).await;

    for algorithm in Algorithm::RATES {
        let c = check("user:42", algorithm, 10, "30s", 2);
        let key = store.key_for(&c);
        // An inline bucket's name ends with its limit and burst.
        let rule = if algorithm.has_burst() { ":10:10" } else { "" };
        assert_eq!(
            key,
            format!("rk:{{user:42}}:{}:30000{rule}", algorithm.key_tag())
        );
        let outcome = store.check(&c).await.unwrap();
        let ttl: i64 = redis.pttl(&key).await.unwrap();
        let reset_ms = outcome[0].reset_after_us.div_ceil(MS) as i64;
        assert!(
            ttl > 0 && ttl <= reset_ms,
            "{algorithm}: pttl {ttl} vs reset {reset_ms}"
        );
    }
    // cost 0 on an unseen key writes nothing
    let probe = check("nobody", Algorithm::Gcra, 10, "30s", 0);
    store.check(&probe).await.unwrap();
    let exists: i64 = redis.exists(store.key_for(&probe)).await.unwrap();
    assert_eq!(exists, 0);
    // every key ratekeeper wrote has a TTL
    let keys: Vec<String> = redis.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
    assert_eq!(keys.len(), 5);
    for key in keys {
        let ttl: i64 = redis.pttl(&key).await.unwrap();
        assert!(ttl > 0, "{key} has no TTL");
    }
    // a `}` in the client key is escaped in the tag, so it cannot end the
    // tag early (or leave it empty) and split a check's keys across slots
    let odd = check("a}b{c", Algorithm::SlidingLog, 10, "30s", 1);
    assert_eq!(store.key_for(&odd), "rk:{a%7Db{c}:sl2:30000");
    store.check(&odd).await.unwrap();
}

#[tokio::test]
async fn scripts_reload_after_the_cache_is_flushed() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 60_000)).unwrap();
    store.ping().await.unwrap();
    let c = check(&unique_key("noscript"), Algorithm::TokenBucket, 3, "1s", 1);
    assert_eq!(store.check(&c).await.unwrap()[0].remaining, 2);
    let redis = raw_client(&server).await;
    let _: () = redis.script_flush(false).await.unwrap();
    assert_eq!(
        store.check(&c).await.unwrap()[0].remaining,
        1,
        "NOSCRIPT is handled by reloading"
    );
}

/// Issue 6, defect 1: this one request used to add 100 000 members (11 MB,
/// kept a year) and hold Redis for 215-305 ms. Now it writes one member, and
/// a key's log stays small and compact however many admissions it sees.
#[tokio::test]
async fn the_sliding_log_dos_request_leaves_a_small_key_and_runs_fast() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 0)).unwrap();
    store.ping().await.unwrap();
    let redis = raw_client(&server).await;
    let _: () = redis
        .custom(
            fred::cmd!("CONFIG"),
            vec!["SET", "slowlog-log-slower-than", "0"],
        )
        .await
        .unwrap();
    let _: () = redis
        .custom(fred::cmd!("SLOWLOG"), vec!["RESET"])
        .await
        .unwrap();

    let dos = check("dosN", Algorithm::SlidingLog, 100_000, "366d", 100_000);
    assert!(store.check(&dos).await.unwrap()[0].allowed);
    let key = store.key_for(&dos);
    let bytes: i64 = redis
        .custom(fred::cmd!("MEMORY"), vec!["USAGE", key.as_str()])
        .await
        .unwrap();
    assert!(bytes < 1_024, "{bytes} B");
    // Redis's own timing of the script (no sleep involved): main took 215+ ms.
    let log: Vec<Vec<fred::types::Value>> = redis
        .custom(fred::cmd!("SLOWLOG"), vec!["GET", "128"])
        .await
        .unwrap();
    let worst_us = log.iter().filter_map(|e| e[2].as_i64()).max().unwrap();
    assert!(worst_us < 20_000, "the check took {worst_us} µs in Redis");

    // 5 000 admissions at distinct instants within the window: the log is
    // bounded and stays a listpack.
    let small = check("dosM", Algorithm::SlidingLog, 100_000, "366d", 1);
    for i in 0..5_000 {
        clock.set_us(T0 + i * 7 * SEC);
        assert!(store.check(&small).await.unwrap()[0].allowed);
    }
    let key = store.key_for(&small);
    let members: i64 = redis.zcard(&key).await.unwrap();
    assert!(
        members <= 128,
        "{members} members: 127 entries and the total"
    );
    let encoding: String = redis
        .custom(fred::cmd!("OBJECT"), vec!["ENCODING", key.as_str()])
        .await
        .unwrap();
    assert_eq!(encoding, "listpack");
    let bytes: i64 = redis
        .custom(fred::cmd!("MEMORY"), vec!["USAGE", key.as_str()])
        .await
        .unwrap();
    assert!(bytes < 8_192, "{bytes} B");
}

/// A batching store under concurrent load on a real clock.
fn batching_store(server: &RedisServer) -> RedisStore {
    RedisStore::connect(RedisSettings {
        pool_size: 2,
        batch_window: Duration::from_micros(200),
        ..redis_settings(server.url())
    })
    .unwrap()
}

/// `n` concurrent checks on distinct keys; the errors they got.
async fn concurrent_errors(store: &RedisStore, n: usize) -> Vec<String> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let store = store.clone();
            let c = check(
                &unique_key(&format!("conc{i}")),
                Algorithm::RATES[i % 5],
                100,
                "1m",
                1,
            );
            tokio::spawn(async move { store.check(&c).await })
        })
        .collect();
    let mut errors = Vec::new();
    for task in tasks {
        if let Err(e) = task.await.unwrap() {
            errors.push(e.to_string());
        }
    }
    errors
}

/// Issue 6, defect 5: after Redis lost its script cache (SCRIPT FLUSH, or a
/// restart on the same port), batch calls reload and retry like single
/// checks: nothing fails, on the batcher under load or on one batch call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_checks_reload_scripts_after_the_cache_is_lost() {
    let mut server = RedisServer::start();
    let store = batching_store(&server);
    store.ping().await.unwrap();
    let batch: Vec<Check> = (0..20)
        .map(|i| check(&unique_key("nsb"), Algorithm::RATES[i % 5], 10, "1m", 1))
        .collect();
    assert_eq!(concurrent_errors(&store, 300).await, Vec::<String>::new());
    let redis = raw_client(&server).await;
    let _: () = redis.script_flush(false).await.unwrap();
    assert_eq!(concurrent_errors(&store, 300).await, Vec::<String>::new());
    let _: () = redis.script_flush(false).await.unwrap();
    let outcomes = store.check_batch(&batch).await.unwrap();
    assert!(outcomes.iter().all(|o| o[0].remaining == 9));

    server.restart();
    assert!(store.wait_connected(Duration::from_secs(5)).await);
    // The pool's connections come back one by one; wait until a ping passes
    // through each before judging the scripts.
    let mut passed = 0;
    for _ in 0..50 {
        passed += store.ping().await.is_ok() as usize;
        if passed == 2 {
            break;
        }
    }
    assert_eq!(passed, 2, "Redis is back");
    let outcomes = store.check_batch(&batch).await.unwrap();
    assert!(
        outcomes.iter().all(|o| o[0].remaining == 9),
        "a fresh server"
    );
    assert_eq!(concurrent_errors(&store, 300).await, Vec::<String>::new());
}

/// Issue 6, defect 6: a key of the wrong type used to abort the whole batch
/// (after earlier checks had written) and fail every caller in it.
#[tokio::test]
async fn a_wrong_type_key_fails_only_its_own_check_in_a_batch() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 60_000)).unwrap();
    store.ping().await.unwrap();
    let redis = raw_client(&server).await;
    let checks: Vec<Check> = Algorithm::RATES
        .iter()
        .flat_map(|&a| {
            let good = unique_key("good");
            [
                check(&good, a, 5, "1m", 2),
                check(&unique_key("bad"), a, 5, "1m", 1),
                check(&good, a, 5, "1m", 2),
            ]
        })
        .collect();
    for bad in checks.iter().skip(1).step_by(3) {
        // A string where a hash, sorted set or number is expected (gcra keeps
        // a string, so give it a list).
        let key = store.key_for(bad);
        let _: () = redis.rpush(&key, "x").await.unwrap();
    }
    let results = store.check_each(&checks).await.unwrap();
    for (i, result) in results.iter().enumerate() {
        let algorithm = checks[i].rule().algorithm;
        match i % 3 {
            1 => match result {
                Err(StoreError::Backend(message)) => {
                    assert!(message.contains("WRONGTYPE"), "{algorithm}: {message}")
                }
                other => panic!("{algorithm}: {other:?}"),
            },
            n => {
                let outcome = result.as_ref().unwrap();
                let want = if n == 0 { 3 } else { 1 };
                assert_eq!(outcome[0].remaining, want, "{algorithm} check {i}");
            }
        }
    }
    assert!(store.check_batch(&checks).await.is_err());
}

/// A redis-server that requires the password `sekrit` (support's servers
/// take no extra arguments), killed on drop.
struct PasswordServer {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl PasswordServer {
    fn start() -> PasswordServer {
        let port = support::free_port();
        let dir =
            std::env::temp_dir().join(format!("ratekeeper-auth-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new(support::redis_server_binary())
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--requirepass", "sekrit", "--dir", dir.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server runs");
        let server = PasswordServer { child, port, dir };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn store(&self, credentials: &str) -> RedisStore {
        RedisStore::connect(RedisSettings {
            timeout: Duration::from_millis(200),
            pool_size: 2,
            ..redis_settings(format!("redis://{credentials}127.0.0.1:{}", self.port))
        })
        .unwrap()
    }
}

impl Drop for PasswordServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn assert_auth(result: Result<impl std::fmt::Debug, StoreError>, what: &str) {
    match result {
        Err(StoreError::Auth(message)) => {
            assert!(
                !message.contains("hunter2"),
                "{what}: the password leaked: {message}"
            );
            assert_eq!(StoreError::Auth(message).kind(), "auth");
        }
        other => panic!("{what}: expected an auth error, got {other:?}"),
    }
}

/// Issue 6, defect 7: a wrong password used to read as "store timed out".
#[tokio::test]
async fn refused_credentials_are_reported_as_auth_errors() {
    let server = PasswordServer::start();
    let c = check(&unique_key("auth"), Algorithm::Gcra, 3, "1m", 1);
    for credentials in [":hunter2@", "", "bob:hunter2@"] {
        let store = server.store(credentials);
        assert_auth(store.ping().await, credentials);
        assert_auth(store.check(&c).await, credentials);
        store.quit().await;
    }
    // A user who may connect but not run scripts (nor functions): NOPERM.
    let admin = server.store(":sekrit@");
    admin.ping().await.unwrap();
    assert!(admin.check(&c).await.unwrap()[0].allowed);
    let acl = vec![
        "SETUSER",
        "limited",
        "on",
        ">hunter2",
        "~*",
        "+@all",
        "-evalsha",
        "-eval",
        "-fcall",
        "-function",
    ];
    let raw = Builder::from_config(
        Config::from_url(&format!("redis://:sekrit@127.0.0.1:{}", server.port)).unwrap(),
    )
    .build()
    .unwrap();
    raw.init().await.unwrap();
    let _: () = raw.custom(fred::cmd!("ACL"), acl).await.unwrap();
    let limited = server.store("limited:hunter2@");
    limited.ping().await.unwrap();
    assert_auth(limited.check(&c).await, "NOPERM");
}

/// `ratekeeper_redis_check_calls_total`'s source: one script call per
/// check sent alone, one per batch; concurrent checks share calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_calls_count_one_per_lone_check_and_one_per_batch() {
    let server = RedisServer::start();
    let store = batching_store(&server);
    store.ping().await.unwrap();
    for i in 0..5 {
        let c = check(&unique_key("calls"), Algorithm::RATES[i], 10, "1m", 1);
        store.check(&c).await.unwrap();
    }
    assert_eq!(
        store.stats().check_calls,
        Some(5),
        "one call per lone check"
    );
    let batch: Vec<Check> = (0..20)
        .map(|i| check(&unique_key("callsb"), Algorithm::RATES[i % 5], 10, "1m", 1))
        .collect();
    store.check_batch(&batch).await.unwrap();
    assert_eq!(store.stats().check_calls, Some(6), "one call for the batch");
    assert_eq!(concurrent_errors(&store, 300).await, Vec::<String>::new());
    let calls = store.stats().check_calls.unwrap() - 6;
    assert!(
        (1..300).contains(&calls),
        "300 concurrent checks in {calls} calls"
    );
}

/// Issue 28, part 6: the store's own tasks (its connection listeners and
/// its batcher, with the calls it has sent) are tracked, and `quit` ends
/// and joins every one of them before it closes the connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quit_ends_and_joins_the_stores_own_tasks() {
    let server = RedisServer::start();
    let store = batching_store(&server);
    assert!(store.wait_connected(Duration::from_secs(5)).await);
    assert!(concurrent_errors(&store, 50).await.is_empty());
    // One auth listener per pooled client, and the batcher.
    assert!(
        store.background_tasks() >= 3,
        "{}",
        store.background_tasks()
    );
    store.quit().await;
    assert_eq!(store.background_tasks(), 0);
    let after = store
        .check(&check(&unique_key("after"), Algorithm::Gcra, 5, "1m", 1))
        .await;
    assert!(after.is_err(), "a closed store answers no check: {after:?}");
}
