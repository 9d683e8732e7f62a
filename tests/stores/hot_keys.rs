//! Hot-key leasing across instances (docs/leasing.md), on a real Redis:
//! four service instances, 400 concurrent callers on one key. Leasing
//! never admits more than the limit in a window, gives back what it held
//! (so a key drained afterwards admits exactly the limit), drops chunks a
//! reset voided, and spends a held chunk while Redis is down.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratekeeper::domain::{FailureMode, PolicySet};
use serde_json::json;
use support::{RedisServer, TestApp, settings, unique_key};

const INSTANCES: usize = 4;
const CALLERS: usize = 400;
const UNITS: &str = "ratekeeper_lease_units_total";

fn policies(algorithm: &str, limit: u64, window: &str) -> PolicySet {
    let text = format!(
        "[policies.hot]\nlease = {{ max_units = 200, ttl = \"300ms\", hot_rate = 10 }}\n\
         limits = [{{ name = \"all\", algorithm = \"{algorithm}\", limit = {limit}, window = \"{window}\" }}]\n"
    );
    PolicySet::parse(&text, &Default::default(), None).expect("a valid policy")
}

async fn instances(redis: &str, set: &PolicySet, mode: FailureMode) -> Vec<TestApp> {
    let mut apps = Vec::new();
    for _ in 0..INSTANCES {
        let mut s = settings(Some(redis));
        s.failure.mode = mode;
        // A call that times out may still have run: its units are spent
        // and nobody gets them. That is true of any check, leased or not;
        // this test counts every unit, so it gives a loaded machine time.
        s.redis.as_mut().unwrap().timeout = Duration::from_secs(2);
        let app = TestApp::spawn(s).await;
        app.policies.store(Arc::new(set.clone()));
        apps.push(app);
    }
    apps
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

async fn allowed(app: &TestApp, key: &str) -> bool {
    let (status, body) = app.check(json!({"policy": "hot", "key": key})).await;
    assert_eq!(status, 200, "{body}");
    body["allowed"].as_bool().unwrap()
}

async fn sum(apps: &[TestApp], series: &str) -> f64 {
    let mut total = 0.0;
    for app in apps {
        total += app.metric(series).await;
    }
    total
}

/// `CALLERS` callers over the instances, each checking until it is denied
/// `denials` times in a row or `for_at_most` passed. Returns the
/// (sent, answered) times in µs of every allowed check.
async fn flood(
    apps: &Arc<Vec<TestApp>>,
    key: &str,
    denials: u32,
    for_at_most: Duration,
) -> Vec<(u64, u64)> {
    let until = tokio::time::Instant::now() + for_at_most;
    let mut tasks = Vec::new();
    for caller in 0..CALLERS {
        let (apps, key) = (apps.clone(), key.to_string());
        tasks.push(tokio::spawn(async move {
            let app = &apps[caller % apps.len()];
            let (mut times, mut denied) = (Vec::new(), 0);
            while denied < denials && tokio::time::Instant::now() < until {
                let sent = now_us();
                if allowed(app, &key).await {
                    times.push((sent, now_us()));
                    denied = 0;
                } else {
                    denied += 1;
                }
            }
            times
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

/// Checks on `app` until denied: how many were allowed.
async fn drain(app: &TestApp, key: &str) -> u64 {
    let mut n = 0;
    while allowed(app, key).await {
        n += 1;
        assert!(n < 1_000_000, "never denied");
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_admit_exactly_the_limit_and_lose_no_unit() {
    let redis = RedisServer::start();
    for algorithm in ["fixed_window", "sliding_window"] {
        const LIMIT: u64 = 3_000;
        let apps = Arc::new(
            instances(
                &redis.url(),
                &policies(algorithm, LIMIT, "1h"),
                FailureMode::Closed,
            )
            .await,
        );
        // An hour window: one window for the whole run, unless it crosses
        // the hour (then once more, on a fresh key).
        for attempt in 0.. {
            let key = unique_key("hot");
            let hour = now_us() / 3_600_000_000;
            let flooded = flood(&apps, &key, 3, Duration::from_secs(20)).await.len() as u64;
            // The chunks go back at their TTL (300 ms) or as the key cools.
            tokio::time::sleep(Duration::from_millis(800)).await;
            let drained = drain(&apps[0], &key).await;
            if now_us() / 3_600_000_000 != hour {
                assert!(attempt == 0, "two hour boundaries in one test");
                continue;
            }
            let mut units = String::new();
            for outcome in [
                "reserved",
                "answered",
                "given_back",
                "lapsed",
                "dropped",
                "give_back_failed",
            ] {
                let n = sum(&apps, &format!("{UNITS}{{outcome=\"{outcome}\"}}")).await;
                units += &format!(" {outcome}={n}");
            }
            for result in ["granted", "denied", "error"] {
                let n = sum(
                    &apps,
                    &format!("ratekeeper_lease_reservations_total{{result=\"{result}\"}}"),
                )
                .await;
                units += &format!(" {result}={n}");
            }
            let errors = apps[0].get("/metrics").await.text().await.unwrap();
            for line in errors.lines().filter(|l| {
                l.starts_with("ratekeeper_store_errors_total")
                    || l.starts_with("ratekeeper_degraded_total")
            }) {
                units += &format!(" [{line}]");
            }
            println!("{algorithm}: flooded {flooded}, drained {drained};{units}");
            assert!(
                flooded <= LIMIT,
                "{algorithm}: {flooded} admitted, limit {LIMIT}"
            );
            assert_eq!(
                flooded + drained,
                LIMIT,
                "{algorithm}: every unit given back"
            );
            break;
        }
        let answered = sum(&apps, &format!("{UNITS}{{outcome=\"answered\"}}")).await;
        let given_back = sum(&apps, &format!("{UNITS}{{outcome=\"given_back\"}}")).await;
        println!(
            "{algorithm}: {answered} of {LIMIT} units answered from chunks, {given_back} given back"
        );
        assert!(answered > 0.0, "{algorithm}: chunks answered checks");
        for app in Arc::try_unwrap(apps).ok().unwrap() {
            app.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_window_admits_more_than_the_limit_across_window_ends() {
    let redis = RedisServer::start();
    for algorithm in ["fixed_window", "sliding_window"] {
        const LIMIT: usize = 4_000;
        const WINDOW_US: u64 = 1_000_000;
        let set = policies(algorithm, LIMIT as u64, "1s");
        let apps = Arc::new(instances(&redis.url(), &set, FailureMode::Closed).await);
        let key = unique_key("edges");
        let times = flood(&apps, &key, u32::MAX, Duration::from_millis(3_500)).await;
        // Redis and the test read one clock: an allowed check sent and
        // answered within window w was counted in w.
        let first = times.iter().map(|t| t.0).min().unwrap() / WINDOW_US;
        let last = times.iter().map(|t| t.1).max().unwrap() / WINDOW_US;
        for w in first..=last {
            let within = times
                .iter()
                .filter(|(sent, answered)| sent / WINDOW_US == w && answered / WINDOW_US == w)
                .count();
            assert!(within <= LIMIT, "{algorithm}: window {w} admitted {within}");
        }
        let answered = sum(&apps, &format!("{UNITS}{{outcome=\"answered\"}}")).await;
        assert!(answered > 0.0, "{algorithm}: chunks answered checks");
        for app in Arc::try_unwrap(apps).ok().unwrap() {
            app.stop().await;
        }
    }
}

/// Checks on `app`, one after the other, until it reserved a chunk.
async fn until_leased(app: &TestApp, key: &str) {
    let series = format!("{UNITS}{{outcome=\"reserved\"}}");
    for _ in 0..10_000 {
        allowed(app, key).await;
        if app.metric(&series).await > 0.0 {
            return;
        }
    }
    panic!("no chunk reserved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_through_another_instance_voids_the_chunks() {
    let redis = RedisServer::start();
    const LIMIT: u64 = 2_000;
    let set = policies("fixed_window", LIMIT, "1h");
    let apps = instances(&redis.url(), &set, FailureMode::Closed).await;
    let key = unique_key("reset");
    until_leased(&apps[0], &key).await;
    let hour = now_us() / 3_600_000_000;
    let (status, body) = apps[1]
        .post("/v1/reset", &json!({"policy": "hot", "key": key}))
        .await;
    assert_eq!(status, 200, "{body}");
    let dropped = format!("{UNITS}{{outcome=\"dropped\"}}");
    for _ in 0..200 {
        if apps[0].metric(&dropped).await > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        apps[0].metric(&dropped).await > 0.0,
        "the chunk was dropped"
    );
    // What the reset left is the whole limit, and only that: a chunk from
    // before it would be spent on top.
    let drained = drain(&apps[0], &key).await;
    if now_us() / 3_600_000_000 == hour {
        assert_eq!(drained, LIMIT);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_chunk_is_spent_while_redis_is_down_and_no_more() {
    let mut redis = RedisServer::start();
    let set = policies("fixed_window", 10_000, "1h");
    let apps = instances(&redis.url(), &set, FailureMode::Closed).await;
    let key = unique_key("down");
    until_leased(&apps[0], &key).await;
    let reserved = apps[0]
        .metric(&format!("{UNITS}{{outcome=\"reserved\"}}"))
        .await;
    redis.kill();
    let mut while_down = 0.0;
    for _ in 0..200 {
        if allowed(&apps[0], &key).await {
            while_down += 1.0;
        }
    }
    assert!(while_down > 0.0, "the chunk answered");
    assert!(
        while_down <= reserved,
        "{while_down} allowed, {reserved} held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_stops_gives_its_chunks_back() {
    let redis = RedisServer::start();
    const LIMIT: u64 = 5_000;
    let set = policies("fixed_window", LIMIT, "1h");
    let mut apps = instances(&redis.url(), &set, FailureMode::Closed).await;
    let key = unique_key("stop");
    let hour = now_us() / 3_600_000_000;
    let mut spent = 0;
    let reserved = format!("{UNITS}{{outcome=\"reserved\"}}");
    while apps[0].metric(&reserved).await == 0.0 {
        assert!(allowed(&apps[0], &key).await);
        spent += 1;
    }
    let answered = format!("{UNITS}{{outcome=\"answered\"}}");
    assert_eq!(apps[0].metric(&answered).await, 0.0, "the chunk is unspent");
    // Straight away: before its TTL, the chunk goes back at shutdown.
    apps.remove(0).stop().await;
    let drained = drain(&apps[0], &key).await;
    if now_us() / 3_600_000_000 == hour {
        assert_eq!(spent + drained, LIMIT);
    }
}
