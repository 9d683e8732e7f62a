//! Every instance sees a reset at once: instance A denies and caches the
//! denial; a reset (or refund) goes through instance B, whose script
//! publishes the invalidation; the next check on A is allowed once the
//! pub/sub message arrived, which is measured. A give-back is heard as
//! freed, not as a reset. Also: a lost subscription turns the deny cache
//! off until it is back. Real redis-server only.

use crate::support;
use crate::support::LimiterExt;
use crate::support::StoreExt;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratekeeper::domain::{Algorithm, Check};
use ratekeeper::store::{self, InvalidationSink, Store};
use support::invalidation::{
    Instance, deny_and_cache, eventually, instance, instance_unsubscribed, one_a_day, percentile,
    settled,
};
use support::{RedisServer, TestApp, settings, unique_key};

const ROUNDS: usize = 100;

#[derive(Clone, Copy, Debug)]
enum Op {
    Reset,
    Refund,
}

async fn adjust(b: &Instance, op: Op, check: &Check) {
    let decision = match op {
        Op::Reset => b.limiter.reset(check).await,
        Op::Refund => b.limiter.refund(check).await,
    };
    assert!(decision.unwrap().allowed, "{op:?} gave the unit back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_or_refund_through_b_is_seen_by_a_as_soon_as_the_message_arrives() {
    let server = RedisServer::start();
    let (a, b) = (instance(server.url()).await, instance(server.url()).await);
    for op in [Op::Reset, Op::Refund] {
        measure(&a, &b, op).await;
    }
    assert_eq!(b.metrics.invalidations.sent_ok.get(), 2 * ROUNDS as u64);
    assert_eq!(b.metrics.invalidations.sent_error.get(), 0);
    assert!(a.metrics.invalidations.received.get() >= 2 * ROUNDS as u64);
    assert_eq!(a.metrics.invalidations.subscription_lost.get(), 0);
}

/// `ROUNDS` rounds of: A denies and caches, `op` through B, A polled with
/// no sleep until allowed. Prints the delivery times.
async fn measure(a: &Instance, b: &Instance, op: Op) {
    let (mut since_call, mut since_returned) = (Vec::new(), Vec::new());
    let mut delivered = Vec::new();
    let mut denied_before_delivery = 0;
    for _ in 0..ROUNDS {
        let check = one_a_day(&unique_key("adjust"));
        deny_and_cache(a, &check).await;
        let received = a.metrics.invalidations.received.get();
        let started = Instant::now();
        adjust(b, op, &check).await;
        let returned = Instant::now();
        // Poll A tightly, no sleep: until the message arrives, a denial
        // can come from A's cache; once A's listener has it, none may.
        let mut delivered_at = None;
        loop {
            let had_it = a.metrics.invalidations.received.get() > received;
            if had_it && delivered_at.is_none() {
                delivered_at = Some(started.elapsed());
            }
            if a.limiter.check(&check).await.unwrap().allowed {
                break;
            }
            assert!(
                !had_it,
                "a cached denial answered after the invalidation arrived"
            );
            denied_before_delivery += 1;
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "never delivered"
            );
        }
        since_call.push(started.elapsed());
        since_returned.push(returned.elapsed());
        delivered.push(delivered_at.unwrap_or_else(|| started.elapsed()));
    }
    for samples in [&mut delivered, &mut since_call, &mut since_returned] {
        samples.sort();
    }
    println!(
        "{op:?}, over {ROUNDS} rounds: from B's call (one script: change + PUBLISH) to A's \
         listener having it: p50 {:?} p99 {:?} max {:?}; to A's first allowed check (its own \
         Redis round trip included): p50 {:?} p99 {:?} max {:?}; from the call's return to \
         that check's answer: p50 {:?} max {:?}; denied checks polled (from A's cache) before \
         the delivery: {}",
        percentile(&delivered, 50),
        percentile(&delivered, 99),
        delivered[ROUNDS - 1],
        percentile(&since_call, 50),
        percentile(&since_call, 99),
        since_call[ROUNDS - 1],
        percentile(&since_returned, 50),
        since_returned[ROUNDS - 1],
        denied_before_delivery,
    );
    assert!(since_call[ROUNDS - 1] < Duration::from_millis(500));
}

/// The invalidating instance itself never answers from its cache after the
/// call, without waiting for its own message.
#[tokio::test]
async fn the_invalidating_instance_drops_its_own_entries_at_once() {
    let server = RedisServer::start();
    let a = instance(server.url()).await;
    let check = one_a_day(&unique_key("own"));
    deny_and_cache(&a, &check).await;
    a.limiter.reset(&check).await.unwrap();
    assert!(a.limiter.check(&check).await.unwrap().allowed);
}

