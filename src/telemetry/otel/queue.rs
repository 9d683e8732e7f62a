//! The way out for finished spans: a bounded queue and one task that
//! exports from it in batches. A span ends inside a request, so ending it
//! must never wait: a full queue drops the span and counts it, and an
//! exporter that is down or slow holds only its own task, each export cut
//! at `export_timeout`.
//!
//! Our own rather than the SDK's `BatchSpanProcessor`: that one counts what
//! it drops only for a log line at shutdown, and an operator needs the
//! count as a metric (`ratekeeper_trace_spans_total{outcome="dropped"}`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::telemetry::LogThrottle;

/// Spans handed to the collector, refused by it (or cut at the timeout),
/// and dropped at a full queue: read at each scrape.
pub(super) static EXPORTED: AtomicU64 = AtomicU64::new(0);
pub(super) static FAILED: AtomicU64 = AtomicU64::new(0);
pub(super) static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The span processor: it only queues.
#[derive(Debug)]
pub(super) struct Queue {
    tx: mpsc::Sender<SpanData>,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.tx.try_send(span).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// How the export task batches.
pub(super) struct Batching {
    pub capacity: usize,
    pub batch_size: usize,
    pub delay: Duration,
    pub timeout: Duration,
}

/// The longest the exit waits for the last spans to be sent.
const FLUSH_WAIT: Duration = Duration::from_secs(3);

/// Stops the export task: what is queued is sent once more, within the
/// export timeout.
pub(super) struct Stop {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stop {
    /// At most [`FLUSH_WAIT`]: a collector that does not answer must not
    /// hold the exit past an orchestrator's grace period (Docker's and
    /// Kubernetes' default 10 s and 30 s, shared with draining requests).
    pub(super) async fn flush(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(FLUSH_WAIT, &mut self.task).await;
    }
}

/// The processor and its export task, spawned on the current runtime.
pub(super) fn start<E: SpanExporter + 'static>(exporter: E, batching: Batching) -> (Queue, Stop) {
    let (tx, rx) = mpsc::channel(batching.capacity);
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(export_loop(exporter, rx, stopped, batching));
    (
        Queue { tx },
        Stop {
            stop: Some(stop),
            task,
        },
    )
}

async fn export_loop<E: SpanExporter>(
    exporter: E,
    mut rx: mpsc::Receiver<SpanData>,
    mut stopped: oneshot::Receiver<()>,
    batching: Batching,
) {
    let mut batch = Vec::with_capacity(batching.batch_size);
    // Once `stopped` has answered it must not be polled again (a oneshot
    // panics), so its answer is kept here.
    let mut stopping = false;
    while !stopping {
        let first = tokio::select! {
            biased;
            _ = &mut stopped => break,
            span = rx.recv() => span,
        };
        let Some(first) = first else { break };
        batch.push(first);
        let deadline = Instant::now() + batching.delay;
        while batch.len() < batching.batch_size {
            tokio::select! {
                biased;
                _ = &mut stopped => {
                    stopping = true;
                    break;
                }
                span = tokio::time::timeout_at(deadline, rx.recv()) => match span {
                    Ok(Some(span)) => batch.push(span),
                    Ok(None) | Err(_) => break,
                },
            }
        }
        export(&exporter, std::mem::take(&mut batch), batching.timeout).await;
    }
    // At shutdown: what is queued now, in batches, once each.
    while let Ok(span) = rx.try_recv() {
        batch.push(span);
        if batch.len() == batching.batch_size {
            export(&exporter, std::mem::take(&mut batch), batching.timeout).await;
        }
    }
    if !batch.is_empty() {
        export(&exporter, batch, batching.timeout).await;
    }
}

/// At most one warning a minute about failed exports: a collector that is
/// down fails every batch.
static WARN: LogThrottle = LogThrottle::new(Duration::from_secs(60));

async fn export<E: SpanExporter>(exporter: &E, batch: Vec<SpanData>, timeout: Duration) {
    let n = batch.len() as u64;
    let error = match tokio::time::timeout(timeout, exporter.export(batch)).await {
        Ok(Ok(())) => {
            EXPORTED.fetch_add(n, Ordering::Relaxed);
            return;
        }
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {timeout:?}"),
    };
    FAILED.fetch_add(n, Ordering::Relaxed);
    if let Some(unlogged) = WARN.admit() {
        tracing::warn!(
            %error,
            spans = n,
            "the OTLP collector did not take {n} spans ({unlogged} failures not logged since the last line; \
             all are counted in ratekeeper_trace_spans_total{{outcome=\"failed\"}})"
        );
    }
}
