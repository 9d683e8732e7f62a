//! Blocking acquire: a check that, when denied, waits for its
//! `retry_after` and tries again, for at most the time it was given.
//!
//! - Nothing is spent until the check is allowed: every try is an ordinary
//!   check, and a denied check spends nothing.
//! - A try that the remaining time cannot cover is not slept on: the
//!   denial is the answer at once.
//! - Degraded answers (the store is down, the failure policy answered) and
//!   shadow checks never wait: waiting would not make them any truer.
//! - Waiters on one check identity stand in a local line ([`queue`]): only
//!   the head asks the store, so a freed unit goes to the longest waiter
//!   and the store sees about one failed try per granted waiter, not one
//!   per waiter per freed unit.
//! - The wait is an ordinary future: when the client goes away and the
//!   request's future is dropped, its ticket leaves the line and nothing
//!   more is asked of the store.
//! - At most `limits.max_waiters` wait at once, at most
//!   `limits.max_waiters_per_key` in one line; beyond that a check is
//!   answered at once as if it had not asked to wait (counted).
//! - A waiter the line cannot serve before its deadline (one freed unit
//!   per waiter ahead of it) is answered at once with the head's last
//!   denial, without a store call ([`queue`]).
//! - A reset, refund or release of the key (here, or on another instance
//!   through the invalidation listener) wakes the head: it tries at once.
//! - A concurrency limit's `retry_after` is only when its earliest lease
//!   expires at the latest: a release may free the slot sooner. A check
//!   it denies waits until its deadline (not turned away for a far
//!   expiry), woken by a release, and asks again at least every 200 ms in
//!   case the release's message is lost.
//! - A check smaller than the head's asks the store before joining: it
//!   may pass now although the head cannot. The head may then be served
//!   later, but never past its deadline.
//! - When the server drains, every waiter answers its last denial at once.
//! - A head's retry runs in a task of its own: a sent EVALSHA cannot be
//!   called back, so if the client hangs up meanwhile and the answer is
//!   allowed, the unit is given back (a refund). A hang-up during the
//!   first try (before joining a line) is an ordinary check's: not given
//!   back, like any check whose client goes away.

#[cfg(test)]
mod line_tests;
pub mod queue;
#[cfg(test)]
mod tests;
pub mod timer;

use crate::domain::Algorithm;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use self::queue::{QueueKey, Refused, Ticket, Turn, Waiters};
use self::timer::Timer;
use super::request::{Answer, Request};
use super::{Limiter, LimiterError};
use crate::domain::{Check, Decision, LimitDecision};
use crate::store::Op;

/// A waiting check's answer and how long it waited.
#[derive(Debug, Clone)]
pub struct Waited {
    pub decision: Decision,
    /// Zero when answered without standing in line (its first try
    /// answered, or it could not wait); otherwise from the first try to the
    /// answer.
    pub waited: Duration,
}

/// The waiting side of a limiter: its lines and the time it sleeps on.
pub struct Waiting {
    pub(super) waiters: Arc<Waiters>,
    pub(super) timer: Arc<dyn Timer>,
}

impl Limiter {
    /// Stage 6 of the pipeline: checks, and while denied waits for the
    /// check's `retry_after` and tries again (stages 1 to 5 each time),
    /// for at most the request's `wait`. Observed once by the pipeline,
    /// whatever the number of tries.
    pub(super) async fn wait(
        self: &Arc<Self>,
        request: &Request<'_>,
    ) -> Result<Answer, LimiterError> {
        let waited = self.wait_for(request.op.check, request.wait).await?;
        Ok(Answer {
            waited: waited.waited,
            ..Answer::of(waited.decision)
        })
    }

    /// One try: stages 1 to 5 on the check alone.
    async fn try_once(&self, check: &Check) -> Result<Decision, LimiterError> {
        let answer = self.decide_one(&Request::new(Op::check(check))).await?;
        Ok(answer.decision)
    }

