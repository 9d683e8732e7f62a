//! One circuit breaker per failure domain (a Redis node), in a bounded map.
//!
//! A dead cluster primary opens only its own breaker: keys on the other
//! primaries keep reaching Redis. The map holds at most [`MAX_DOMAINS`]
//! breakers; domains beyond that share one overflow breaker, so a store
//! reporting many domains cannot grow memory without bound.
//!
//! Nodes come and go (a failover promotes a replica, a Kubernetes pod comes
//! back with a new address), so a breaker that has seen no call for
//! `Breakers::forget_after_us` is forgotten. Otherwise the old primary's
//! breaker would stay half-open for good (no check reaches that node
//! again), keeping the prober busy and the gauges wrong, and after enough
//! node changes every new node would share the overflow breaker.
//!
//! Domain 0 (a single server, the embedded store) lives in its own field,
//! so the hot path of a single server needs no map lookup; and a check on
//! a closed breaker is admitted from an atomic snapshot, without its lock,
//! so a check takes the lock once (to record its result), not twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use tracing::{debug, error, info, warn};

use super::breaker::{Breaker, BreakerConfig, State, Ticket, Transition};
use crate::domain::{Clock, FailureMode};
use crate::metrics::Metrics;
use crate::store::StoreError;

/// The most failure domains tracked one by one.
pub const MAX_DOMAINS: usize = 256;
/// The domain that the ones beyond [`MAX_DOMAINS`] share.
const OVERFLOW: u64 = u64::MAX;
/// A breaker idle this long is forgotten, or 10 × `open_for` if longer.
pub const FORGET_AFTER: Duration = Duration::from_secs(60);
/// `last_used_us` of a breaker that never saw a call.
const NEVER: u64 = u64::MAX;

/// What the log says when Redis refuses our credentials: an operator must
/// fix the configuration, waiting will not help.
pub const AUTH_HINT: &str = "Redis refused our credentials: check redis.url / redis.password_file";

/// One domain's breaker and what is read without its lock.
struct Slot {
    breaker: Mutex<Breaker>,
    /// [`Breaker::snapshot`], published under the lock after every change.
    snapshot: AtomicU64,
    /// When a call last came to this domain (clock µs), or [`NEVER`].
    /// Written only when it moved by more than a second, so that threads
    /// checking at once do not keep writing one cache line.
    last_used_us: AtomicU64,
    /// Set under the lock when the slot leaves the map: whoever still holds
    /// it changes no gauge, the forgetting already took its state off.
    forgotten: AtomicBool,
}

impl Slot {
    fn new(config: BreakerConfig, last_used_us: u64) -> Slot {
        let breaker = Breaker::new(config);
        Slot {
            snapshot: AtomicU64::new(breaker.snapshot()),
            breaker: Mutex::new(breaker),
            last_used_us: AtomicU64::new(last_used_us),
            forgotten: AtomicBool::new(false),
        }
    }

    /// A poisoned lock only means another check panicked mid-update; the
    /// breaker's state is still a valid state, so keep using it.
    fn lock(&self) -> MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, breaker: &Breaker) {
        let snapshot = breaker.snapshot();
        if self.snapshot.load(Ordering::Relaxed) != snapshot {
            self.snapshot.store(snapshot, Ordering::Release);
        }
    }

    fn used(&self, now_us: u64) {
        let last = self.last_used_us.load(Ordering::Relaxed);
        if last == NEVER || now_us.saturating_sub(last) >= 1_000_000 {
            self.last_used_us.store(now_us, Ordering::Relaxed);
        }
    }

    fn idle(&self, now_us: u64, forget_after_us: u64) -> bool {
        let last = self.last_used_us.load(Ordering::Relaxed);
        last == NEVER || now_us.saturating_sub(last) >= forget_after_us
    }
}

/// Permission to send one check to the store; give it back to
/// [`Breakers::record`].
pub struct Permit {
    domain: u64,
    /// `None` for domain 0.
    slot: Option<Arc<Slot>>,
    ticket: Ticket,
}

impl Permit {
    /// The failure domain it admits to.
    pub fn domain(&self) -> u64 {
        self.domain
    }
}

