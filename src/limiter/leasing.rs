//! The lease stage of a check (see [`lease`](super::lease)): after the
//! deny cache and before the breaker, a check of a leasing policy is
//! answered from this instance's chunk of its key when it can be; the
//! check that finds the chunk low reserves the next one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

use super::Limiter;
use super::lease::{GiveBack, Leases, Reserved, SWEEP_INTERVAL, Take};
use super::pipeline::Step;
use super::request::Answer;
use super::stages::Asked;
use crate::domain::{Check, Decision, LeaseMode, Outcome, PolicySet};
use crate::store::{Applied, Op, StoreError};

/// What a reservation came to, for the check that made it.
enum Reservation {
    /// The check's answer: granted with its cost in it, or the store
    /// failed (for stage 5 to answer).
    Answered(Asked, Result<Applied, StoreError>),
    /// Nothing to answer: a reservation ahead of need, or one not granted
    /// (denied, or no breaker permit), after which the check goes to the
    /// store as usual.
    NotAnswered,
}

impl Limiter {
    /// Hot-key leasing (see `lease`).
    pub fn with_leases(mut self, leases: Leases) -> Limiter {
        self.leases = Some(Arc::new(leases));
        self
    }

    /// Stage 2 of the pipeline: the step is answered when a chunk answers
    /// the check or a reservation does; otherwise it goes on to the store
    /// as usual.
    pub(super) async fn leased(&self, step: &mut Step<'_, '_>) {
        let Some(leases) = &self.leases else { return };
        let check = step.check();
        if check.lease.is_none() {
            return;
        }
        let (take, generation) = leases.take(check, Instant::now());
        match take {
            Take::Direct => {}
            Take::Served { outcomes, refill } => {
                self.metrics.leases.answered.inc_by(check.cost);
                if let Some(units) = refill {
                    // Ahead of need: this check's answer is already known.
                    let _ = self.reserve(leases, check, generation, units, 0).await;
                }
                let decision = Decision::from_outcomes(check, &outcomes);
                step.answer(Ok(Answer::of(decision)));
            }
            Take::Reserve(units) => {
                let reserved = self.reserve(leases, check, generation, units, check.cost);
                if let Reservation::Answered(asked, result) = reserved.await {
                    // A chunk's check acquires no lease of its own.
                    step.lease = None;
                    self.take_result(step, &asked, result);
                }
            }
        }
    }

    /// Reserves `units` for `check`'s key, plus `own` for the check itself,
    /// in one store check of that cost, and keeps the chunk if granted.
    async fn reserve(
        &self,
        leases: &Leases,
        check: &Check,
        generation: u64,
        units: u64,
        own: u64,
    ) -> Reservation {
        let refilling = Refilling {
            leases,
            check,
            generation,
            armed: true,
        };
        let Some(permit) = self.breakers.admit(self.store.failure_domain(check)) else {
            refilling.done(None);
            return Reservation::NotAnswered;
        };
        let reservation = Check {
            cost: units + own,
            ..check.clone()
        };
        let asked = self.asking();
        let sent = Instant::now();
        let result = self.store.apply(&[Op::check(&reservation)]).await.pop();
        let result = result.unwrap_or_else(|| {
            Err(StoreError::Backend(
                "a store answered one operation with no answer".into(),
            ))
        });
        let applied = match result {
            Ok(applied) => applied,
            Err(error) => {
                self.metrics.leases.failed.inc();
                refilling.done(None);
                self.breakers.record(permit, Some(&error));
                if own == 0 {
                    self.metrics.store.record_error(&error);
                    return Reservation::NotAnswered;
                }
                return Reservation::Answered(asked, Err(error));
            }
        };
        self.breakers.record(permit, None);
        self.keep(refilling, (asked, sent), applied, units, own)
    }