    async fn wait_for(
        self: &Arc<Self>,
        check: &Check,
        wait: Duration,
    ) -> Result<Waited, LimiterError> {
        // Answered without standing in line: nothing waited.
        let answer = |decision: Decision| Waited {
            decision,
            waited: Duration::ZERO,
        };
        let timer = self.waiting.timer.clone();
        let started = timer.now_us();
        let deadline = started.saturating_add(wait.as_micros() as u64);
        let key = QueueKey::of(check);
        // With others already in line, asking the store first would jump
        // the line (and add a try per arrival); without, most checks pass
        // at once and never join. A check smaller than the head's still
        // asks first: the store may admit it now although not the head
        // (the head may then wait longer, never past its deadline).
        let first = match self.waiting.waiters.ahead(&key) {
            Some(head_cost) if check.cost >= head_cost => None,
            _ => {
                let decision = self.try_once(check).await?;
                if !worth_waiting(&decision, timer.now_us(), deadline) {
                    return Ok(answer(decision));
                }
                Some(decision)
            }
        };
        let joined = self
            .waiting
            .waiters
            .join(key, check.cost, deadline, timer.now_us());
        let ticket = match joined {
            Ok(ticket) => ticket,
            // Over a bound: as if wait_ms were 0.
            Err(Refused::Full) => {
                let decision = match first {
                    Some(decision) => decision,
                    None => self.try_once(check).await?,
                };
                return Ok(answer(decision));
            }
            // The line cannot serve it in time: answered without a try.
            Err(Refused::TooLate(denial)) => return Ok(answer(first.unwrap_or(*denial))),
        };
        let decision = self.wait_in_line(check, ticket, first, deadline).await?;
        let waited = Duration::from_micros(timer.now_us().saturating_sub(started));
        self.metrics.waiting.duration.observe(waited.as_secs_f64());
        Ok(Waited { decision, waited })
    }

    /// Waits for the head of the line (or to be told it cannot be served
    /// in time), then tries at each `retry_after` while the time left
    /// covers it.
    async fn wait_in_line(
        self: &Arc<Self>,
        check: &Check,
        mut ticket: Ticket<'_>,
        mut last: Option<Decision>,
        deadline: u64,
    ) -> Result<Decision, LimiterError> {
        let timer = &self.waiting.timer;
        if !ticket.is_head() {
            let closed = ticket.closed.clone();
            // Draining first: a turn that came with it is not taken.
            let turn = tokio::select! {
                biased;
                () = queue::closed(closed) => Turn::Waiting,
                () = timer.sleep_until(deadline) => Turn::Waiting,
                turn = ticket.turn() => turn,
            };
            match turn {
                Turn::Head => last = None,
                Turn::Leave(denial) => return Ok(denial),
                // Out of time in line, or draining.
                Turn::Waiting => return self.leave_now(check, ticket).await,
            }
        }
        loop {
            let decision = match last.take() {
                Some(decision) => decision,
                None => {
                    ticket.plan_now();
                    self.try_detached(check).await?
                }
            };
            let now = timer.now_us();
            if !worth_waiting(&decision, now, deadline) {
                return Ok(decision);
            }
            ticket.plan(
                now + earliest_us(&decision),
                unit_us(check, &decision),
                &decision,
                now,
            );
            tokio::select! {
                biased;
                () = ticket.closed() => return Ok(decision),
                () = timer.sleep_until(next_try_us(&decision, now, deadline)) => {}
                // A reset, refund or release of the key: try now.
                () = ticket.woken() => {}
            }
        }
    }

    /// One try of the head, in a task of its own: a sent store call cannot
    /// be called back, so when the client hangs up meanwhile the answer
    /// still arrives, and a unit it spent for nobody is given back
    /// (counted as a refund).
    async fn try_detached(self: &Arc<Self>, check: &Check) -> Result<Decision, LimiterError> {
        let (answer, answered) = oneshot::channel();
        let (limiter, tried) = (self.clone(), check.clone());
        // Tracked: it ends with its one store call (and refund), both
        // bounded by the store's timeouts, and shutdown waits for it.
        self.tasks.spawn(async move {
            let decision = limiter.try_once(&tried).await;
            // Refused: the waiter is gone.
            if let Err(unread) = answer.send(decision) {
                give_back(limiter, tried, unread).await;
            }
        });
        let mut pending = Pending {
            answered: Some(answered),
            limiter: self,
            check,
        };
        let answer = pending.answered.as_mut().expect("set above").await;
        pending.answered = None;
        match answer {
            Ok(decision) => decision,
            Err(_) => panic!("a waiting check's store call panicked"),
        }
    }

    /// Leaves the line before its turn: with the head's last denial, or
    /// (the head is asking now, so only the store knows) one try.
    async fn leave_now(&self, check: &Check, ticket: Ticket<'_>) -> Result<Decision, LimiterError> {
        let denial = ticket.answer_now(self.waiting.timer.now_us());
        drop(ticket);
        match denial {
            Some(denial) => Ok(denial),
            None => self.try_once(check).await,
        }
    }
}

/// A try whose waiter may go away before reading its answer.
struct Pending<'a> {
    answered: Option<oneshot::Receiver<Result<Decision, LimiterError>>>,
    limiter: &'a Arc<Limiter>,
    check: &'a Check,
}

