//! `ratekeeper_trace_spans_total{outcome}`: what became of the spans of
//! sampled requests. The counts live in the trace exporter
//! (`telemetry::otel::span_counts`), which exists before any metrics do;
//! each scrape reads them.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, Opts, Registry};

use super::family::registered;

const NAME: &str = "ratekeeper_trace_spans_total";
const HELP: &str = "Spans of sampled requests by outcome: exported (taken by the OTLP collector), failed (refused by it, or not answered within otel.export_timeout) and dropped (the span queue, otel.queue_size, was full; a check never waits for the collector). All 0 while traces are off.";
/// The outcomes, in the order `span_counts` gives them.
const OUTCOMES: [&str; 3] = ["exported", "failed", "dropped"];

pub(super) fn register(registry: &Registry, read: fn() -> [u64; 3]) {
    registered(registry, Spans::new(read));
}

#[derive(Clone)]
struct Spans {
    /// Only for its description: each scrape reports fresh counters set to
    /// the counts, so two scrapes at once cannot add the same difference.
    family: IntCounterVec,
    read: fn() -> [u64; 3],
}

fn family() -> IntCounterVec {
    IntCounterVec::new(Opts::new(NAME, HELP), &["outcome"]).expect("valid metric")
}

impl Spans {
    fn new(read: fn() -> [u64; 3]) -> Self {
        Spans {
            family: family(),
            read,
        }
    }
}

impl Collector for Spans {
    fn desc(&self) -> Vec<&Desc> {
        self.family.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = family();
        for (outcome, count) in OUTCOMES.iter().zip((self.read)()) {
            now.with_label_values(&[*outcome]).inc_by(count);
        }
        now.collect()
    }
}
