//! A micro-benchmark of the breaker on the hot path: `admit` + `record` of
//! a successful check, 1M pairs on each of 2 threads, on one failure domain
//! (a single Redis server: every thread shares one breaker). Ignored by
//! default and asserts nothing about time; run it in release:
//! `cargo test --release --test faults breaker_bench -- --ignored --nocapture`.
//! Results: `bench/results/breaker_hot_path.md`.

use std::sync::Arc;
use std::time::Instant;

use ratekeeper::domain::{FailureMode, MonotonicClock};
use ratekeeper::limiter::breaker::BreakerConfig;
use ratekeeper::limiter::domains::Breakers;
use ratekeeper::metrics::Metrics;

const PAIRS: u32 = 1_000_000;
const THREADS: u32 = 2;

#[test]
#[ignore]
fn admit_and_record_per_check() {
    let breakers = Arc::new(Breakers::new(
        BreakerConfig::default(),
        Arc::new(MonotonicClock::default()),
        Arc::new(Metrics::new()),
        "redis",
        FailureMode::Open,
    ));
    for domain in [0u64, 7] {
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                let breakers = &breakers;
                s.spawn(move || {
                    for _ in 0..PAIRS {
                        let permit = breakers.admit(domain).expect("closed");
                        breakers.record(permit, None);
                    }
                });
            }
        });
        let elapsed = started.elapsed();
        // Wall time per pair on one thread: what one check waits.
        let ns = elapsed.as_nanos() as f64 / PAIRS as f64;
        println!(
            "domain {domain}: {THREADS} threads x {PAIRS} admit+record: {:?}, {ns:.1} ns per check per thread",
            elapsed
        );
    }
}
