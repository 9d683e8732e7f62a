//! One log line per interval for events a client can cause at its own
//! pace, so an attacker cannot write the log at the rate of its requests;
//! the events themselves are counted in metrics, never dropped.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Lets one log line through per interval, and counts the others. Lock
/// free: it sits on request paths.
pub struct LogThrottle {
    every_ms: u64,
    /// When the next line may be logged, in ms after [`epoch`].
    next_ms: AtomicU64,
    /// Lines not logged since the last one.
    skipped: AtomicU64,
}

impl LogThrottle {
    pub const fn new(every: Duration) -> LogThrottle {
        LogThrottle {
            every_ms: every.as_millis() as u64,
            next_ms: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// `Some(lines not logged since the last one)` if this one may log.
    pub fn admit(&self) -> Option<u64> {
        let now = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        let until = now.saturating_add(self.every_ms);
        let ours = now >= next
            && self
                .next_ms
                .compare_exchange(next, until, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if ours {
            Some(self.skipped.swap(0, Ordering::Relaxed))
        } else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// A fixed instant the throttles' times are counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_one_line_through_per_interval_and_counts_the_rest() {
        let log = LogThrottle::new(Duration::from_secs(10));
        assert_eq!(log.admit(), Some(0));
        assert_eq!(log.admit(), None);
        assert_eq!(log.admit(), None);
        // As if the interval had passed: the next line tells the two.
        log.next_ms.store(0, Ordering::Relaxed);
        assert_eq!(log.admit(), Some(2));
        assert_eq!(log.admit(), None);
    }
}
