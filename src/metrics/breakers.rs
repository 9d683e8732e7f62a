//! The circuit breakers, one per failure domain: how many are in each
//! state, and how often one opened.

use prometheus::{IntCounter, IntGauge, Registry};

use super::family::{counter, gauge_vec};
use crate::domain::BreakerState;

pub struct BreakerMetrics {
    /// `ratekeeper_breaker_state{state}`: failure domains per breaker
    /// state, indexed by [`BreakerState`].
    state: [IntGauge; BreakerState::ALL.len()],
    /// Times a circuit breaker opened.
    pub opened: IntCounter,
}

impl BreakerMetrics {
    pub fn register(registry: &Registry) -> BreakerMetrics {
        let state = gauge_vec(
            registry,
            "ratekeeper_breaker_state",
            "Failure domains (Redis nodes; one for a single server) whose circuit breaker is closed, open or half_open.",
            &["state"],
        );
        BreakerMetrics {
            state: BreakerState::ALL.map(|s| state.with_label_values(&[s.as_str()])),
            opened: counter(
                registry,
                "ratekeeper_breaker_opened_total",
                "Times a circuit breaker opened after a sustained store failure.",
            ),
        }
    }

    /// A breaker moved from `from` to `to` (`from` is `None` for a new one).
    pub fn record(&self, from: Option<BreakerState>, to: BreakerState) {
        if let Some(from) = from {
            self.state[from as usize].dec();
        }
        self.state[to as usize].inc();
        if to == BreakerState::Open {
            self.opened.inc();
        }
    }

    /// A breaker in `state` was dropped with its failure domain.
    pub fn forget(&self, state: BreakerState) {
        self.state[state as usize].dec();
    }
}
