//! A lease being acquired is released unless its answer reached the
//! caller: see [`LeaseGuard`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Limiter;
use super::deny_cache::DenyCache;
use super::wait::queue::Waiters;
use crate::domain::{Check, LeaseId};
use crate::store::{Op, Store};

/// A lease being acquired, released unless its answer came back. Without
/// it, a client that hangs up while the store call is under way (hyper
/// drops the request's future) would leave a lease the store took and
/// nobody knows the id of, holding a slot for its whole TTL; so would a
/// call whose reply was lost (a timeout) after the script ran. Either way
/// the guard drops armed and a release goes out, on its own task
/// ([`release_unanswered`]).
pub(super) struct LeaseGuard {
    store: Arc<dyn Store>,
    cache: Option<Arc<DenyCache>>,
    waiters: Arc<Waiters>,
    held: Option<(Check, LeaseId)>,
}

impl LeaseGuard {
    /// Armed for the call acquiring `lease` for `check`.
    pub(super) fn new(limiter: &Limiter, check: &Check, lease: &LeaseId) -> LeaseGuard {
        LeaseGuard {
            store: limiter.store.clone(),
            cache: limiter.deny_cache.clone(),
            waiters: limiter.waiting.waiters.clone(),
            held: Some((check.clone(), lease.clone())),
        }
    }

    /// The store answered: the caller gets the lease (or none was taken).
    pub(super) fn disarm(mut self) {
        self.held = None;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some((check, lease)) = self.held.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, cache, waiters) = (self.store.clone(), self.cache.take(), self.waiters.clone());
        runtime.spawn(async move {
            if release_unanswered(store.as_ref(), &check, &lease).await {
                tracing::debug!("released a lease whose answer was never delivered");
                if let Some(cache) = cache {
                    cache.invalidate(&check.key);
                }
                waiters.wake(&check.key);
            }
        });
    }
}

/// The first wait between two releases the store did not answer; it
/// doubles up to [`RELEASE_BACKOFF_MAX`].
const RELEASE_BACKOFF: Duration = Duration::from_millis(100);
const RELEASE_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// After a release answered "no such lease": the acquire may still be
/// queued behind it on another connection of the pool (a Redis waking
/// from a freeze serves its connections in no set order), so one more
/// try this much later settles it.
const RELEASE_RECHECK: Duration = Duration::from_secs(1);

/// Frees `lease`, which an acquire that nobody got the answer of may have
/// taken; true if it was held. A store that does not answer (frozen, down)
/// is asked again, with back-off, until it answers, for as long as the
/// lease could live (its TTL): an acquire written to a frozen Redis runs
/// when it wakes, however late, and timed-out releases sent before then
/// may have run before it, or died with their connection. Nothing is
/// freed that the caller holds: nobody but this task knows the id.
async fn release_unanswered(store: &dyn Store, check: &Check, lease: &LeaseId) -> bool {
    let ttl = check.concurrency().map_or(Duration::ZERO, |limit| {
        Duration::from_micros(limit.rule.window_us())
    });
    let give_up = Instant::now() + ttl;
    let mut backoff = RELEASE_BACKOFF;
    let mut seen_absent = false;
    loop {
        let released = store.apply(&[Op::release(check, lease)]).await;
        match released.first() {
            Some(Ok(applied)) if applied.lease == Some(true) => return true,
            Some(Ok(_)) if seen_absent => return false,
            Some(Ok(_)) => seen_absent = true,
            // No answer: ask again once the store may be back.
            _ => {}
        }
        let wait = if seen_absent {
            RELEASE_RECHECK
        } else {
            backoff
        };
        if Instant::now() + wait >= give_up {
            return false;
        }
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(RELEASE_BACKOFF_MAX);
    }
}