/// What a listener of our own is told.
#[derive(Default)]
struct Recorder {
    up: AtomicBool,
    freed: Mutex<Vec<String>>,
    invalidated: Mutex<Vec<String>>,
}

impl InvalidationSink for Recorder {
    fn invalidated(&self, key: &str) {
        self.invalidated.lock().unwrap().push(key.into());
    }

    fn freed(&self, key: &str) {
        self.freed.lock().unwrap().push(key.into());
    }

    fn invalidated_all(&self) {
        self.invalidated.lock().unwrap().push("*".into());
    }

    fn subscribed(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }
}

/// B gives back a reservation: its script publishes the key marked as
/// freed, which a listener hands to `freed` (where a lease holder keeps
/// its chunks), never to `invalidated`; a refund still goes to
/// `invalidated`. The deny cache, which does not override `freed`, is
/// invalidated all the same: A's cached denial ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_is_heard_as_freed_and_ends_cached_denials() {
    let server = RedisServer::start();
    let (a, b) = (instance(server.url()).await, instance(server.url()).await);
    let recorder = Arc::new(Recorder::default());
    let listener = b
        .store
        .spawn_invalidation_listener(recorder.clone(), Duration::from_millis(100))
        .unwrap();
    let up = || recorder.up.load(Ordering::SeqCst);
    eventually(Duration::from_secs(10), "subscribed", up).await;

    // One unit a day, reserved by B: A is denied, then from its cache. (A
    // give-back frees nothing once the window has ended: a day's end falls
    // inside the test hardly ever, an hour's now and then.)
    let key = unique_key("freed");
    let check = support::check(&key, Algorithm::FixedWindow, 1, "1d", 1);
    let reserved = b.store.apply(&[store::Op::check(&check)]).await.remove(0);
    let reserved = reserved.unwrap();
    assert!(reserved[0].allowed);
    assert!(!a.limiter.check(&check).await.unwrap().allowed);
    let hits = a.metrics.deny_cache.hits.get();
    assert!(!a.limiter.check(&check).await.unwrap().allowed);
    assert_eq!(a.metrics.deny_cache.hits.get(), hits + 1, "cached");

    let received = a.metrics.invalidations.received.get();
    let given = b.store.give_back(&check, reserved.at_us.unwrap()).await;
    let given = given.unwrap();
    assert_eq!(given.published, Some(true));
    assert_eq!((given[0].allowed, given[0].remaining), (true, 1));
    let freed = || recorder.freed.lock().unwrap().clone() == [key.clone()];
    eventually(Duration::from_secs(2), "freed heard", freed).await;
    assert!(recorder.invalidated.lock().unwrap().is_empty());
    let heard = || a.metrics.invalidations.received.get() > received;
    eventually(Duration::from_secs(2), "A heard it", heard).await;
    assert!(a.limiter.check(&check).await.unwrap().allowed, "not cached");

    // A refund is a plain invalidation still.
    b.store.refund(&check).await.unwrap();
    let invalidated = || recorder.invalidated.lock().unwrap().clone() == [key.clone()];
    eventually(Duration::from_secs(2), "refund heard", invalidated).await;
    assert_eq!(recorder.freed.lock().unwrap().len(), 1);
    listener.task.abort();
}

/// The service wires it: A is a running service answering over HTTP, whose
/// deny cache is in use from the start (the subscription is up before it
/// serves) and is invalidated by B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_service_is_invalidated_through_the_channel() {
    let server = RedisServer::start();
    let app = TestApp::spawn(settings(Some(&server.url()))).await;
    let b = instance(server.url()).await;
    let key = unique_key("http");
    let body =
        serde_json::json!({"key": key, "limit": 1, "window": "1d", "algorithm": "fixed_window"});
    let allowed = |(_, body): (u16, serde_json::Value)| body["allowed"] == true;
    assert!(allowed(app.check(body.clone()).await));
    for _ in 0..2 {
        assert!(!allowed(app.check(body.clone()).await));
    }
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("ratekeeper_deny_cache_hits_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("ratekeeper_invalidation_subscribed 1"));
    b.limiter.reset(&one_a_day(&key)).await.unwrap();
    let started = Instant::now();
    while !allowed(app.check(body.clone()).await) {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "never delivered"
        );
    }
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("ratekeeper_invalidations_received_total 1"));
    app.stop().await;
}

