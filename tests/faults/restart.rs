//! Issue 6, defect 5: a Redis restart (empty data, empty script cache) on
//! the batched path. The issue saw 317–322 ms of degraded answers with
//! batching on, failing closed (about 125 wrongful denials), against 1 ms
//! on the direct path.
//!
//! One limiter, wired as `Application::build_with` wires it (default
//! `[redis]`, `[breaker]` and prober settings, two pool connections), fails
//! closed under steady concurrent load while its redis-server is killed and
//! started again on the same port. Degraded answers while Redis is down are
//! right; the defect is degraded answers once it is back.
//!
//! `restart_recovery_numbers` (ignored; `bash bench/restart.sh` runs it)
//! records several restarts on each path.

use crate::support;
use crate::support::LimiterExt;
use crate::support::StoreExt;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ratekeeper::domain::{Algorithm, Check, MonotonicClock, Outcome};
use ratekeeper::limiter::breaker::BreakerConfig;
use ratekeeper::limiter::{FailureMode, FailurePolicy, Limiter};
use ratekeeper::metrics::Metrics;
use ratekeeper::store::redis::RedisStore;
use ratekeeper::store::{Applied, Op, OpKind, Store, StoreError};
use support::{RedisServer, settings, unique_key};

/// Concurrent callers, each pausing `PACE` between checks: about 10 000
/// checks/s, enough for the batcher to form batches.
const WORKERS: usize = 48;
const PACE: Duration = Duration::from_millis(2);
/// Load before the restart, and after the new server answers PING: longer
/// than `breaker.open_for` (1 s), so an opened breaker shows in full.
const WARM: Duration = Duration::from_millis(300);
const AFTER: Duration = Duration::from_millis(1500);

const BATCHED: Duration = Duration::from_micros(100);
const DIRECT: Duration = Duration::ZERO;

/// What one restart cost the callers. Times are from `back`, the moment the
/// new server answered the harness's PING (polled every 20 ms).
#[derive(Debug, Clone)]
struct Recovery {
    /// From the kill to `back`.
    down_ms: f64,
    /// Degraded answers between the kill and `back`.
    degraded_while_down: usize,
    /// Degraded answers after `back`.
    degraded_after_back: usize,
    /// Degraded answers after the first answer Redis gave once back.
    degraded_after_first_ok: usize,
    /// Of the store errors after that first answer, the checks that timed
    /// out on their own (each answers degraded once).
    timeouts_after_first_ok: usize,
    /// From `back` to the first answer Redis gave.
    first_ok_ms: f64,
    /// From `back` to the last degraded answer (0 if none).
    last_degraded_ms: f64,
    answers_after_back: usize,
    breaker_opened: u64,
    /// The store errors, in runs of one kind: "kind×count @from–to ms"
    /// (from the kill).
    errors: String,
}

fn check(key: &str, algorithm: Algorithm) -> Check {
    support::check(key, algorithm, 100_000, "1m", 1)
}

