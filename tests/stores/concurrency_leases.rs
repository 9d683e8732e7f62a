//! Concurrency limits with leases through every store (embedded and
//! Redis) on a controlled clock: acquire up to the limit, a denial's
//! retry_after at the earliest expiry, expiry frees a slot with no traffic,
//! release and renewal (right and wrong ids), a policy with a rate limit
//! staying all or nothing, and the Rust twins' answers; then 400 callers
//! on two instances sharing one Redis, never more than the limit in flight.

use crate::support;
use crate::support::StoreExt;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use ratekeeper::domain::algorithms::{State, apply_all_leased, lease_all};
use ratekeeper::domain::{Algorithm, Check, LeaseId, Limit, ManualClock, Rule, Window};
use ratekeeper::store::Store;
use ratekeeper::store::redis::RedisStore;

use support::unique_key;

for_each_store!(
    acquires_up_to_the_limit_and_expiry_frees_slots,
    release_and_renew_answer_whether_the_lease_was_live,
    a_policy_with_a_rate_limit_stays_all_or_nothing,
    refund_and_settle_move_no_lease,
    every_answer_matches_the_rust_twin,
);

const SEC: u64 = 1_000_000;
const T0: u64 = 1_767_225_600_000_000;

fn concurrency(limit: u64) -> Rule {
    Rule::with_length(Algorithm::Concurrency, limit, 30 * SEC, limit)
}

fn check(key: &str, limit: u64, cost: u64) -> Check {
    Check::multi(
        key,
        vec![Limit {
            name: "inflight".into(),
            rule: concurrency(limit),
            scope: None,
            level: None,
        }],
        cost,
    )
}

async fn acquires_up_to_the_limit_and_expiry_frees_slots(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    let c = check(&unique_key("cc"), 3, 1);
    for (i, remaining) in [2, 1, 0].into_iter().enumerate() {
        clock.set_us(T0 + i as u64 * SEC);
        let o = store.acquire(&c, &LeaseId::generate()).await.unwrap()[0];
        assert!(o.allowed);
        assert_eq!((o.remaining, o.reset_after_us), (remaining, 30 * SEC));
    }
    clock.set_us(T0 + 5 * SEC);
    let denied = store.acquire(&c, &LeaseId::generate()).await.unwrap()[0];
    assert!(!denied.allowed);
    assert_eq!((denied.remaining, denied.retry_after_us), (0, 25 * SEC));
    // Never released: the first frees itself at its expiry, no traffic needed.
    clock.set_us(T0 + 30 * SEC - 1);
    assert!(!store.check(&check(c.key.as_str(), 3, 0)).await.unwrap()[0].allowed);
    clock.set_us(T0 + 30 * SEC);
    let look = store.check(&check(c.key.as_str(), 3, 0)).await.unwrap()[0];
    assert_eq!((look.allowed, look.remaining), (true, 1));
    let o = store.acquire(&c, &LeaseId::generate()).await.unwrap()[0];
    assert_eq!((o.allowed, o.remaining), (true, 0));
}

async fn release_and_renew_answer_whether_the_lease_was_live(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    let c = check(&unique_key("cc"), 1, 1);
    let lease = LeaseId::generate();
    assert!(store.acquire(&c, &lease).await.unwrap()[0].allowed);
    assert!(!store.acquire(&c, &LeaseId::generate()).await.unwrap()[0].allowed);

    // A wrong id releases nothing.
    let wrong = store.release(&c, &LeaseId::generate()).await.unwrap();
    assert_eq!(wrong.lease, Some(false));
    assert_eq!(wrong[0].remaining, 0);
    // Renewing moves the expiry to now + 30 s.
    clock.set_us(T0 + 20 * SEC);
    let renewed = store.renew(&c, &lease).await.unwrap();
    assert_eq!(renewed.lease, Some(true));
    assert_eq!(renewed[0].reset_after_us, 30 * SEC);
    assert!(
        !store
            .renew(&c, &LeaseId::generate())
            .await
            .unwrap()
            .lease
            .unwrap()
    );
    clock.set_us(T0 + 45 * SEC);
    let denied = store.acquire(&c, &LeaseId::generate()).await.unwrap()[0];
    assert_eq!((denied.allowed, denied.retry_after_us), (false, 5 * SEC));

    // A release frees the slot at once, and only once.
    let released = store.release(&c, &lease).await.unwrap();
    assert_eq!(released.lease, Some(true));
    assert_eq!((released[0].allowed, released[0].remaining), (true, 1));
    // A release tells the other instances (Redis publishes it, so their
    // deny caches and waiters hear of the free slot); a renewal frees
    // nothing and tells nobody.
    let shared = store.name() == "redis";
    assert_eq!(released.published, shared.then_some(true));
    assert_eq!(renewed.published, None);
    assert_eq!(store.release(&c, &lease).await.unwrap().lease, Some(false));
    let next = LeaseId::generate();
    assert!(store.acquire(&c, &next).await.unwrap()[0].allowed);

    // An expired lease can be neither renewed nor released.
    clock.set_us(T0 + 45 * SEC + 30 * SEC);
    assert_eq!(store.renew(&c, &next).await.unwrap().lease, Some(false));
    assert_eq!(store.release(&c, &next).await.unwrap().lease, Some(false));
}

