//! One circuit breaker per failure domain (a Redis node), in a bounded map.
//!
//! A dead cluster primary opens only its own breaker: keys on the other
//! primaries keep reaching Redis. The map holds at most [`MAX_DOMAINS`]
//! breakers; domains beyond that share one overflow breaker, so a store
//! reporting many domains cannot grow memory without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tracing::{debug, error, info, warn};

use super::breaker::{Breaker, BreakerConfig, State, Ticket, Transition};
use crate::domain::{Clock, FailureMode};
use crate::metrics::Metrics;
use crate::store::StoreError;

/// The most failure domains tracked one by one.
pub const MAX_DOMAINS: usize = 256;
/// The domain that the ones beyond [`MAX_DOMAINS`] share.
const OVERFLOW: u64 = u64::MAX;

/// What the log says when Redis refuses our credentials: an operator must
/// fix the configuration, waiting will not help.
pub const AUTH_HINT: &str = "Redis refused our credentials: check redis.url / redis.password_file";

type Shared = Arc<Mutex<Breaker>>;

/// Permission to send one check to the store; give it back to
/// [`Breakers::record`].
pub struct Permit {
    domain: u64,
    breaker: Shared,
    ticket: Ticket,
}

pub struct Breakers {
    config: BreakerConfig,
    clock: Arc<dyn Clock>,
    map: RwLock<HashMap<u64, Shared>>,
    metrics: Arc<Metrics>,
    store: &'static str,
    mode: FailureMode,
}

/// A poisoned lock only means another check panicked mid-update; the
/// breaker's state is still a valid state, so keep using it.
fn lock(breaker: &Mutex<Breaker>) -> std::sync::MutexGuard<'_, Breaker> {
    breaker.lock().unwrap_or_else(|e| e.into_inner())
}

impl Breakers {
    pub fn new(
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        store: &'static str,
        mode: FailureMode,
    ) -> Breakers {
        let breakers = Breakers {
            config,
            clock,
            map: RwLock::new(HashMap::new()),
            metrics,
            store,
            mode,
        };
        // Domain 0 (a single server) exists from the start, so readiness
        // has a breaker to look at before the first check.
        breakers.get(0);
        breakers
    }

    fn get(&self, domain: u64) -> (u64, Shared) {
        if let Some(b) = self
            .map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&domain)
        {
            return (domain, b.clone());
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let domain = if map.len() >= MAX_DOMAINS - 1 && !map.contains_key(&domain) {
            OVERFLOW
        } else {
            domain
        };
        let breaker = map.entry(domain).or_insert_with(|| {
            self.metrics.record_breaker(None, State::Closed);
            Arc::new(Mutex::new(Breaker::new(self.config)))
        });
        (domain, breaker.clone())
    }

    /// `Some` when a check on `domain` may go to the store now; `None`
    /// when the failure policy answers it.
    pub fn admit(&self, domain: u64) -> Option<Permit> {
        let (domain, breaker) = self.get(domain);
        let (ticket, transition) = {
            let mut b = lock(&breaker);
            b.admit(self.clock.now_us())
        };
        if let Some(t) = transition {
            self.transitioned(domain, State::Open, t, None);
        }
        Some(Permit {
            domain,
            breaker,
            ticket: ticket?,
        })
    }

    /// How the permitted call ended. Only an unreachable or slow store
    /// counts as a failure; an answer, even an error reply, is a success.
    pub fn record(&self, permit: Permit, error: Option<&StoreError>) {
        let failed = error.is_some_and(StoreError::store_is_down);
        let (from, transition) = {
            let mut b = lock(&permit.breaker);
            let from = b.state();
            (from, b.record(permit.ticket, failed, self.clock.now_us()))
        };
        if let Some(t) = transition {
            self.transitioned(permit.domain, from, t, error);
        }
    }

    /// The prober saw the store answer: open breakers whose open period is
    /// over (all of them `at_once`, after a failed ping) go half-open.
    pub fn store_recovered(&self, at_once: bool) {
        let now = self.clock.now_us();
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        for (&domain, breaker) in map.iter() {
            let transition = lock(breaker).store_recovered(now, at_once);
            if let Some(t) = transition {
                self.transitioned(domain, State::Open, t, None);
            }
        }
    }

    /// How many breakers are in each state, indexed by [`State`].
    pub fn counts(&self) -> [usize; 3] {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut counts = [0; 3];
        for breaker in map.values() {
            counts[lock(breaker).state() as usize] += 1;
        }
        counts
    }

    /// Metrics and one log line per transition.
    fn transitioned(&self, domain: u64, from: State, t: Transition, error: Option<&StoreError>) {
        self.metrics.record_breaker(Some(from), t.to());
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
        let map = self.map.get_mut().unwrap_or_else(|e| e.into_inner());
        for breaker in map.values() {
            self.metrics.forget_breaker(lock(breaker).state());
        }
    }
}
