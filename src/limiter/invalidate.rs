//! Reset and refund end cached denials on every instance at once: this
//! instance's deny cache at once, the others' through the store (with
//! Redis, the pub/sub channel of `store/redis/invalidation.rs`), whose
//! listener feeds [`CacheSink`].

use std::sync::Arc;

use super::Limiter;
use super::deny_cache::DenyCache;
use super::lease::Leases;
use super::pipeline::{State, Step};
use super::wait::queue::Waiters;
use crate::metrics::Metrics;
use crate::store::{InvalidationSink, OpKind};

impl Limiter {
    /// Stage 7 of the pipeline: after whatever may have freed capacity,
    /// this instance's cached denials and leased chunks of the key end and
    /// its waiters wake (the other instances hear it from the store call
    /// itself), and what the store said about telling them is counted.
    ///
    /// Even after an error, even one that made no call: the script may
    /// have run before the reply was lost, and dropping entries is cheap
    /// and safe. A renewal frees nothing, nor does a release of a lease
    /// that was live nowhere.
    pub(super) fn invalidate(&self, step: &mut Step<'_, '_>) {
        if step.route.check {
            return;
        }
        let stored = step.published.take();
        let live = matches!(&step.state, State::Answered(Ok(a)) if a.lease == Some(true));
        let freed_nothing = match step.kind() {
            OpKind::Release => stored.is_some() && !live,
            kind => !kind.invalidates(),
        };
        if !freed_nothing {
            let check = step.check();
            self.invalidate_locally(&check.key);
            // A levels check's other levels are keys of their own. (The
            // other instances hear of the first level's key only: their
            // cached denials of the others last at most
            // `deny_cache::MAX_AGE`.)
            for (level, _) in check.level_ranges().into_iter().skip(1) {
                self.invalidate_locally(&level.key);
            }
        }
        if let Some(published) = stored {
            self.count_published(published);
        }
    }

    /// Ends every cached denial of the client `key` (all its policies and
    /// limits) on this instance. Call it right *after* the key's state
    /// changed in the store (a reset, a refund), never before: a check
    /// asking the store in between would cache the old state again. A
    /// denial this instance asked for before the call and records after
    /// it is refused (see `deny_cache.rs`). The other instances learn it
    /// from the store call that changed the state (see `lua/adjust.lua`).
    pub(super) fn invalidate_locally(&self, key: &str) {
        if let Some(cache) = &self.deny_cache {
            cache.invalidate(key);
        }
        if let Some(leases) = &self.leases {
            leases.invalidate(key);
        }
        // Capacity may be back: the line's head tries at once.
        self.waiting.waiters.wake(key);
    }

    /// Counts what the store call that changed a key's state said about
    /// telling the other instances. If its PUBLISH failed (counted as
    /// `ratekeeper_invalidations_sent_total{result="error"}` and logged),
    /// they may answer their cached denials of the key for up to
    /// `deny_cache::MAX_AGE` (1 s), unless they lost their subscription too
    /// (then they use no cache). A failed store call is counted as an
    /// error too: the script may or may not have run.
    pub(super) fn count_published(&self, published: Option<bool>) {
        match published {
            Some(true) => self.metrics.invalidations.sent_ok.inc(),
            None => {}
            Some(false) => {
                self.metrics.invalidations.sent_error.inc();
                tracing::warn!(
                    "cannot publish an invalidation (is the channel in the ACL user's channels?): other instances may keep cached denials of the key for up to 1 s, and spend leased chunks of it that a reset voided until their ttl"
                );
            }
        }
    }

    /// What the store's invalidation listener reports to: `None` without a
    /// deny cache or leases (nothing to invalidate).
    pub fn invalidation_sink(&self) -> Option<Arc<dyn InvalidationSink>> {
        if self.deny_cache.is_none() && self.leases.is_none() && self.tenants.is_none() {
            return None;
        }
        Some(Arc::new(CacheSink {
            cache: self.deny_cache.clone(),
            leases: self.leases.clone(),
            waiters: self.waiting.waiters.clone(),
            tenants: self.tenants.clone(),
            metrics: self.metrics.clone(),
        }))
    }

    /// Whether the deny cache is off until the subscription is back.
    pub fn deny_cache_suspended(&self) -> bool {
        self.deny_cache.as_ref().is_some_and(|c| c.is_suspended())
    }
}

/// The deny cache and the leased chunks as the listener sees them.
struct CacheSink {
    cache: Option<Arc<DenyCache>>,
    /// A reset or refund voids the key's chunks; a give-back does not.
    leases: Option<Arc<Leases>>,
    /// Woken too: a head sleeping out a denial that a reset ended.
    waiters: Arc<Waiters>,
    /// Told to reload when another instance changed an entry.
    tenants: Option<Arc<crate::tenants::Tenants>>,
    metrics: Arc<Metrics>,
}

impl InvalidationSink for CacheSink {
    // Counted after the cache changed, so whoever sees the count also
    // sees the invalidation (tests/stores/invalidation.rs relies on it).
    fn invalidated(&self, key: &str) {
        if let Some(leases) = &self.leases {
            leases.invalidate(key);
        }
        self.freed(key);
    }

    /// Capacity came back (another instance gave back a chunk): cached
    /// denials of the key end, and chunks stay (their reservations stand).
    fn freed(&self, key: &str) {
        if let Some(cache) = &self.cache {
            cache.invalidate(key);
        }
        self.waiters.wake(key);
        self.metrics.invalidations.received.inc();
    }

    fn tenants_changed(&self) {
        if let Some(tenants) = &self.tenants {
            tenants.wake();
        }
    }

    fn invalidated_all(&self) {
        if let Some(cache) = &self.cache {
            cache.clear();
        }
        if let Some(leases) = &self.leases {
            // Messages were lost: any of them may have been a reset.
            leases.drop_all();
        }
        self.waiters.wake_all();
        self.metrics.invalidations.received.inc();
    }

    fn subscribed(&self, up: bool) {
        if let Some(leases) = &self.leases {
            leases.subscribed(up);
        }
        if self.cache.is_none() && self.leases.is_none() {
            // Subscribed for the runtime entries alone, which their poll
            // backs up: the metric stays about the deny cache, as documented.
            return;
        }
        if up {
            if let Some(cache) = &self.cache {
                cache.resume();
            }
            // Resets published while we were not listening are lost:
            // every line's head asks the store again rather than sleep
            // out a denial one of them may have ended.
            self.waiters.wake_all();
            self.metrics.invalidations.subscribed.set(1);
        } else {
            let was_up = self.metrics.invalidations.subscribed.get() == 1;
            if let Some(cache) = &self.cache {
                cache.suspend();
            }
            self.metrics.invalidations.subscribed.set(0);
            if was_up {
                self.metrics.invalidations.subscription_lost.inc();
            }
        }
    }
}
