//! Where "now" comes from. Production uses the system clock (embedded store)
//! or Redis `TIME` (Redis store); tests drive a [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in microseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_us(&self) -> u64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        // A clock before 1970 is a broken host; treating it as the epoch keeps
        // the arithmetic total instead of panicking on a request path.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to. Shared by cloning.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(start_us: u64) -> Self {
        Self(Arc::new(AtomicU64::new(start_us)))
    }

    pub fn set_us(&self, now_us: u64) {
        self.0.store(now_us, Ordering::SeqCst);
    }

    pub fn advance_us(&self, by_us: u64) {
        self.0.fetch_add(by_us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Microseconds since this clock was made, from `Instant`: never steps back,
/// whatever the wall clock does. For measuring local durations.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock(std::time::Instant);

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock(std::time::Instant::now())
    }
}

impl Clock for MonotonicClock {
    fn now_us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
}
