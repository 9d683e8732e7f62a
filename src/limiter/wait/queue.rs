//! The local line of waiters per check identity: only its head asks the
//! store, so N waiters on one key cost about one store call per freed unit
//! rather than N retries each time a unit frees up, and units go out in
//! arrival order.
//!
//! The head publishes its plan (when it asks next, how far apart its tries
//! are, its last denial). With it the line knows, without asking the
//! store, who cannot be served in time: the waiter at position `p` (the
//! head is 1) is served at the earliest at `next + (p-1)·retry`, one freed
//! unit per waiter ahead. Such a waiter (or arrival) is answered at once
//! with the head's last denial, its `retry_after` moved to that instant.
//!
//! The line is per instance: waiters on other instances are not in it and
//! compete for the same units through the store, first come first served
//! at the moment each head retries.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::{IntCounter, IntGauge};
use tokio::sync::{Notify, watch};

use crate::domain::{Check, Decision, Limit};

/// What makes two checks the same question: key, policy and the whole list
/// of limits (as the deny cache keys them). The cost is not part of it, so
/// checks of different costs on one key share one line and keep their order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueKey {
    key: String,
    policy: Option<Arc<str>>,
    limits: Arc<[Limit]>,
}

impl QueueKey {
    pub fn of(check: &Check) -> QueueKey {
        QueueKey {
            key: check.key.clone(),
            policy: check.policy.clone(),
            limits: check.limits.clone(),
        }
    }
}

/// Where a ticket stands.
#[derive(Debug, Clone)]
pub enum Turn {
    Waiting,
    /// First in line: asks the store.
    Head,
    /// Cannot be served before its deadline: this is its answer.
    Leave(Decision),
}

struct Slot {
    turn: watch::Sender<Turn>,
    deadline_us: u64,
    cost: u64,
}

/// The head's plan, as the line sees it.
#[derive(Default)]
struct Plan {
    /// When the head asks the store next; `None` while it is asking (or
    /// about to: a new head, a wake-up).
    next_try_us: Option<u64>,
    /// A lower bound on the time between two freed units (0 when units
    /// can free together: windows and logs).
    unit_us: u64,
    last: Option<Decision>,
}

impl Plan {
    /// The head's last denial for a waiter that needs `units` after the
    /// head's (its own and those of the waiters between), if it cannot be
    /// served by `deadline_us` even at the soonest.
    fn too_late(&self, units: u64, deadline_us: u64, now_us: u64) -> Option<Decision> {
        let at = self
            .next_try_us?
            .saturating_add(units.saturating_mul(self.unit_us));
        let last = self.last.as_ref()?;
        (at > deadline_us).then(|| denial_until(last, at, now_us))
    }
}

/// `decision` with its `retry_after` moved to `at_us`.
fn denial_until(decision: &Decision, at_us: u64, now_us: u64) -> Decision {
    let mut decision = decision.clone();
    decision.retry_after_ms = at_us.saturating_sub(now_us).div_ceil(1_000).max(1);
    decision
}

#[derive(Default)]
struct Line {
    /// Tickets by arrival number; the first is the head.
    tickets: BTreeMap<u64, Slot>,
    plan: Plan,
    /// Rung by a reset or refund of the key: the head retries at once.
    wake: Arc<Notify>,
}

/// Why [`Waiters::join`] gave no place.
pub enum Refused {
    /// `limits.max_waiters` or `limits.max_waiters_per_key` reached, or
    /// shutting down (counted in `ratekeeper_wait_rejected_total`).
    Full,
    /// The line is too long to serve it in time: the head's last denial.
    TooLate(Box<Decision>),
}

/// Every line, and the bounds on waiters across them and per line.
pub struct Waiters {
    max: usize,
    max_per_key: usize,
    count: AtomicUsize,
    next_id: AtomicU64,
    lines: Mutex<HashMap<QueueKey, Line>>,
    /// Set once the server drains: every waiter answers at once.
    closed: watch::Sender<bool>,
    gauge: IntGauge,
    rejected: IntCounter,
}

