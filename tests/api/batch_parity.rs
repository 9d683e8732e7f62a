//! Each check of a batch is answered as the same check sent alone to
//! `POST /v1/check`: random batches to one instance, the same checks one
//! by one to another, on the embedded store and on a real redis-server.

use serde_json::{Value, json};

use crate::batch_support::{ALGORITHMS, START_US, batch, results, spawn_on, split};
use crate::support::{RedisServer, TestApp};
use ratekeeper::domain::ManualClock;

/// A small deterministic generator (xorshift64*), so a failure names a
/// seed that replays it (`BATCH_SEED=...`).
struct Rng(u64);

impl Rng {
    fn seeded() -> (Rng, u64) {
        let seed = std::env::var("BATCH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        (Rng(seed | 1), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// In `low..=high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64 - 1) as usize]
    }

    /// True one time in `n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.range(1, n) == 1
    }
}

const WINDOWS: [&str; 4] = ["1s", "10s", "1m", "1h"];
/// Few keys, so checks meet on them; `b` has an override in `multi`.
const KEYS: [&str; 3] = ["a", "b", "c"];

/// A random rule (limits small enough to be reached) and its capacity.
fn rule(rng: &mut Rng) -> (serde_json::Map<String, Value>, u64) {
    let algorithm = *rng.pick(&ALGORITHMS);
    let limit = rng.range(1, 5);
    let mut rule = serde_json::Map::new();
    rule.insert("algorithm".into(), json!(algorithm));
    rule.insert("limit".into(), json!(limit));
    rule.insert("window".into(), json!(rng.pick(&WINDOWS)));
    let mut capacity = limit;
    if matches!(algorithm, "token_bucket" | "gcra") && rng.one_in(2) {
        capacity = rng.range(1, 6);
        rule.insert("burst".into(), json!(capacity));
    }
    (rule, capacity)
}

/// A cost of 0 up to `capacity`, or none (1).
fn with_cost(rng: &mut Rng, check: &mut serde_json::Map<String, Value>, capacity: u64) {
    if !rng.one_in(3) {
        check.insert("cost".into(), json!(rng.range(0, capacity.min(3))));
    }
}

/// One check: any of the three forms, any algorithm, now and then an
/// invalid one (each answered 422 by `POST /v1/check` too).
fn random_check(rng: &mut Rng) -> Value {
    let key = *rng.pick(&KEYS);
    if rng.one_in(10) {
        return match rng.range(0, 6) {
            0 => json!({"key": key, "limit": 0, "window": "1m"}),
            1 => json!({"policy": "multi", "key": key, "limit": 3, "window": "1m"}),
            2 => json!({"policy": "nope", "key": key}),
            3 => json!({"key": key, "limit": 2, "window": "1m", "cost": 5}),
            4 => json!({"key": key, "limit": 2, "window": "1m", "algorithm": "leaky"}),
            5 => json!(7),
            _ => json!({"key": key, "limits": []}),
        };
    }
    match rng.range(0, 2) {
        0 => {
            let (mut check, capacity) = rule(rng);
            check.insert("key".into(), json!(key));
            with_cost(rng, &mut check, capacity);
            Value::Object(check)
        }
        1 => {
            let (mut limits, mut pairs, mut capacity) = (Vec::new(), Vec::new(), u64::MAX);
            for i in 0..rng.range(1, 3) {
                let (mut limit, cap) = rule(rng);
                // Inline state is kept by algorithm and window: one pair once.
                let pair = (limit["algorithm"].clone(), limit["window"].clone());
                if pairs.contains(&pair) {
                    continue;
                }
                pairs.push(pair);
                if rng.one_in(2) {
                    limit.insert("name".into(), json!(format!("l{i}")));
                }
                capacity = capacity.min(cap);
                limits.push(Value::Object(limit));
            }
            let mut check = serde_json::Map::new();
            check.insert("key".into(), json!(key));
            check.insert("limits".into(), Value::Array(limits));
            with_cost(rng, &mut check, capacity);
            Value::Object(check)
        }
        _ => {
            let policy = *rng.pick(&["multi", "logs", "trial"]);
            let mut check = serde_json::Map::new();
            check.insert("policy".into(), json!(policy));
            check.insert("key".into(), json!(key));
            // The smallest capacity of any of them (`multi` for `b`: 2).
            with_cost(rng, &mut check, 2);
            Value::Object(check)
        }
    }
}

/// Sorted `ratekeeper_checks_total` series of `app`.
async fn decision_series(app: &TestApp) -> Vec<String> {
    let text = app.get("/metrics").await.text().await.unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("ratekeeper_checks_total{"))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// Random batches to one instance, the same checks one by one through
/// `POST /v1/check` to another, both on one manual clock, answer for
/// answer.
///
/// Without the deny cache, every field must be equal, and the clock moves
/// between batches (by 0 to 61 s) so windows roll and buckets refill.
/// With it, the clock stands still: the cache measures its entries on the
/// real monotonic clock, so a jump of the manual one would let a store
/// allow what a cached denial still denies, on one instance and not the
/// other. And only what the cache answers exactly is compared (the
/// decision, `remaining`, `degraded`, the policy and shadow): which checks
/// it answers differs by design (a batch looks them all up before its one
/// store call, a lone check after the one before it was recorded), and it
/// reports an allowing limit's state and the wait as recorded (see
/// `limiter/deny_cache.rs`).
async fn differential(redis: bool, deny_cache: bool) {
    let (mut rng, seed) = Rng::seeded();
    let server = redis.then(RedisServer::start);
    let clock = ManualClock::new(START_US);
    let batched = spawn_on(&clock, server.as_ref(), "rk-batch:", deny_cache).await;
    let single = spawn_on(&clock, server.as_ref(), "rk-single:", deny_cache).await;
    let mut compared = 0;
    for round in 0..40 {
        let checks: Vec<Value> = (0..rng.range(1, 25))
            .map(|_| random_check(&mut rng))
            .collect();
        let answers = results(batch(&batched, &checks).await);
        assert_eq!(answers.len(), checks.len());
        for (i, (check, answer)) in checks.iter().zip(&answers).enumerate() {
            let at = format!("seed {seed}, round {round}, check {i}: {check}");
            let (status, body) = split(answer);
            let (alone_status, alone) = single.check(check.clone()).await;
            assert_eq!(status, alone_status, "{at}\nbatch: {body}\nalone: {alone}");
            if deny_cache && status == 200 {
                for field in ["allowed", "remaining", "degraded", "policy", "shadow"] {
                    assert_eq!(
                        body[field], alone[field],
                        "{at} {field}\nbatch: {body}\nalone: {alone}"
                    );
                }
            } else {
                assert_eq!(body, alone, "{at}");
            }
            compared += 1;
        }
        if !deny_cache {
            let step = *rng.pick(&[0, 1_000, 300_000, 1_000_000, 7_000_000, 61_000_000]);
            clock.advance_us(step);
        }
    }
    assert!(compared > 100, "{compared}");
    // Each check counted once, by the same labels, on both.
    assert_eq!(
        decision_series(&batched).await,
        decision_series(&single).await,
        "seed {seed}"
    );
}

#[tokio::test]
async fn batches_answer_as_checks_alone_memory() {
    differential(false, false).await;
}

#[tokio::test]
async fn batches_answer_as_checks_alone_redis() {
    differential(true, false).await;
}

#[tokio::test]
async fn batches_answer_as_checks_alone_with_the_deny_cache_memory() {
    differential(false, true).await;
}

#[tokio::test]
async fn batches_answer_as_checks_alone_with_the_deny_cache_redis() {
    differential(true, true).await;
}
