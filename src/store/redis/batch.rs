//! Micro-batching toward Redis: operations that arrive while another call
//! is in flight share one EVALSHA, which applies them in arrival order,
//! each exactly as it would run alone.
//!
//! Adaptive: a check that finds no Redis call under way skips the batcher
//! and goes straight out (see `RedisStore::apply`), so a lone request never
//! waits and pays no hop. Only under load, when calls are already in
//! flight, do checks come here, and the batcher lingers up to `window` to
//! collect more. The
//! linger polls with `yield_now` rather than a timer, because tokio's timer
//! has millisecond resolution and the window is tens of microseconds; while
//! it yields, the HTTP tasks that would fill the batch get to run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::SpanContext;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::Inner;
use crate::domain::{Check, LeaseId, Reservation};
use crate::store::{Applied, Op, OpKind, StoreError};
use crate::telemetry::otel;

/// The most operations one batch carries.
const MAX_BATCH: usize = super::MAX_OPS_PER_CALL;

pub(super) struct Job {
    kind: OpKind,
    pub(super) check: Check,
    lease: Option<LeaseId>,
    reservation: Option<Reservation>,
    reply: oneshot::Sender<Result<Applied, StoreError>>,
    /// The sampled request's span this job came from, if any: the batch's
    /// call links to it.
    link: Option<SpanContext>,
}

/// A job's operation, owned: what [`Op`] borrows.
type Owned = (OpKind, Check, Option<LeaseId>, Option<Reservation>);

/// Starts the batcher on the store's tasks; it runs until every sender is
/// dropped or the store quits, and then finishes the calls it has sent.
pub(super) fn spawn(inner: Arc<Inner>, window: Duration) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
    let tasks = inner.tasks.clone();
    tasks.spawn(run(inner, rx, window));
    tx
}

/// Hands `op` to the batcher and waits for its own answer.
pub(super) async fn submit(
    batcher: &mpsc::Sender<Job>,
    op: &Op<'_>,
) -> Result<Applied, StoreError> {
    let (reply, answer) = oneshot::channel();
    let job = Job {
        kind: op.kind,
        check: op.check.clone(),
        lease: op.lease.cloned(),
        reservation: op.reservation.cloned(),
        reply,
        link: otel::current_link(),
    };
    if batcher.send(job).await.is_err() {
        return Err(StoreError::Unavailable("the batcher has stopped".into()));
    }
    // Every batch call is bounded by the Redis timeout, so this resolves.
    answer.await.unwrap_or_else(|_| {
        Err(StoreError::Unavailable(
            "the batcher dropped an operation".into(),
        ))
    })
}

async fn run(inner: Arc<Inner>, mut rx: mpsc::Receiver<Job>, window: Duration) {
    let mut in_flight = JoinSet::new();
    let tasks = inner.tasks.clone();
    // At `quit`, jobs still queued are dropped (their callers are answered
    // "dropped", by the failure policy); calls already sent are finished.
    // One future for the whole loop, polled only when no job is ready: the
    // check path pays nothing for it (bench/cost.sh).
    let stop = tasks.cancelled();
    tokio::pin!(stop);
    while let Some(first) = tokio::select! {
        biased;
        job = rx.recv() => job,
        () = &mut stop => None,
    } {
        while in_flight.try_join_next().is_some() {}
        let mut jobs = vec![first];
        take_queued(&mut rx, &mut jobs);
        if inner.calls_in_flight() > 0 {
            let started = Instant::now();
            while jobs.len() < MAX_BATCH && started.elapsed() < window {
                tokio::task::yield_now().await;
                take_queued(&mut rx, &mut jobs);
            }
        }
        // One call per cluster slot, each its own task: every caller waits
        // for one call only, so the wait stays bounded by the Redis timeout,
        // and a failure in one slot's call does not touch the others.
        for mut jobs in inner.group_by_slot(jobs, |job| &job.check) {
            let inner = inner.clone();
            let span = call_span(&mut jobs);
            in_flight.spawn(call(inner, jobs).instrument(span));
        }
    }
    while in_flight.join_next().await.is_some() {}
}

/// One slot's call for `jobs`; each caller gets its own answer, or the
/// call's error.
async fn call(inner: Arc<Inner>, jobs: Vec<Job>) {
    let (ops, replies): (Vec<Owned>, Vec<_>) = jobs
        .into_iter()
        .map(|j| ((j.kind, j.check, j.lease, j.reservation), j.reply))
        .unzip();
    let ops: Vec<Op> = ops
        .iter()
        .map(|(kind, check, lease, reservation)| Op {
            kind: *kind,
            check,
            lease: lease.as_ref(),
            reservation: reservation.as_ref(),
        })
        .collect();
    match inner.run_ops(&ops).await {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

/// Only when a sampled request is among the jobs: one span for the call,
/// linked from each of them.
fn call_span(jobs: &mut [Job]) -> tracing::Span {
    let links: Vec<SpanContext> = jobs.iter_mut().filter_map(|j| j.link.take()).collect();
    match links.is_empty() {
        true => tracing::Span::none(),
        false => otel::batch_call(links, jobs.len()),
    }
}

fn take_queued(rx: &mut mpsc::Receiver<Job>, jobs: &mut Vec<Job>) {
    while jobs.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => return,
        }
    }
}