/// The real store, noting when each failed check failed and how.
struct Noting {
    inner: RedisStore,
    start: Instant,
    errors: Mutex<Vec<(Duration, &'static str)>>,
}

impl Noting {
    /// A check alone, as [`Store::apply`] below sends each.
    async fn check_alone(&self, check: &Check) -> Result<Vec<Outcome>, StoreError> {
        let result = self.inner.check(check).await;
        if let Err(e) = &result {
            let at = self.start.elapsed();
            self.errors.lock().unwrap().push((at, e.kind()));
        }
        result
    }
}

#[async_trait]
impl Store for Noting {
    /// Checks through [`check_alone`](Self::check_alone); the rest as the
    /// wrapped store does.
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            answers.push(match op.kind {
                OpKind::Check => self.check_alone(op.check).await.map(Applied::unshared),
                _ => self.inner.apply(&[*op]).await.remove(0),
            });
        }
        answers
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// A limiter failing closed over `redis`, as the application builds it.
async fn limiter(
    redis: &RedisServer,
    batch_window: Duration,
    start: Instant,
) -> (Arc<Limiter>, Arc<Noting>, Arc<Metrics>) {
    let mut config = settings(Some(&redis.url()));
    let r = config.redis.as_mut().unwrap();
    r.pool_size = 2;
    r.batch_window = batch_window;
    let probe = r.probe_interval;
    let inner = RedisStore::connect(r.clone()).expect("client builds");
    assert!(inner.wait_connected(Duration::from_secs(5)).await);
    let store = Arc::new(Noting {
        inner,
        start,
        errors: Mutex::default(),
    });
    let breaker = BreakerConfig {
        trial_interval: probe,
        ..config.breaker
    };
    let policy = FailurePolicy {
        mode: FailureMode::Closed,
        ..config.failure
    };
    let metrics = Arc::new(Metrics::new());
    let limiter = Arc::new(
        Limiter::new(store.clone(), policy, metrics.clone())
            .with_breaker(breaker, Arc::new(MonotonicClock::default())),
    );
    limiter.probe().await;
    assert!(limiter.is_ready());
    // It ends with the limiter: the prober holds only a weak reference.
    drop(limiter.spawn_prober(probe));
    (limiter, store, metrics)
}

/// Runs steady load, kills `redis` once it is warm, starts it again after
/// `down`, keeps the load up for [`AFTER`], and measures what the callers
/// saw.
async fn restart_under_load(
    redis: RedisServer,
    batch_window: Duration,
    down: Duration,
) -> (Recovery, RedisServer) {
    let start = Instant::now();
    let (limiter, store, metrics) = limiter(&redis, batch_window, start).await;
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            let check = check(&unique_key("restart"), Algorithm::RATES[w % 5]);
            tokio::spawn(async move {
                // (completed at, degraded) of every answer.
                let mut answers = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let decision = limiter.check(&check).await.expect("no store bug");
                    answers.push((start.elapsed(), decision.degraded));
                    tokio::time::sleep(PACE).await;
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep(WARM).await;
    let kill = start.elapsed();
    let (redis, back) = tokio::task::spawn_blocking(move || {
        let mut redis = redis;
        redis.kill();
        std::thread::sleep(down);
        redis.restart();
        (redis, start.elapsed())
    })
    .await
    .unwrap();
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for worker in workers {
        answers.extend(worker.await.unwrap());
    }
    answers.sort();
    store.inner.quit().await;
    let errors = store.errors.lock().unwrap().clone();
    let mut recovery = measure(&answers, kill, back, &errors);
    recovery.breaker_opened = metrics.breakers.opened.get();
    (recovery, redis)
}

fn measure(
    answers: &[(Duration, bool)],
    kill: Duration,
    back: Duration,
    errors: &[(Duration, &'static str)],
) -> Recovery {
    let ms = |from: Duration, at: Duration| at.saturating_sub(from).as_secs_f64() * 1e3;
    let after: Vec<_> = answers.iter().filter(|(at, _)| *at > back).collect();
    let first_ok = after.iter().find(|(_, degraded)| !degraded).map(|a| a.0);
    let degraded: Vec<Duration> = after.iter().filter(|a| a.1).map(|a| a.0).collect();
    Recovery {
        down_ms: ms(kill, back),
        degraded_while_down: answers
            .iter()
            .filter(|(at, degraded)| *degraded && *at > kill && *at <= back)
            .count(),
        degraded_after_back: degraded.len(),
        degraded_after_first_ok: first_ok.map_or(degraded.len(), |ok| {
            degraded.iter().filter(|&&d| d > ok).count()
        }),
        timeouts_after_first_ok: first_ok.map_or(0, |ok| {
            errors
                .iter()
                .filter(|(at, kind)| *at > ok && *kind == "timeout")
                .count()
        }),
        first_ok_ms: first_ok.map_or(f64::INFINITY, |ok| ms(back, ok)),
        last_degraded_ms: degraded.last().map_or(0.0, |&d| ms(back, d)),
        answers_after_back: after.len(),
        breaker_opened: 0,
        errors: error_runs(errors, kill),
    }
}

fn error_runs(errors: &[(Duration, &'static str)], kill: Duration) -> String {
    let ms = |at: Duration| at.as_millis() as i128 - kill.as_millis() as i128;
    let mut text = String::new();
    for run in errors.chunk_by(|a, b| a.1 == b.1) {
        let (first, last) = (run[0].0, run[run.len() - 1].0);
        let _ = write!(
            text,
            "{}{}×{} @{}–{} ms",
            if text.is_empty() { "" } else { ", " },
            run[0].1,
            run.len(),
            ms(first),
            ms(last)
        );
    }
    if text.is_empty() {
        text.push_str("none");
    }
    text
}

/// Once Redis is back, the batched path, like the direct one, answers
/// (almost) nothing degraded: only the checks in flight at the kill, or
/// queued while the pool reconnected, are answered by policy. Before the
/// fix, the failures of the checks in flight at the kill (each counted on
/// its own, up to 128 for one batch call) opened the breaker, which then
/// answered about 1 s of checks by policy although Redis was back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_batched_checks_recover_like_direct_ones() {
    let redis = RedisServer::start();
    let (direct, redis) = restart_under_load(redis, DIRECT, Duration::ZERO).await;
    let (batched, _redis) = restart_under_load(redis, BATCHED, Duration::ZERO).await;
    eprintln!("direct: {direct:?}\nbatched: {batched:?}");
    for (path, r) in [("direct", direct), ("batched", batched)] {
        assert!(r.first_ok_ms.is_finite(), "{path}: Redis never answered");
        // A check whose own call outran `redis.timeout` once Redis was back
        // (the machine stalled: CI once saw 17 at one instant, 800 ms after
        // the restart, with the breaker shut) is not what this test is
        // about; answers by policy with no such reason are (an open
        // breaker, a pool that did not come back). A stall long or
        // frequent enough to matter still fails the share below.
        let unexplained = r
            .degraded_after_first_ok
            .saturating_sub(r.timeouts_after_first_ok);
        assert!(
            unexplained <= 2,
            "{path}: degraded answers after Redis answered again: {r:?}"
        );
        assert_eq!(r.breaker_opened, 0, "{path}: the breaker opened: {r:?}");
        // Timing-free: the share of the load answered by policy once the
        // server is back. An opened breaker makes it about 2/3 (1 s of 1.5 s).
        assert!(
            r.degraded_after_back * 20 <= r.answers_after_back,
            "{path}: over 5% of the answers after the restart were degraded: {r:?}"
        );
    }
}

/// The record for `bench/restart.sh`: `RESTART_ROUNDS` restarts (default
/// 10) on each path, alternating, with the server down `RESTART_DOWN_MS`
/// (default 0: started again at once), as Markdown into `RESTART_OUT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by bench/restart.sh"]
async fn restart_recovery_numbers() {
    let rounds: usize = std::env::var("RESTART_ROUNDS").map_or(10, |v| v.parse().unwrap());
    let down =
        Duration::from_millis(std::env::var("RESTART_DOWN_MS").map_or(0, |v| v.parse().unwrap()));
    let mut redis = RedisServer::start();
    let mut table = format!(
        "\n## Server down {} ms before it starts again\n\n",
        down.as_millis()
    );
    table.push_str(
        "| path | round | down ms | degraded while down | degraded after back | \
         degraded after first answer | first answer ms | last degraded ms | \
         answers after back | breaker opened | store errors (from the kill) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut totals = Vec::new();
    for round in 1..=rounds {
        for (path, window) in [("direct", DIRECT), ("batched", BATCHED)] {
            let (r, next) = restart_under_load(redis, window, down).await;
            redis = next;
            let _ = writeln!(
                table,
                "| {path} | {round} | {:.0} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {} |",
                r.down_ms,
                r.degraded_while_down,
                r.degraded_after_back,
                r.degraded_after_first_ok,
                r.first_ok_ms,
                r.last_degraded_ms,
                r.answers_after_back,
                r.breaker_opened,
                r.errors
            );
            totals.push((path, r));
        }
    }
    table.push('\n');
    for path in ["direct", "batched"] {
        let runs: Vec<&Recovery> = totals
            .iter()
            .filter(|t| t.0 == path)
            .map(|t| &t.1)
            .collect();
        let n = runs.len() as f64;
        let mean = |f: &dyn Fn(&Recovery) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n;
        let _ = writeln!(
            table,
            "- **{path}**, mean of {n}: {:.1} degraded answers after the server was back \
             ({:.1} after Redis's first answer), the last {:.1} ms after it; \
             {:.1} degraded while it was down; breaker opened in {} of {n} restarts.",
            mean(&|r| r.degraded_after_back as f64),
            mean(&|r| r.degraded_after_first_ok as f64),
            mean(&|r| r.last_degraded_ms),
            mean(&|r| r.degraded_while_down as f64),
            runs.iter().filter(|r| r.breaker_opened > 0).count(),
        );
    }
    match std::env::var("RESTART_OUT") {
        Ok(path) => std::fs::write(path, table).unwrap(),
        Err(_) => println!("{table}"),
    }
}
