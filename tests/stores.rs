//! The same scenarios against every store (embedded and Redis), on a
//! controlled clock, plus what only Redis has: key layout, TTLs, NOSCRIPT.

mod support;

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use ratekeeper::domain::{Algorithm, Check, CheckInput, ManualClock, Outcome, WindowInput};
use ratekeeper::store::memory::MemoryStore;
use ratekeeper::store::redis::{RedisOptions, RedisStore};
use ratekeeper::store::{Store, StoreError};
use support::{RedisServer, unique_key};

const T0: u64 = 1_767_225_600_000_000; // a window boundary for every window used here
const SEC: u64 = 1_000_000;
const MS: u64 = 1_000;

/// `ttl_pad_ms`: the manual clock stands still while real time (which Redis
/// expires keys by) runs on, so scenario tests keep keys alive a minute longer.
fn redis_options(server: &RedisServer, clock: &ManualClock, ttl_pad_ms: u64) -> RedisOptions {
    RedisOptions {
        url: server.url(),
        key_prefix: "rk:".into(),
        timeout: Duration::from_secs(2),
        pool_size: 1,
        reconnect_max_delay: Duration::from_millis(100),
        batch_window: Duration::ZERO,
        clock: Some(Arc::new(clock.clone())),
        ttl_pad_ms,
    }
}

/// Both stores on one manual clock.
async fn stores(server: &RedisServer, clock: &ManualClock) -> Vec<Arc<dyn Store>> {
    let redis = RedisStore::connect(redis_options(server, clock, 60_000)).unwrap();
    redis.ping().await.unwrap();
    vec![
        Arc::new(MemoryStore::new(Arc::new(clock.clone()), 1_000_000)),
        Arc::new(redis),
    ]
}

fn check(key: &str, algorithm: Algorithm, limit: u64, window: &str, cost: u64) -> Check {
    Check::new(
        CheckInput {
            key: key.into(),
            limit,
            window: WindowInput::Text(window.into()),
            algorithm: Some(algorithm),
            cost: Some(cost),
            burst: None,
        },
        &Default::default(),
    )
    .unwrap()
}

async fn run(store: &dyn Store, c: &Check) -> Outcome {
    store.check(c).await.unwrap()
}

#[tokio::test]
async fn seed_example_through_every_store() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
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
}

#[tokio::test]
async fn boundary_burst_only_passes_fixed_window() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
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
}

#[tokio::test]
async fn retry_after_is_exact_in_every_store_and_algorithm() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
        for algorithm in Algorithm::ALL {
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
}

#[tokio::test]
async fn state_expires_and_reset_after_says_when() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
        for algorithm in Algorithm::ALL {
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
}

#[tokio::test]
async fn same_key_under_other_rules_never_shares_state() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
        let key = unique_key("shared {braces}\nand spaces ü");
        for algorithm in Algorithm::ALL {
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
}

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

    for algorithm in Algorithm::ALL {
        let c = check("user:42", algorithm, 10, "30s", 2);
        let key = store.key_for(&c);
        assert_eq!(key, format!("rk:{{user:42}}:{}:30000", algorithm.key_tag()));
        let outcome = store.check(&c).await.unwrap();
        let ttl: i64 = redis.pttl(&key).await.unwrap();
        let reset_ms = outcome.reset_after_us.div_ceil(MS) as i64;
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
    // keys of one check share a cluster slot even with braces in the client key
    let odd = check("a}b{c", Algorithm::SlidingLog, 10, "30s", 1);
    assert_eq!(store.key_for(&odd), "rk:{a}b{c}:sl2:30000");
    store.check(&odd).await.unwrap();
}

#[tokio::test]
async fn scripts_reload_after_the_cache_is_flushed() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let store = RedisStore::connect(redis_options(&server, &clock, 60_000)).unwrap();
    store.ping().await.unwrap();
    let c = check(&unique_key("noscript"), Algorithm::TokenBucket, 3, "1s", 1);
    assert_eq!(store.check(&c).await.unwrap().remaining, 2);
    let redis = raw_client(&server).await;
    let _: () = redis.script_flush(false).await.unwrap();
    assert_eq!(
        store.check(&c).await.unwrap().remaining,
        1,
        "NOSCRIPT is handled by reloading"
    );
}

#[tokio::test]
async fn a_large_cost_on_the_sliding_log_is_one_entry() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
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
    assert!(store.check(&dos).await.unwrap().allowed);
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
        assert!(store.check(&small).await.unwrap().allowed);
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

#[tokio::test]
async fn lowering_the_limit_of_a_spent_key_reports_zero_remaining() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    for store in stores(&server, &clock).await {
        for algorithm in Algorithm::ALL {
            let key = unique_key("lowered");
            assert!(
                run(&*store, &check(&key, algorithm, 10, "1m", 10))
                    .await
                    .allowed
            );
            let lowered = run(&*store, &check(&key, algorithm, 5, "1m", 1)).await;
            assert!(!lowered.allowed, "{} {algorithm}", store.name());
            assert_eq!(lowered.remaining, 0, "{} {algorithm}", store.name());
        }
    }
}

/// A batching store under concurrent load on a real clock.
fn batching_store(server: &RedisServer) -> RedisStore {
    RedisStore::connect(RedisOptions {
        url: server.url(),
        key_prefix: "rk:".into(),
        timeout: Duration::from_secs(2),
        pool_size: 2,
        reconnect_max_delay: Duration::from_millis(100),
        batch_window: Duration::from_micros(200),
        clock: None,
        ttl_pad_ms: 0,
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
                Algorithm::ALL[i % 5],
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
        .map(|i| check(&unique_key("nsb"), Algorithm::ALL[i % 5], 10, "1m", 1))
        .collect();
    assert_eq!(concurrent_errors(&store, 300).await, Vec::<String>::new());
    let redis = raw_client(&server).await;
    let _: () = redis.script_flush(false).await.unwrap();
    assert_eq!(concurrent_errors(&store, 300).await, Vec::<String>::new());
    let _: () = redis.script_flush(false).await.unwrap();
    let outcomes = store.check_batch(&batch).await.unwrap();
    assert!(outcomes.iter().all(|o| o.remaining == 9));

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
    assert!(outcomes.iter().all(|o| o.remaining == 9), "a fresh server");
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
    let checks: Vec<Check> = Algorithm::ALL
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
        let algorithm = checks[i].rule.algorithm;
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
                assert_eq!(outcome.remaining, want, "{algorithm} check {i}");
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
        let child = std::process::Command::new("redis-server")
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
        RedisStore::connect(RedisOptions {
            url: format!("redis://{credentials}127.0.0.1:{}", self.port),
            key_prefix: "rk:".into(),
            timeout: Duration::from_millis(200),
            pool_size: 2,
            reconnect_max_delay: Duration::from_millis(100),
            batch_window: Duration::ZERO,
            clock: None,
            ttl_pad_ms: 0,
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
    // A user who may connect but not run scripts: NOPERM.
    let admin = server.store(":sekrit@");
    admin.ping().await.unwrap();
    assert!(admin.check(&c).await.unwrap().allowed);
    let acl = vec![
        "SETUSER", "limited", "on", ">hunter2", "~*", "+@all", "-evalsha", "-eval",
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
