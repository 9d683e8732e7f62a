//! Failover measurement: a bounded load of concurrent checks against a
//! running service, recording when each was sent and answered, so failover
//! tests can say what clients saw before, during and after an outage.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{TestApp, redis_cli};

/// One answered (or failed) check.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Index into the bodies the load was started with.
    pub body: usize,
    pub sent: Instant,
    pub answered: Instant,
    /// HTTP status; 0 when the request itself failed or timed out.
    pub status: u16,
    pub degraded: bool,
}

impl Sample {
    pub fn latency(&self) -> Duration {
        self.answered - self.sent
    }
}

/// Workers sending checks in a loop until [`finish`](Load::finish), each
/// at most `max_per_worker` times, so the load is bounded even if the test
/// forgets to stop it.
pub struct Load {
    stop: Arc<AtomicBool>,
    samples: Samples,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long a load request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Load {
    /// `workers` tasks; worker `w` sends `bodies[w % len]`, then the next
    /// body, and so on, pausing `pause` between checks.
    pub fn start(
        app: Arc<TestApp>,
        bodies: Vec<Value>,
        workers: usize,
        pause: Duration,
        max_per_worker: usize,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Samples::default();
        let bodies = Arc::new(bodies);
        let tasks = (0..workers)
            .map(|w| {
                let (app, bodies) = (app.clone(), bodies.clone());
                let (stop, samples) = (stop.clone(), samples.clone());
                tokio::spawn(async move {
                    for i in 0..max_per_worker {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        let body = (w + i) % bodies.len();
                        samples.push(send(&app, body, &bodies[body]).await);
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            samples,
            tasks,
        }
    }

    /// Reads the samples recorded so far, from any thread.
    pub fn samples_handle(&self) -> impl Fn() -> Vec<Sample> + Send + Sync + 'static {
        let samples = self.samples.clone();
        move || samples.snapshot()
    }

    /// Stops the workers and returns every sample, in completion order.
    pub async fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Release);
        for task in self.tasks {
            task.await.expect("load worker panicked");
        }
        self.samples.snapshot()
    }
}

async fn send(app: &TestApp, body: usize, json: &Value) -> Sample {
    let sent = Instant::now();
    let response = app
        .http
        .post(app.url("/v1/check"))
        .json(json)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await;
    let (status, degraded) = match response {
        Ok(response) => {
            let status = response.status().as_u16();
            let json: Value = response.json().await.unwrap_or_default();
            (status, json["degraded"] != false)
        }
        Err(_) => (0, true),
    };
    Sample {
        body,
        sent,
        answered: Instant::now(),
        status,
        degraded,
    }
}

/// Samples shared by the workers and the test (a std Mutex: held for a
/// push or a copy, never across an await).
#[derive(Clone, Default)]
struct Samples(Arc<Mutex<Vec<Sample>>>);

impl Samples {
    fn push(&self, sample: Sample) {
        self.0.lock().unwrap().push(sample);
    }

    fn snapshot(&self) -> Vec<Sample> {
        self.0.lock().unwrap().clone()
    }
}

/// What clients of the keys selected by `of` saw after `since` (a kill).
#[derive(Debug)]
pub struct Outage {
    /// From `since` to the first non-degraded answer to a check sent after it.
    pub recovered_after: Option<Duration>,
    /// From `since` to the answer of the last degraded check.
    pub last_degraded_after: Option<Duration>,
    /// Checks answered, and of those degraded, from `since` on.
    pub checks: usize,
    pub degraded: usize,
}

impl Outage {
    pub fn measure(samples: &[Sample], since: Instant, of: impl Fn(usize) -> bool) -> Outage {
        let after: Vec<&Sample> = samples
            .iter()
            .filter(|s| of(s.body) && s.sent >= since)
            .collect();
        Outage {
            recovered_after: after
                .iter()
                .filter(|s| !s.degraded)
                .map(|s| s.answered - since)
                .min(),
            last_degraded_after: after
                .iter()
                .filter(|s| s.degraded)
                .map(|s| s.answered - since)
                .max(),
            checks: after.len(),
            degraded: after.iter().filter(|s| s.degraded).count(),
        }
    }
}

/// `number_of_cached_scripts` from INFO memory of the server on `port`.
pub fn cached_scripts(port: u16) -> u64 {
    let info = redis_cli(port, &["info", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO memory reports number_of_cached_scripts")
}

/// Polls the blocking `done` every 50 ms off the runtime's threads; returns
/// when it first held, or `None` after `limit`.
pub async fn wait_for(
    limit: Duration,
    done: impl Fn() -> bool + Send + Sync + 'static,
) -> Option<Instant> {
    let started = Instant::now();
    let done = Arc::new(done);
    while started.elapsed() < limit {
        let done = done.clone();
        if tokio::task::spawn_blocking(move || done()).await.unwrap() {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Milliseconds for a `FAILOVER ...` line, `none` for an absent duration.
pub fn ms(duration: Option<Duration>) -> String {
    duration.map_or("none".into(), |d| d.as_millis().to_string())
}

/// `redis.reconnect_max_delay` for the failover tests: 200 ms, or
/// `FAILOVER_RECONNECT_MAX_DELAY_MS` (bench/failover.sh measures the
/// default too). It bounds how late the client notices the new primary.
pub fn failover_reconnect_max_delay() -> Duration {
    let ms = std::env::var("FAILOVER_RECONNECT_MAX_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    Duration::from_millis(ms)
}

/// Every check of a failover run was answered, with 200, within the Redis
/// timeout plus `slack`; returns the slowest answer.
pub fn assert_answered_throughout(
    samples: &[Sample],
    timeout: std::time::Duration,
    slack: std::time::Duration,
) -> std::time::Duration {
    assert!(
        samples.iter().all(|s| s.status == 200),
        "every check is answered with 200 throughout"
    );
    let max_latency = samples.iter().map(|s| s.latency()).max().unwrap();
    assert!(
        max_latency <= timeout + slack,
        "a check took {max_latency:?}, over the Redis timeout {timeout:?} + {slack:?}"
    );
    max_latency
}
