//! Making one metric family and registering it, in one call: each concern
//! names, documents and registers a family where it declares its handle,
//! so a metric is written once.

use std::sync::Mutex;

use prometheus::core::Collector;
use prometheus::{
    GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// Latency buckets from 50 µs to 1 s: a check should sit in the first few.
pub(super) const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

/// `collector`, registered in `registry`. Two families of one name are a
/// bug found by the first test that builds the metrics.
pub(super) fn registered<C: Collector + Clone + 'static>(registry: &Registry, collector: C) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names are unique");
    collector
}

pub(super) fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    registered(registry, IntCounter::new(name, help).expect("valid metric"))
}

pub(super) fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    registered(registry, IntGauge::new(name, help).expect("valid metric"))
}

pub(super) fn histogram(registry: &Registry, name: &str, help: &str, buckets: &[f64]) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    registered(registry, Histogram::with_opts(opts).expect("valid metric"))
}

pub(super) fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> IntCounterVec {
    let family = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registered(registry, family)
}

pub(super) fn gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> IntGaugeVec {
    let family = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registered(registry, family)
}

pub(super) fn float_gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> GaugeVec {
    let family = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registered(registry, family)
}

/// A counter that mirrors a count a store keeps itself, brought up to it
/// when `/metrics` is read.
pub struct SyncedCounter {
    counter: IntCounter,
    /// Two scrapes at once would otherwise both add the same difference.
    one_at_a_time: Mutex<()>,
}

impl SyncedCounter {
    pub(super) fn register(registry: &Registry, name: &str, help: &str) -> SyncedCounter {
        SyncedCounter {
            counter: counter(registry, name, help),
            one_at_a_time: Mutex::new(()),
        }
    }

    /// Brings the counter up to `total`, the store's own count.
    pub fn sync(&self, total: u64) {
        let _one = self.one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
        self.counter
            .inc_by(total.saturating_sub(self.counter.get()));
    }

    pub fn get(&self) -> u64 {
        self.counter.get()
    }
}