impl Waiters {
    pub fn new(max: usize, max_per_key: usize, gauge: IntGauge, rejected: IntCounter) -> Waiters {
        Waiters {
            max,
            max_per_key,
            count: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            lines: Mutex::new(HashMap::new()),
            closed: watch::Sender::new(false),
            gauge,
            rejected,
        }
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<QueueKey, Line>> {
        // The map stays consistent through a panic elsewhere: every change
        // is a single insert or remove.
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `None` when nobody waits on `key`; otherwise the cost the head
    /// waits for.
    pub fn ahead(&self, key: &QueueKey) -> Option<u64> {
        let lines = self.lines();
        lines
            .get(key)?
            .tickets
            .first_key_value()
            .map(|(_, s)| s.cost)
    }

    /// A place at the end of `key`'s line for a check of `cost` that must
    /// be answered by `deadline_us`.
    pub fn join(
        &self,
        key: QueueKey,
        cost: u64,
        deadline_us: u64,
        now_us: u64,
    ) -> Result<Ticket<'_>, Refused> {
        let mut lines = self.lines();
        let line = lines.get(&key);
        let queued = line.map_or(0, |l| l.tickets.len());
        let ahead = line.map_or(0, |l| units_waiting(l.tickets.values().skip(1)));
        if *self.closed.borrow() {
            // Draining, not the bound: not counted as rejected.
            return Err(Refused::Full);
        }
        if queued >= self.max_per_key || self.count.load(Ordering::Acquire) >= self.max {
            self.rejected.inc();
            return Err(Refused::Full);
        }
        if let Some(answer) = line.and_then(|l| {
            l.plan
                .too_late(ahead.saturating_add(cost), deadline_us, now_us)
        }) {
            return Err(Refused::TooLate(Box::new(answer)));
        }
        self.count.fetch_add(1, Ordering::AcqRel);
        self.gauge.inc();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = lines.entry(key.clone()).or_default();
        let first = if line.tickets.is_empty() {
            Turn::Head
        } else {
            Turn::Waiting
        };
        let (turn, turn_rx) = watch::channel(first);
        line.tickets.insert(
            id,
            Slot {
                turn,
                deadline_us,
                cost,
            },
        );
        Ok(Ticket {
            waiters: self,
            key,
            id,
            turn: turn_rx,
            wake: line.wake.clone(),
            closed: self.closed.subscribe(),
        })
    }

    /// A reset or refund of the client `key` (every policy and limit of
    /// it): each such line's head asks the store at once instead of
    /// sleeping out its plan, and arrivals stand behind it meanwhile.
    pub fn wake(&self, key: &str) {
        self.wake_where(|k| k.key == key);
    }

    /// Every head asks the store at once (the invalidations were lost).
    pub fn wake_all(&self) {
        self.wake_where(|_| true);
    }

    fn wake_where(&self, matches: impl Fn(&QueueKey) -> bool) {
        for (_, line) in self.lines().iter_mut().filter(|(k, _)| matches(k)) {
            line.plan.next_try_us = None;
            // Stores a permit if the head is between sleeps: it then
            // retries once more than needed, never once too few.
            line.wake.notify_one();
        }
    }

    /// The server drains: every waiter answers now and nobody joins.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Waiters now, in every line.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A place in a line; leaving it (dropping, also when the request is
/// cancelled) hands the head to the next in line.
pub struct Ticket<'a> {
    waiters: &'a Waiters,
    key: QueueKey,
    id: u64,
    turn: watch::Receiver<Turn>,
    wake: Arc<Notify>,
    pub(super) closed: watch::Receiver<bool>,
}

impl Ticket<'_> {
    pub fn is_head(&self) -> bool {
        matches!(*self.turn.borrow(), Turn::Head)
    }

    /// Resolves once this ticket is the head, or must leave.
    pub async fn turn(&mut self) -> Turn {
        match self.turn.wait_for(|t| !matches!(t, Turn::Waiting)).await {
            Ok(turn) => turn.clone(),
            // The slot lives as long as the ticket: not reached.
            Err(_) => Turn::Head,
        }
    }

    /// Resolves when a reset or refund of the key calls for a try now.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Resolves once the server drains.
    pub async fn closed(&self) {
        closed(self.closed.clone()).await;
    }

    /// The head is asking the store now.
    pub fn plan_now(&self) {
        if let Some(line) = self.waiters.lines().get_mut(&self.key) {
            line.plan.next_try_us = None;
        }
    }

    /// The head was denied with `last` and asks next at `at_us`; those
    /// behind it who cannot be served in time are told to leave.
    pub fn plan(&self, at_us: u64, unit_us: u64, last: &Decision, now_us: u64) {
        let mut lines = self.waiters.lines();
        let Some(line) = lines.get_mut(&self.key) else {
            return;
        };
        line.plan = Plan {
            next_try_us: Some(at_us),
            unit_us,
            last: Some(last.clone()),
        };
        // Only waiters who stay count as ahead of the next one.
        let mut ahead = 0u64;
        for slot in line.tickets.values().skip(1) {
            if !matches!(*slot.turn.borrow(), Turn::Waiting) {
                continue;
            }
            let units = ahead.saturating_add(slot.cost);
            match line.plan.too_late(units, slot.deadline_us, now_us) {
                Some(answer) => {
                    slot.turn.send_replace(Turn::Leave(answer));
                }
                None => ahead = units,
            }
        }
    }

    /// Out of time (or shutting down) in line: the head's last denial,
    /// unless the head is asking now or about to (then only the store
    /// knows).
    pub fn answer_now(&self, now_us: u64) -> Option<Decision> {
        let lines = self.waiters.lines();
        let line = lines.get(&self.key)?;
        let ahead = units_waiting(line.tickets.range(..self.id).skip(1).map(|(_, s)| s));
        let own = line.tickets.get(&self.id).map_or(0, |s| s.cost);
        line.plan
            .too_late(ahead.saturating_add(own), now_us, now_us)
    }
}

/// Resolves once the server drains.
pub async fn closed(mut closed: watch::Receiver<bool>) {
    // An error is the Waiters gone: then nobody waits any more either.
    let _ = closed.wait_for(|closed| *closed).await;
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        {
            let mut lines = self.waiters.lines();
            if let Some(line) = lines.get_mut(&self.key) {
                let was_head = line.tickets.first_key_value().map(|(id, _)| *id) == Some(self.id);
                line.tickets.remove(&self.id);
                match line.tickets.first_key_value() {
                    None => {
                        lines.remove(&self.key);
                    }
                    // The plan stays: the next unit comes no earlier than
                    // the old head planned, until the new head asks.
                    Some((_, next)) if was_head => {
                        next.turn.send_if_modified(|turn| {
                            let waiting = matches!(turn, Turn::Waiting);
                            if waiting {
                                *turn = Turn::Head;
                            }
                            waiting
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        self.waiters.count.fetch_sub(1, Ordering::AcqRel);
        self.waiters.gauge.dec();
    }
}

/// The units of the waiters in `slots` still waiting (not told to leave).
fn units_waiting<'a>(slots: impl Iterator<Item = &'a Slot>) -> u64 {
    slots
        .filter(|s| matches!(*s.turn.borrow(), Turn::Waiting))
        .fold(0u64, |sum, s| sum.saturating_add(s.cost))
}