fn policy(key: &str, cost: u64) -> Check {
    let mut check = Check::multi(
        key,
        vec![
            Limit {
                name: "minute".into(),
                rule: Rule {
                    algorithm: Algorithm::FixedWindow,
                    limit: 3,
                    window: Window::Length(60 * SEC),
                    burst: 3,
                },
                scope: None,
                level: None,
            },
            Limit {
                name: "inflight".into(),
                rule: concurrency(2),
                scope: None,
                level: None,
            },
        ],
        cost,
    );
    check.policy = Some("jobs".into());
    check
}

async fn a_policy_with_a_rate_limit_stays_all_or_nothing(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    clock.set_us(T0);
    let c = policy(&unique_key("ccp"), 1);
    let (a, b) = (LeaseId::generate(), LeaseId::generate());
    assert!(
        store
            .acquire(&c, &a)
            .await
            .unwrap()
            .iter()
            .all(|o| o.allowed)
    );
    assert!(
        store
            .acquire(&c, &b)
            .await
            .unwrap()
            .iter()
            .all(|o| o.allowed)
    );
    // Two in flight: denied, and the minute's count is not spent.
    let denied = store.acquire(&c, &LeaseId::generate()).await.unwrap();
    assert_eq!((denied[0].allowed, denied[0].remaining), (true, 1));
    assert!(!denied[1].allowed);
    // Release frees only the slot: the minute keeps its two.
    let released = store.release(&c, &a).await.unwrap();
    assert_eq!(released.lease, Some(true));
    assert_eq!((released[0].remaining, released[1].remaining), (1, 1));
    assert!(
        store
            .acquire(&c, &LeaseId::generate())
            .await
            .unwrap()
            .iter()
            .all(|o| o.allowed)
    );
    assert!(store.release(&c, &b).await.unwrap().lease.unwrap());
    // The minute is spent: a free slot is not taken either.
    let denied = store.acquire(&c, &LeaseId::generate()).await.unwrap();
    assert!(!denied[0].allowed);
    assert_eq!((denied[1].allowed, denied[1].remaining), (true, 1));
}

async fn refund_and_settle_move_no_lease(store: Arc<dyn Store>, clock: ManualClock) {
    clock.set_us(T0);
    let c = check(&unique_key("ccr"), 2, 1);
    assert!(store.acquire(&c, &LeaseId::generate()).await.unwrap()[0].allowed);
    assert_eq!(store.refund(&c).await.unwrap()[0].remaining, 1);
    assert_eq!(store.settle(&c, 0).await.unwrap()[0].remaining, 1);
    assert_eq!(
        store.settle(&check(c.key.as_str(), 2, 0), 1).await.unwrap()[0].remaining,
        1
    );
    // Neither a refund nor a release of a check without a concurrency limit
    // says anything about leases.
    assert_eq!(store.refund(&c).await.unwrap().lease, None);
    let other = policy(&unique_key("ccr"), 1);
    let rate_only = Check::multi(other.key.as_str(), vec![other.limits[0].clone()], 1);
    assert_eq!(
        store
            .release(&rate_only, &LeaseId::generate())
            .await
            .unwrap()
            .lease,
        None
    );
}

/// A fixed script of acquires, looks, releases and renewals (right and
/// wrong ids) at moving times, on a policy of a rate limit and a
/// concurrency limit: every answer equals the Rust twins'.
async fn every_answer_matches_the_rust_twin(store: Arc<dyn Store>, clock: ManualClock) {
    let c = policy(&unique_key("cctwin"), 1);
    let look = policy(c.key.as_str(), 0);
    let rules: Vec<&Rule> = c.limits.iter().map(|l| &l.rule).collect();
    let mut states: Vec<State> = rules.iter().map(|r| State::fresh(r.algorithm)).collect();
    let ids: Vec<LeaseId> = (0..4).map(|_| LeaseId::generate()).collect();
    for step in 0..60u64 {
        let now = T0 + step * 4 * SEC + (step % 3) * 7;
        clock.set_us(now);
        let id = &ids[(step * 7 % 5) as usize % ids.len()];
        match step % 5 {
            0 | 1 => {
                let want = apply_all_leased(&mut states, &rules, now, 1, id.as_str());
                assert_eq!(store.acquire(&c, id).await.unwrap(), want, "step {step}");
            }
            2 => {
                let (live, want) = lease_all(&mut states, &rules, now, id.as_str(), false);
                let got = store.release(&c, id).await.unwrap();
                assert_eq!((got.lease, got.outcomes), (live, want), "step {step}");
            }
            3 => {
                let (live, want) = lease_all(&mut states, &rules, now, id.as_str(), true);
                let got = store.renew(&c, id).await.unwrap();
                assert_eq!((got.lease, got.outcomes), (live, want), "step {step}");
            }
            _ => {
                let want = apply_all_leased(&mut states, &rules, now, 0, "");
                assert_eq!(store.check(&look).await.unwrap(), want, "step {step}");
            }
        }
    }
}