/// CLIENT KILL TYPE pubsub: the cache is dropped, and used again once the
/// listener has subscribed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscription_drops_the_cache_until_resubscribed() {
    let server = RedisServer::start();
    let a = instance(server.url()).await;
    let check = one_a_day(&unique_key("killed"));
    deny_and_cache(&a, &check).await;
    assert_eq!(server.cli(&["client", "kill", "type", "pubsub"]), "1");
    eventually(Duration::from_secs(5), "subscription lost", || {
        a.metrics.invalidations.subscription_lost.get() == 1
    })
    .await;
    eventually(Duration::from_secs(5), "subscribed again", || {
        !a.limiter.deny_cache_suspended()
    })
    .await;
    // A reconnect after the kill may cost one more round: let it settle.
    settled(&a).await;
    let hits = a.metrics.deny_cache.hits.get();
    assert!(!a.limiter.check(&check).await.unwrap().allowed);
    assert_eq!(
        a.metrics.deny_cache.hits.get(),
        hits,
        "the entry was dropped"
    );
    assert!(!a.limiter.check(&check).await.unwrap().allowed);
    assert_eq!(a.metrics.deny_cache.hits.get(), hits + 1, "caching again");
}

/// Redis down: no denial is answered from the cache (the failure policy
/// answers), and after the restart the cache works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_nothing_is_answered_from_the_cache() {
    let mut server = RedisServer::start();
    let a = instance(server.url()).await;
    let check = one_a_day(&unique_key("down"));
    deny_and_cache(&a, &check).await;
    server.kill();
    eventually(Duration::from_secs(5), "cache suspended", || {
        a.limiter.deny_cache_suspended()
    })
    .await;
    assert_eq!(a.metrics.invalidations.subscribed.get(), 0);
    let hits = a.metrics.deny_cache.hits.get();
    for _ in 0..5 {
        let decision = a.limiter.check(&check).await.unwrap();
        assert!(
            decision.degraded,
            "the failure policy answers, not the cache"
        );
    }
    assert_eq!(a.metrics.deny_cache.hits.get(), hits);
    server.restart();
    eventually(Duration::from_secs(10), "subscribed again", || {
        a.metrics.invalidations.subscribed.get() == 1
    })
    .await;
    eventually(Duration::from_secs(10), "store answers", || {
        a.limiter.is_ready()
    })
    .await;
    deny_and_cache(&a, &check).await;
}

/// Redis frozen (SIGSTOP): the connection stays open but the heartbeat
/// PING is not answered, so the cache is suspended until Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_heartbeat_suspends_the_cache() {
    let server = RedisServer::start();
    let a = instance(server.url()).await;
    server.freeze();
    eventually(Duration::from_secs(5), "cache suspended", || {
        a.limiter.deny_cache_suspended()
    })
    .await;
    server.thaw();
    eventually(Duration::from_secs(10), "subscribed again", || {
        !a.limiter.deny_cache_suspended()
    })
    .await;
    // The reconnect the listener forced lands once Redis answers, and
    // costs one more round: wait until that has settled.
    settled(&a).await;
    let check = one_a_day(&unique_key("frozen"));
    eventually(Duration::from_secs(10), "store answers", || {
        a.limiter.is_ready()
    })
    .await;
    deny_and_cache(&a, &check).await;
}

/// Redis 7 gives a new ACL user no pub/sub channel: the subscription is
/// refused, so the deny cache stays off (checks still work) and the reset
/// script's PUBLISH fails (counted) while the reset itself succeeds, until
/// the channel is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_channel_in_its_acl_an_instance_runs_without_its_cache() {
    let server = RedisServer::start();
    let grant = |channels: &str| {
        server.cli(&["acl", "setuser", "rk", "on", ">pw", "~*", "+@all", channels])
    };
    assert_eq!(grant("resetchannels"), "OK");
    let url = format!("redis://rk:pw@127.0.0.1:{}", server.port);
    let a = instance_unsubscribed(url).await;
    // Long enough for the listener to have SUBSCRIBEd: fred completes the
    // command once written, so without a check that messages arrive the
    // refused subscription was taken for up, and the cache used.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(a.limiter.deny_cache_suspended(), "not subscribed");
    let check = one_a_day(&unique_key("acl"));
    assert!(a.limiter.check(&check).await.unwrap().allowed);
    for _ in 0..3 {
        assert!(!a.limiter.check(&check).await.unwrap().allowed);
    }
    assert_eq!(a.metrics.deny_cache.hits.get(), 0, "the cache is off");
    assert!(a.limiter.deny_cache_suspended());
    assert!(a.limiter.reset(&check).await.unwrap().allowed);
    assert_eq!(a.metrics.invalidations.sent_error.get(), 1);
    assert_eq!(a.metrics.invalidations.sent_ok.get(), 0);
    assert!(a.limiter.check(&check).await.unwrap().allowed, "reset");
    assert_eq!(grant("&rk:invalidate"), "OK");
    eventually(Duration::from_secs(5), "subscribed once allowed", || {
        !a.limiter.deny_cache_suspended()
    })
    .await;
    let check = one_a_day(&unique_key("acl"));
    deny_and_cache(&a, &check).await;
}
