//! The local line of waiters per check identity: only its head asks the
//! store, so N waiters on one key cost about one store call per freed unit
//! rather than N retries each time a unit frees up, and units go out in
//! arrival order.
//!
//! The line is per instance: waiters on other instances are not in it and
//! compete for the same units through the store, first come first served
//! at the moment each head retries.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::{IntCounter, IntGauge};
use tokio::sync::{Notify, watch};

use crate::domain::{Check, Limit};

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

struct Line {
    /// Tickets by arrival number; the first is the head.
    tickets: BTreeMap<u64, Arc<Notify>>,
    /// When the head will ask the store next (timer µs), if it is
    /// sleeping; watched by those behind it, who leave at once when that
    /// is past their deadline.
    next_try_us: watch::Sender<Option<u64>>,
}

impl Default for Line {
    fn default() -> Self {
        Line {
            tickets: BTreeMap::new(),
            next_try_us: watch::Sender::new(None),
        }
    }
}

/// Every line, and the bound on waiters across them.
pub struct Waiters {
    max: usize,
    count: AtomicUsize,
    next_id: AtomicU64,
    lines: Mutex<HashMap<QueueKey, Line>>,
    gauge: IntGauge,
    rejected: IntCounter,
}

impl Waiters {
    pub fn new(max: usize, gauge: IntGauge, rejected: IntCounter) -> Waiters {
        Waiters {
            max,
            count: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            lines: Mutex::new(HashMap::new()),
            gauge,
            rejected,
        }
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<QueueKey, Line>> {
        // The map stays consistent through a panic elsewhere: every change
        // is a single insert or remove.
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `None` when nobody waits on `key`; otherwise when its head will ask
    /// the store next (0 if it is asking now).
    pub fn ahead(&self, key: &QueueKey) -> Option<u64> {
        self.lines()
            .get(key)
            .map(|line| line.next_try_us.borrow().unwrap_or(0))
    }

    /// A place at the end of `key`'s line, or `None` (counted) when
    /// `limits.max_waiters` are already waiting.
    pub fn join(&self, key: QueueKey) -> Option<Ticket<'_>> {
        if self.count.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.count.fetch_sub(1, Ordering::AcqRel);
            self.rejected.inc();
            return None;
        }
        self.gauge.inc();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let turn = Arc::new(Notify::new());
        let (head, next_try_us) = {
            let mut lines = self.lines();
            let line = lines.entry(key.clone()).or_default();
            line.tickets.insert(id, turn.clone());
            (line.tickets.len() == 1, line.next_try_us.subscribe())
        };
        Some(Ticket {
            waiters: self,
            key,
            id,
            turn,
            next_try_us,
            head,
        })
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
    turn: Arc<Notify>,
    next_try_us: watch::Receiver<Option<u64>>,
    head: bool,
}

impl Ticket<'_> {
    /// Was first in line when it joined.
    pub fn is_head(&self) -> bool {
        self.head
    }

    /// Resolves once this ticket is at the head of its line, or with
    /// `false` as soon as the head's next try is planned past
    /// `deadline_us` (then it cannot be served in time).
    pub async fn turn(&mut self, deadline_us: u64) -> bool {
        if self.head {
            return true;
        }
        // Planned before this ticket subscribed: seen, so not a change.
        if self.next_try_us.borrow().is_some_and(|at| at > deadline_us) {
            return false;
        }
        let turn = self.turn.notified();
        let mut turn = std::pin::pin!(turn);
        loop {
            tokio::select! {
                () = &mut turn => break,
                Ok(()) = self.next_try_us.changed() => {
                    let next = *self.next_try_us.borrow_and_update();
                    if next.is_some_and(|at| at > deadline_us) {
                        return false;
                    }
                }
            }
        }
        self.head = true;
        true
    }

    /// The head says when it will ask the store next (`None`: now).
    pub fn plan(&self, next_try_us: Option<u64>) {
        if let Some(line) = self.waiters.lines().get(&self.key) {
            line.next_try_us.send_replace(next_try_us);
        }
    }
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
                    Some((_, next)) if was_head => {
                        line.next_try_us.send_replace(None);
                        // Stores a permit if the next is not polling yet.
                        next.notify_one();
                    }
                    Some(_) => {}
                }
            }
        }
        self.waiters.count.fetch_sub(1, Ordering::AcqRel);
        self.waiters.gauge.dec();
    }
}