const CALLERS: usize = 400;
const LIMIT: u64 = 10;

#[tokio::test]
async fn four_hundred_callers_on_two_instances_never_hold_more_than_the_limit() {
    four_hundred_callers(Duration::ZERO).await;
}

/// The same through the batcher: operations in flight together share one
/// script call, each with its own lease.
#[tokio::test]
async fn four_hundred_batched_callers_never_hold_more_than_the_limit() {
    four_hundred_callers(Duration::from_micros(100)).await;
}

async fn redis_store(
    server: &support::RedisServer,
    clock: &ManualClock,
    batch_window: Duration,
) -> Arc<dyn Store> {
    let mut options = support::stores::redis_options(server, clock, 60_000);
    options.settings.batch_window = batch_window;
    let store = RedisStore::connect(options).unwrap();
    store.ping().await.unwrap();
    Arc::new(store)
}

/// 400 callers at once on two Redis stores sharing one Redis, limit 10:
/// exactly 10 are granted at first; then each holder releases, and a
/// sampler of the holders in flight (counted between a grant and its
/// release) never sees more than 10, while each release lets one more in.
async fn four_hundred_callers(batch_window: Duration) {
    let server = support::RedisServer::start();
    let clock = ManualClock::new(T0);
    let stores: Vec<Arc<dyn Store>> = vec![
        redis_store(&server, &clock, batch_window).await,
        redis_store(&server, &clock, batch_window).await,
    ];
    let c = Arc::new(check(&unique_key("cc400"), LIMIT, 1));

    // Round one: every caller tries once, at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (store, c, barrier) = (stores[i % 2].clone(), c.clone(), barrier.clone());
            tokio::spawn(async move {
                let lease = LeaseId::generate();
                barrier.wait().await;
                let granted = store.acquire(&c, &lease).await.unwrap()[0].allowed;
                granted.then_some((i, lease))
            })
        })
        .collect();
    let mut holders = Vec::new();
    for task in tasks {
        holders.extend(task.await.unwrap());
    }
    assert_eq!(holders.len(), LIMIT as usize, "granted at first");

    // Round two: the holders release one by one while 40 other callers
    // keep trying and hold what they get; a grant counts in flight from
    // the answer until just before its release.
    let in_flight = Arc::new(AtomicI64::new(LIMIT as i64));
    let max_seen = Arc::new(AtomicI64::new(LIMIT as i64));
    let granted = Arc::new(AtomicUsize::new(LIMIT as usize));
    let stop = Arc::new(AtomicBool::new(false));
    let holder_ids: HashSet<usize> = holders.iter().map(|(i, _)| *i).collect();
    let waiters: Vec<_> = (0..CALLERS)
        .filter(|i| !holder_ids.contains(i))
        .take(40)
        .map(|i| {
            let (store, c, stop) = (stores[i % 2].clone(), c.clone(), stop.clone());
            let (in_flight, max_seen, granted) =
                (in_flight.clone(), max_seen.clone(), granted.clone());
            tokio::spawn(async move {
                let lease = LeaseId::generate();
                while !stop.load(Ordering::SeqCst) {
                    if store.acquire(&c, &lease).await.unwrap()[0].allowed {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        max_seen.fetch_max(now, Ordering::SeqCst);
                        granted.fetch_add(1, Ordering::SeqCst);
                        return Some((i, lease));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                None
            })
        })
        .collect();
    for (n, (i, lease)) in holders.into_iter().enumerate() {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        assert!(
            stores[i % 2]
                .release(&c, &lease)
                .await
                .unwrap()
                .lease
                .unwrap()
        );
        // Each release lets exactly one more in.
        let want = LIMIT as usize + n + 1;
        let seen = granted.clone();
        support::wait_for(Duration::from_secs(10), move || {
            seen.load(Ordering::SeqCst) >= want
        })
        .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(granted.load(Ordering::SeqCst), want, "after release {n}");
    }
    stop.store(true, Ordering::SeqCst);
    let mut second = Vec::new();
    for w in waiters {
        second.extend(w.await.unwrap());
    }
    assert_eq!(second.len(), LIMIT as usize);
    assert!(
        max_seen.load(Ordering::SeqCst) <= LIMIT as i64,
        "{max_seen:?}"
    );
    let look = check(c.key.as_str(), LIMIT, 0);
    assert_eq!(stores[1].check(&look).await.unwrap()[0].remaining, 0);
    for (i, lease) in second {
        assert!(
            stores[i % 2]
                .release(&c, &lease)
                .await
                .unwrap()
                .lease
                .unwrap()
        );
    }
    assert_eq!(stores[0].check(&look).await.unwrap()[0].remaining, LIMIT);
}