pub struct Breakers {
    config: BreakerConfig,
    clock: Arc<dyn Clock>,
    forget_after_us: u64,
    zero: Slot,
    map: RwLock<HashMap<u64, Arc<Slot>>>,
    metrics: Arc<Metrics>,
    store: &'static str,
    mode: FailureMode,
}

impl Breakers {
    pub fn new(
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        store: &'static str,
        mode: FailureMode,
    ) -> Breakers {
        // Domain 0 exists from the start, so readiness has a breaker to
        // look at before the first check.
        metrics.breakers.record(None, State::Closed);
        Breakers {
            config,
            clock,
            forget_after_us: forget_after_us(config),
            zero: Slot::new(config, NEVER),
            map: RwLock::new(HashMap::new()),
            metrics,
            store,
            mode,
        }
    }

    /// New settings, before any check: domain 0's breaker starts over.
    pub fn reconfigure(&mut self, config: BreakerConfig, clock: Arc<dyn Clock>) {
        let old = self.zero.lock().state();
        self.metrics.breakers.record(Some(old), State::Closed);
        self.zero = Slot::new(config, NEVER);
        self.config = config;
        self.clock = clock;
        self.forget_after_us = forget_after_us(config);
        let map = self.map.get_mut().unwrap_or_else(|e| e.into_inner());
        for slot in map.values() {
            self.metrics.breakers.forget(slot.lock().state());
        }
        map.clear();
    }

