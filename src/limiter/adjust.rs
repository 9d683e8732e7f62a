//! Reset, refund and settle: the store's answer or an error, never the
//! failure policy's. A fake answer would tell the caller that capacity came back
//! when nothing changed (or hide that it did), so an outage is reported
//! as such and the caller retries.

use std::time::Instant;

use super::{Limiter, LimiterError};
use crate::domain::{Check, Decision};
use crate::store::{Applied, StoreError};

/// What a reset, refund or settle does to a check's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// Deletes the state of every limit.
    Reset,
    /// Gives back up to `cost` units on every limit.
    Refund,
    /// Settles the reservation `cost` as `actual` on every limit
    /// ([`OpKind::Settle`](crate::store::OpKind::Settle)).
    Settle { actual: u64 },
}

impl Adjustment {
    /// A bounded label for `ratekeeper_adjustments_total{op}`.
    pub fn as_str(self) -> &'static str {
        match self {
            Adjustment::Reset => "reset",
            Adjustment::Refund => "refund",
            Adjustment::Settle { .. } => "settle",
        }
    }
}

impl Limiter {
    /// Deletes the state of every limit of `check` and answers like a
    /// check of cost 0 afterwards.
    pub async fn reset(&self, check: &Check) -> Result<Decision, LimiterError> {
        self.adjust(Adjustment::Reset, check).await
    }

    /// Gives back up to `check.cost` units on every limit of `check` and
    /// answers like a check of cost 0 afterwards.
    pub async fn refund(&self, check: &Check) -> Result<Decision, LimiterError> {
        self.adjust(Adjustment::Refund, check).await
    }

    /// Settles the reservation `check.cost` as `actual` on every limit of
    /// `check` and answers like a check of cost 0 afterwards. Like a
    /// refund it ends cached denials of the key here and on every
    /// instance: below the reservation it makes room.
    pub async fn settle(&self, check: &Check, actual: u64) -> Result<Decision, LimiterError> {
        self.adjust(Adjustment::Settle { actual }, check).await
    }

    /// Asks the store, bypassing the deny cache for the answer (a denial
    /// it holds may be what this ends). The store's timeouts bound the
    /// wait, and an open circuit breaker answers at once: either way an
    /// error, which the HTTP layer turns into a 503. The other instances
    /// are told by the store call itself (Redis publishes from the same
    /// script), so nothing else goes to the store.
    pub async fn adjust(&self, op: Adjustment, check: &Check) -> Result<Decision, LimiterError> {
        let result = self.adjust_store(op, check).await;
        self.metrics.record_adjustment(op.as_str(), result.is_ok());
        // Even after an error, even one that made no call: the script may
        // have run before the reply was lost, and dropping entries is
        // cheap and safe.
        self.invalidate_locally(&check.key);
        match result {
            Ok(adjusted) => {
                self.count_published(adjusted.published);
                Ok(Decision::from_outcomes(check, &adjusted.outcomes))
            }
            Err(error) => {
                if error.is_transient() {
                    tracing::warn!(%error, op = op.as_str(), "store could not adjust");
                } else {
                    tracing::error!(%error, op = op.as_str(), "store error");
                }
                Err(error.into())
            }
        }
    }

    async fn adjust_store(&self, op: Adjustment, check: &Check) -> Result<Applied, StoreError> {
        let Some(permit) = self.breakers.admit(self.store.failure_domain(check)) else {
            return Err(StoreError::Unavailable("circuit breaker open".into()));
        };
        let started = Instant::now();
        let result = match op {
            Adjustment::Reset => self.store.reset(check).await,
            Adjustment::Refund => self.store.refund(check).await,
            Adjustment::Settle { actual } => self.store.settle(check, actual).await,
        };
        self.metrics
            .store_duration
            .observe(started.elapsed().as_secs_f64());
        self.breakers.record(permit, result.as_ref().err());
        if let Err(error) = &result {
            // Only errors of a call made: an open breaker made none. Such
            // a call may or may not have published its invalidation.
            self.metrics.record_store_error(error.kind());
            self.metrics.invalidations_sent_error.inc();
        }
        result
    }
}
