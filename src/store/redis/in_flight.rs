//! The cap on operations sent to Redis and not yet answered
//! (`redis.max_in_flight`).

use std::sync::atomic::{AtomicUsize, Ordering};

/// `redis.max_in_flight`'s default.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4096;

/// Operations sent to Redis and not yet answered, and how many may be.
/// Redis applies them one after another; past what it can answer within
/// `redis.timeout`, more only queue to time out, and still run (and
/// spend) after their callers were answered by the failure policy, taking
/// Redis's time from the ones that could still be answered. A batch of
/// 100 checks on each of 64 connections is 6 400 operations at once.
///
/// A call past the cap waits for room (in order of arrival) rather than
/// being refused at once: callers that send again as soon as they are
/// answered would otherwise spin, and on a shared host take the CPU Redis
/// needs. It waits at most `redis.timeout`, then is refused.
pub(super) struct InFlight {
    permits: tokio::sync::Semaphore,
    cap: AtomicUsize,
}

impl InFlight {
    pub(super) fn new(cap: usize) -> InFlight {
        InFlight {
            permits: tokio::sync::Semaphore::new(cap),
            cap: AtomicUsize::new(cap),
        }
    }

    pub(super) fn set_cap(&self, cap: usize) {
        let before = self.cap.swap(cap, Ordering::AcqRel);
        if cap > before {
            self.permits.add_permits(cap - before);
        } else {
            self.permits.forget_permits(before - cap);
        }
    }

    /// Room for `n` operations (a call larger than the cap takes all of
    /// it), waiting up to `wait`; `None` if there was none by then.
    pub(super) async fn admit(
        &self,
        n: usize,
        wait: std::time::Duration,
    ) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let n = n.clamp(1, self.cap.load(Ordering::Relaxed)) as u32;
        if let Ok(permit) = self.permits.try_acquire_many(n) {
            return Some(permit);
        }
        tokio::time::timeout(wait, self.permits.acquire_many(n))
            .await
            .ok()?
            .ok()
    }
}

#[cfg(test)]
#[path = "in_flight_tests.rs"]
mod tests;