    /// The breakers' clock, in microseconds.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    fn slot(&self, domain: u64) -> (u64, Option<Arc<Slot>>) {
        if domain == 0 {
            return (0, None);
        }
        if let Some(slot) = self
            .map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&domain)
        {
            return (domain, Some(slot.clone()));
        }
        let now = self.clock.now_us();
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        // A node that went away must not take the place of a new one.
        self.sweep(&mut map, now);
        // Domain 0 is one of the MAX_DOMAINS, and so is OVERFLOW.
        let domain = if map.len() >= MAX_DOMAINS - 2 && !map.contains_key(&domain) {
            OVERFLOW
        } else {
            domain
        };
        let slot = map.entry(domain).or_insert_with(|| {
            if domain == OVERFLOW {
                warn!(
                    store = self.store,
                    "more than {MAX_DOMAINS} failure domains: the new ones share one circuit breaker, so an outage of one of them degrades them all"
                );
            }
            self.metrics.breakers.record(None, State::Closed);
            Arc::new(Slot::new(self.config, now))
        });
        (domain, Some(slot.clone()))
    }

    /// `Some` when a check on `domain` may go to the store now; `None`
    /// when the failure policy answers it.
    pub fn admit(&self, domain: u64) -> Option<Permit> {
        let (domain, slot) = self.slot(domain);
        let s = slot.as_deref().unwrap_or(&self.zero);
        // Closed: no lock, no clock (`record` notes the use).
        if let Some(ticket) = Ticket::from_snapshot(s.snapshot.load(Ordering::Acquire)) {
            return Some(Permit {
                domain,
                slot,
                ticket,
            });
        }
        let now = self.clock.now_us();
        s.used(now);
        let (ticket, transition) = {
            let mut b = s.lock();
            let (ticket, transition) = b.admit(now);
            s.publish(&b);
            let forgotten = s.forgotten.load(Ordering::Relaxed);
            (ticket, transition.filter(|_| !forgotten))
        };
        if let Some(t) = transition {
            self.transitioned(domain, State::Open, t, None);
        }
        Some(Permit {
            domain,
            slot,
            ticket: ticket?,
        })
    }

    /// How the permitted call ended. Only an unreachable or slow store
    /// counts as a failure; an answer, even an error reply, is a success.
    pub fn record(&self, permit: Permit, error: Option<&StoreError>) {
        let failed = error.is_some_and(StoreError::store_is_down);
        let s = permit.slot.as_deref().unwrap_or(&self.zero);
        let now = self.clock.now_us();
        s.used(now);
        let (from, transition) = {
            let mut b = s.lock();
            if s.forgotten.load(Ordering::Relaxed) {
                return;
            }
            let from = b.state();
            let transition = b.record(permit.ticket, failed, now);
            s.publish(&b);
            (from, transition)
        };
        if let Some(t) = transition {
            self.transitioned(permit.domain, from, t, error);
        }
    }

    /// The prober saw the store answer a ping: open breakers whose open
    /// period is over (all of them `at_once`, after a failed ping) go
    /// half-open.
    pub fn store_recovered(&self, at_once: bool) {
        let now = self.clock.now_us();
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let all = std::iter::once((0, &self.zero)).chain(map.iter().map(|(&d, s)| (d, &**s)));
        for (domain, slot) in all {
            let transition = {
                let mut b = slot.lock();
                let transition = b.store_recovered(now, at_once);
                slot.publish(&b);
                transition
            };
            if let Some(t) = transition {
                self.transitioned(domain, State::Open, t, None);
            }
        }
    }

    /// Forgets the breakers of domains that have seen no call for
    /// [`FORGET_AFTER`] (domain 0 stays). The prober calls it.
    pub fn forget_idle(&self) {
        let now = self.clock.now_us();
        let any = {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            map.values().any(|s| s.idle(now, self.forget_after_us))
        };
        if any {
            self.sweep(
                &mut self.map.write().unwrap_or_else(|e| e.into_inner()),
                now,
            );
        }
    }

    fn sweep(&self, map: &mut HashMap<u64, Arc<Slot>>, now: u64) {
        map.retain(|&domain, slot| {
            if !slot.idle(now, self.forget_after_us) {
                return true;
            }
            let b = slot.lock();
            slot.forgotten.store(true, Ordering::Relaxed);
            self.metrics.breakers.forget(b.state());
            debug!(
                store = self.store,
                domain,
                state = b.state().as_str(),
                "forgetting the circuit breaker of a failure domain that saw no check for a while"
            );
            false
        });
    }

    /// How many breakers are in each state, indexed by [`State`]. Domain 0
    /// counts only while it is the only one or is in use: in a cluster it
    /// sees no check and stays closed, and must not make an instance whose
    /// every primary's breaker is open look ready.
    pub fn counts(&self) -> [usize; 3] {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut counts = [0; 3];
        for slot in map.values() {
            counts[slot.lock().state() as usize] += 1;
        }
        if map.is_empty() || !self.zero.idle(self.clock.now_us(), self.forget_after_us) {
            counts[self.zero.lock().state() as usize] += 1;
        }
        counts
    }

    /// Metrics and one log line per transition.
    fn transitioned(&self, domain: u64, from: State, t: Transition, error: Option<&StoreError>) {
        self.metrics.breakers.record(Some(from), t.to());
        let store = self.store;
        match t {
            Transition::Opened(reason) => match error {
                Some(e @ StoreError::Auth(_)) => error!(
                    store,
                    domain,
                    error = %e,
                    "{AUTH_HINT}; failing {} meanwhile",
                    self.mode.as_str()
                ),
                Some(e @ StoreError::Tls(_)) => error!(
                    store,
                    domain,
                    error = %e,
                    "TLS to {store} failed: circuit breaker open, failing {} meanwhile",
                    self.mode.as_str()
                ),
                _ => warn!(
                    store,
                    domain,
                    reason = reason.as_str(),
                    error = error.map(tracing::field::display),
                    "{store} unreachable ({}): circuit breaker open, failing {}",
                    reason.as_str(),
                    self.mode.as_str()
                ),
            },
            Transition::HalfOpened => {
                debug!(store, domain, "circuit breaker half-open: trying one check")
            }
            // Not "back": the prober says that once for the store as a whole.
            Transition::Closed => info!(
                store,
                domain, "circuit breaker closed: checks reach {store} again"
            ),
        }
    }
}

impl Drop for Breakers {
    fn drop(&mut self) {
        self.metrics.breakers.forget(self.zero.lock().state());
        let map = self.map.get_mut().unwrap_or_else(|e| e.into_inner());
        for slot in map.values() {
            self.metrics.breakers.forget(slot.lock().state());
        }
    }
}

fn forget_after_us(config: BreakerConfig) -> u64 {
    FORGET_AFTER.max(config.open_for * 10).as_micros() as u64
}