    /// A reservation the store answered: the chunk kept if granted, and
    /// the check's answer if it was in it (`own`).
    fn keep(
        &self,
        refilling: Refilling<'_>,
        (asked, sent): (Asked, Instant),
        applied: Applied,
        units: u64,
        own: u64,
    ) -> Reservation {
        let granted = applied.outcomes.iter().all(|o| o.allowed);
        let (Some(at_us), true) = (applied.at_us, granted) else {
            // Denied (the key had less left than the chunk): nothing was
            // spent. (Every store that leases says when it ran a call.)
            self.metrics.leases.denied.inc();
            let (leases, check) = (refilling.leases, refilling.check);
            refilling.done(None);
            leases.observed(check, &applied.outcomes);
            return Reservation::NotAnswered;
        };
        self.metrics.leases.granted.inc();
        self.metrics.leases.reserved.inc_by(units);
        // The answer's view (the chunk counted as left) is made before the
        // chunk is kept, and must not size later chunks.
        let answer = if own == 0 {
            Reservation::NotAnswered
        } else {
            let own_view = Applied::unshared(with_units_left(&applied.outcomes, units));
            Reservation::Answered(asked, Ok(own_view))
        };
        refilling.done(Some(Reserved {
            units,
            at_us,
            sent,
            outcomes: applied.outcomes,
        }));
        answer
    }

    /// Gives back chunks as they fall due, every [`SWEEP_INTERVAL`], by
    /// the lease modes of `policies` as loaded at each sweep. `None`
    /// without leases.
    pub fn spawn_lease_sweeper(
        self: &Arc<Self>,
        policies: Arc<ArcSwap<PolicySet>>,
    ) -> Option<JoinHandle<()>> {
        self.leases.as_ref()?;
        let limiter = Arc::downgrade(self);
        let tasks = self.tasks.clone();
        // It writes to the store: it ends at shutdown between two sweeps,
        // never inside one (chunks swept but not yet given back would be
        // lost to the final give-back), and shutdown waits for it.
        Some(self.tasks.spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    () = tasks.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(limiter) = limiter.upgrade() else {
                    return;
                };
                let set = policies.load();
                let mode_of = |name: &str| set.get(name).and_then(|p| p.lease);
                limiter.give_back_leases(false, mode_of).await;
            }
        }))
    }

    /// At shutdown, once no check is answered any more: every chunk goes
    /// back, waiting at most `limit` for the store.
    pub async fn give_back_all_leases(&self, limit: Duration) {
        if self.leases.is_some() {
            let all = self.give_back_leases(true, |_| None);
            if tokio::time::timeout(limit, all).await.is_err() {
                tracing::warn!(
                    "leased chunks not given back in time: they lapse with their windows"
                );
            }
        }
    }

    /// Gives back the chunks due (all of them when `all`: at shutdown), in
    /// one store call. `mode_of` finds a policy's lease mode as loaded now.
    pub async fn give_back_leases(&self, all: bool, mode_of: impl Fn(&str) -> Option<LeaseMode>) {
        let Some(leases) = &self.leases else { return };
        let due: Vec<GiveBack> = leases.sweep(Instant::now(), all, mode_of);
        if due.is_empty() {
            return;
        }
        let ops: Vec<Op> = due
            .iter()
            .map(|g| Op::give_back(&g.check, g.at_us))
            .collect();
        let results = self.store.apply(&ops).await;
        for (give_back, result) in due.iter().zip(results) {
            let units = give_back.check.cost;
            match result {
                Ok(applied) => {
                    self.metrics.leases.given_back.inc_by(units);
                    self.count_published(applied.published);
                }
                Err(error) => {
                    self.metrics.leases.give_back_failed.inc_by(units);
                    self.metrics.store.record_error(&error);
                }
            }
        }
    }
}

/// A refill under way, ended by [`Refilling::done`]. If the check's future
/// is dropped first (its client hung up mid-call, and hyper drops the
/// request), the slot still learns that the refill is over: otherwise it
/// would never reserve again. The units, if the store ran the call, are
/// lost until their window ends; the refill counts as an error.
struct Refilling<'a> {
    leases: &'a Leases,
    check: &'a Check,
    generation: u64,
    armed: bool,
}

impl Refilling<'_> {
    fn done(mut self, granted: Option<Reserved>) {
        self.armed = false;
        self.leases.refilled(self.check, self.generation, granted);
    }
}

impl Drop for Refilling<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.leases.refill_abandoned(self.check, self.generation);
        }
    }
}

/// The store's answer to a reservation as the check that made it sees it:
/// the chunk's units are still there to spend.
fn with_units_left(outcomes: &[Outcome], units: u64) -> Vec<Outcome> {
    outcomes
        .iter()
        .map(|o| Outcome {
            remaining: o.remaining.saturating_add(units),
            ..*o
        })
        .collect()
}
