//! Bytes per key of the embedded store, for docs/algorithms.md's table:
//! fills a fresh store with 1M keys per algorithm at typical rules and
//! reads the process's resident memory before and after.
//!
//!     cargo run --release --example memory_per_key

use std::sync::Arc;

use ratekeeper::domain::{Algorithm, Check, ManualClock, Rule};
use ratekeeper::store::memory::MemoryStore;

const KEYS: usize = 1_000_000;

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

const CASES: [(Algorithm, u64, &str); 6] = [
    (Algorithm::FixedWindow, 1, "1 admitted"),
    (Algorithm::SlidingWindow, 1, "1 admitted"),
    (Algorithm::SlidingLog, 1, "1 logged entry"),
    (
        Algorithm::SlidingLog,
        10,
        "10 units at one instant (one run-length entry)",
    ),
    (Algorithm::TokenBucket, 1, "1 spent"),
    (Algorithm::Gcra, 1, "1 spent"),
];

/// Each case runs in its own process: freed memory is not returned to the
/// system reliably, so one process per measurement keeps them independent.
fn main() {
    if let Some(case) = std::env::args().nth(1) {
        measure(case.parse().expect("case index"));
        return;
    }
    println!(
        "| algorithm | rule | state per key | bytes per key (RSS, {KEYS} keys like \"user:1234567\") |"
    );
    println!("|---|---|---|---|");
    for case in 0..CASES.len() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .arg(case.to_string())
            .output()
            .expect("run a measurement");
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

fn measure(case: usize) {
    let (algorithm, cost, what) = CASES[case];
    let clock = ManualClock::new(1_767_225_600_000_000);
    let store = MemoryStore::new(Arc::new(clock.clone()), 2 * KEYS);
    let rule = Rule {
        algorithm,
        limit: 100,
        window: ratekeeper::domain::Window::Length(60_000_000),
        burst: 100,
    };
    let before = resident_bytes();
    for i in 0..KEYS {
        let check = Check::single(format!("user:{i:07}"), rule, cost);
        clock.advance_us(1);
        store.check_now(&check).expect("room for every key");
    }
    let after = resident_bytes();
    assert_eq!(store.len(), KEYS);
    println!(
        "| {algorithm} | 100 per 1m | {what} | {} |",
        after.saturating_sub(before) / KEYS
    );
}