impl Drop for Pending<'_> {
    /// Dropped unread (the client hung up): an answer already sent is
    /// given back here; one still to come is refused, and the task gives
    /// it back.
    fn drop(&mut self) {
        let Some(mut answered) = self.answered.take() else {
            return;
        };
        answered.close();
        if let Ok(Ok(decision)) = answered.try_recv() {
            let (limiter, check) = (self.limiter.clone(), self.check.clone());
            let tasks = limiter.tasks.clone();
            tasks.spawn_from_drop(give_back(limiter, check, Ok(decision)));
        }
    }
}

/// Refunds an allowed answer nobody received, and releases its lease.
///
/// Boxed as a `Send` future: it runs the pipeline, which may wait, which
/// may call this, and the compiler proves no such cycle `Send` without a
/// named type.
fn give_back(
    limiter: Arc<Limiter>,
    check: Check,
    answer: Result<Decision, LimiterError>,
) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        let Ok(decision) = answer else { return };
        // Even a degraded answer's: under `local` its lease is the local store's.
        if let Some(lease) = &decision.lease
            && let release = [Request::new(Op::release(&check, &lease.id))]
            && let Some(Err(error)) = limiter.run(&release).await.pop()
        {
            tracing::warn!(%error, "cannot release a lease whose waiter hung up (it expires)");
        }
        if !decision.allowed || decision.degraded {
            return;
        }
        // A refund moves no lease: only for rate limits.
        let rates = check
            .limits
            .iter()
            .any(|l| l.rule.algorithm != Algorithm::Concurrency);
        let refund = [Request::new(Op::refund(&check))];
        if rates && let Some(Err(error)) = limiter.run(&refund).await.pop() {
            tracing::warn!(%error, "cannot give back a unit whose waiter hung up");
        }
    })
}

/// A denial that may end before `deadline`.
fn worth_waiting(decision: &Decision, now_us: u64, deadline_us: u64) -> bool {
    !decision.allowed && !decision.degraded && now_us + earliest_us(decision) <= deadline_us
}

/// How often a head denied by a concurrency limit asks again meanwhile:
/// a release wakes it at once through the invalidation channel, and this
/// bounds the wait when that message is lost (or no deny cache listens).
const LEASE_POLL_US: u64 = 200_000;

/// The soonest a denial may end. Its `retry_after` for the rate limits;
/// but a concurrency limit's `retry_after` (its earliest lease's expiry)
/// is only the latest its slot frees, since a release may come at any
/// moment, so with one denying only the rate limits' waits count.
fn earliest_us(decision: &Decision) -> u64 {
    let leased = |l: &&LimitDecision| l.algorithm == Algorithm::Concurrency;
    if !decision.limits.iter().any(|l| !l.allowed && leased(&l)) {
        return retry_us(decision);
    }
    let rates = decision
        .limits
        .iter()
        .filter(|l| !l.allowed && !leased(l))
        .map(|l| l.retry_after_ms)
        .max()
        .unwrap_or(0);
    rates.max(1).saturating_mul(1_000)
}

/// When a head denied at `now_us` asks next, unless woken: at its
/// `retry_after`, but while a concurrency limit denies, at least every
/// [`LEASE_POLL_US`], and never after the deadline (a last try then).
fn next_try_us(decision: &Decision, now_us: u64, deadline_us: u64) -> u64 {
    let earliest = earliest_us(decision);
    let at = if earliest < retry_us(decision) {
        earliest.max(LEASE_POLL_US).min(retry_us(decision))
    } else {
        earliest
    };
    (now_us + at).min(deadline_us)
}

/// At least 1 ms, so a denial without a wait never spins.
/// A lower bound on the time one more unit takes to free after the head's
/// try, for judging waiters further back: only the buckets free units one
/// at a time (at most `retry / cost` apart, since the head waits for its
/// whole cost at once). Windows and logs can free many units at one
/// instant, so for them nothing is assumed (0): a waiter is then only
/// turned away when even the head's next try is past its deadline.
fn unit_us(check: &Check, decision: &Decision) -> u64 {
    let buckets = check
        .limits
        .iter()
        .all(|l| matches!(l.rule.algorithm, Algorithm::TokenBucket | Algorithm::Gcra));
    if buckets {
        retry_us(decision) / check.cost.max(1)
    } else {
        0
    }
}

fn retry_us(decision: &Decision) -> u64 {
    decision.retry_after_ms.max(1).saturating_mul(1_000)
}
