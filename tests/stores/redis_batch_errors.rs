//! Errors Redis raises inside a batched check, on real redis-server
//! processes: the batch script catches each check's error with `pcall`, and
//! the store must classify it as it would the same reply on the direct
//! path. An OOM or READONLY is an outage (answered by the failure policy),
//! an ACL denial a misconfiguration, never a 500.

use crate::support;
use crate::support::StoreExt;
use crate::support::stores::redis_settings;

use ratekeeper::domain::{Algorithm, Check};
use ratekeeper::store::redis::RedisStore;
use ratekeeper::store::{Store, StoreError};
use support::{RedisServer, unique_key};

fn store(url: String) -> RedisStore {
    RedisStore::connect(redis_settings(url)).unwrap()
}

/// Two fresh keys per algorithm, so every check writes.
fn batch() -> Vec<Check> {
    Algorithm::RATES
        .iter()
        .flat_map(|&algorithm| [algorithm, algorithm])
        .map(|algorithm| support::check(&unique_key("be"), algorithm, 10, "1m", 1))
        .collect()
}

/// Every check of a batch failed with `want` (a kind), and the direct
/// path agrees on a single check. (Redis refuses an FCALL as a whole at
/// maxmemory and on a replica; the store runs such a call again by
/// EVALSHA, which Redis lets run and refuses only its writes, one by one.)
async fn assert_each_fails_as(store: &RedisStore, want: &str) {
    let checks = batch();
    let results = store
        .check_each(&checks)
        .await
        .expect("the call itself works");
    for (check, result) in checks.iter().zip(&results) {
        match result {
            Err(error) => assert_eq!(error.kind(), want, "{}: {error}", check.rule().algorithm),
            Ok(outcome) => panic!("{}: {outcome:?}", check.rule().algorithm),
        }
    }
    let direct = store.check(&batch()[0]).await;
    assert_eq!(direct.map_err(|e| e.kind()).err(), Some(want), "direct");
}

/// Redis at maxmemory with noeviction refuses the scripts' writes with OOM.
#[tokio::test]
async fn an_oom_inside_a_batch_is_an_outage_not_a_500() {
    let server = RedisServer::start();
    let store = store(server.url());
    store.ping().await.unwrap();
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    assert_each_fails_as(&store, "unavailable").await;
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(store.check_batch(&batch()).await.is_ok(), "recovers");
}

/// After a failover the old primary is a replica and refuses writes.
#[tokio::test]
async fn a_readonly_replica_inside_a_batch_is_an_outage_not_a_500() {
    let server = RedisServer::start();
    let store = store(server.url());
    store.ping().await.unwrap();
    // A primary that does not exist: the server stays a read-only replica.
    let nowhere = support::free_port().to_string();
    server.cli(&["REPLICAOF", "127.0.0.1", &nowhere]);
    assert_each_fails_as(&store, "unavailable").await;
}

/// A user who may run scripts but not write: inside a script Redis 7.0
/// says "ERR The user executing the script can't run this command", Redis
/// 7.2+ (Valkey 8.1, Redis 8.2) "ERR ACL failure in script: User ro has no
/// permissions to run the 'set' command".
#[tokio::test]
async fn an_acl_denial_inside_a_batch_is_an_auth_error() {
    let server = RedisServer::start();
    server.cli(&[
        "ACL", "SETUSER", "ro", "on", ">pw", "~*", "+@all", "-@write",
    ]);
    let port = server.url().rsplit(':').next().unwrap().to_string();
    let store = store(format!("redis://ro:pw@127.0.0.1:{port}"));
    store.ping().await.unwrap();
    assert_each_fails_as(&store, "auth").await;
    assert!(matches!(
        store.check_batch(&batch()).await,
        Err(StoreError::Auth(_))
    ));
}
