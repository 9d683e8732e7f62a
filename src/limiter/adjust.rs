//! Reset, refund, settle, and a lease's release and renewal: the store's
//! answer or an error, never the failure policy's. A fake answer would tell the caller that capacity came back
//! when nothing changed (or hide that it did), so an outage is reported
//! as such and the caller retries.

use std::time::Instant;

use super::{FailureMode, Limiter, LimiterError};
use crate::domain::{Check, Decision, Lease, LeaseId, Reservation};
use crate::store::{Applied, Op, Settled, StoreError};

/// What a reset, refund, settle, release or renewal does to a check's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment<'a> {
    /// Deletes the state of every limit.
    Reset,
    /// Gives back up to `cost` units on every limit.
    Refund,
    /// Settles the reservation `cost` as `actual` on every limit
    /// ([`OpKind::Settle`](crate::store::OpKind::Settle)).
    Settle {
        actual: u64,
        reservation: Option<&'a Reservation>,
    },
    /// Frees the lease on the check's concurrency limit
    /// ([`OpKind::Release`](crate::store::OpKind::Release)).
    Release(&'a LeaseId),
    /// Extends the live lease ([`OpKind::Renew`](crate::store::OpKind::Renew)).
    Renew(&'a LeaseId),
}

impl<'a> Adjustment<'a> {
    /// A bounded label for `ratekeeper_adjustments_total{op}`.
    pub fn as_str(self) -> &'static str {
        match self {
            Adjustment::Reset => "reset",
            Adjustment::Refund => "refund",
            Adjustment::Settle { .. } => "settle",
            Adjustment::Release(_) => "release",
            Adjustment::Renew(_) => "renew",
        }
    }

    /// The store operation on `check`.
    fn op<'c>(self, check: &'c Check) -> Op<'c>
    where
        'a: 'c,
    {
        match self {
            Adjustment::Reset => Op::reset(check),
            Adjustment::Refund => Op::refund(check),
            Adjustment::Settle {
                actual,
                reservation,
            } => Op::settle(check, actual).reserving(reservation),
            Adjustment::Release(lease) => Op::release(check, lease),
            Adjustment::Renew(lease) => Op::renew(check, lease),
        }
    }
}

/// What an adjustment answered: the state afterwards, as a check of cost 0
/// reports it, and for a release or renewal whether the lease was live.
#[derive(Debug, Clone)]
pub struct Adjusted {
    pub decision: Decision,
    /// `Some` for a release or renewal of a check with a concurrency limit.
    pub lease: Option<bool>,
    /// `Some` for a settle of a reservation: what its record said.
    pub reservation: Option<Settled>,
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
    /// instance: below the reservation it makes room. With `reservation`,
    /// only once, and only if the store holds it (the answer's `reservation`
    /// says what it found).
    pub async fn settle(
        &self,
        check: &Check,
        actual: u64,
        reservation: Option<&Reservation>,
    ) -> Result<Adjusted, LimiterError> {
        let op = Adjustment::Settle {
            actual,
            reservation,
        };
        self.adjust_leased(op, check).await
    }

    /// Frees `lease` on the concurrency limit of `check` and answers like
    /// a check of cost 0 afterwards, with whether the lease was live. Like
    /// a refund it ends cached denials of the key and wakes its waiters,
    /// here and on every instance: a slot is free.
    pub async fn release(&self, check: &Check, lease: &LeaseId) -> Result<Adjusted, LimiterError> {
        self.adjust_leased(Adjustment::Release(lease), check).await
    }

    /// Extends the live `lease` to now + the concurrency limit's
    /// `lease_ttl`; an expired or unknown one stays gone. Whether it was
    /// live; if so, the decision holds the lease with its new expiry.
    pub async fn renew(&self, check: &Check, lease: &LeaseId) -> Result<Adjusted, LimiterError> {
        let mut adjusted = self.adjust_leased(Adjustment::Renew(lease), check).await?;
        if adjusted.lease == Some(true)
            && let Some(limit) = check.concurrency()
        {
            adjusted.decision.lease = Some(Lease {
                id: lease.clone(),
                expires_in_ms: limit.rule.window_us() / 1_000,
            });
        }
        Ok(adjusted)
    }

    /// Asks the store, bypassing the deny cache for the answer (a denial
    /// it holds may be what this ends). The store's timeouts bound the
    /// wait, and an open circuit breaker answers at once: either way an
    /// error, which the HTTP layer turns into a 503. The other instances
    /// are told by the store call itself (Redis publishes from the same
    /// script), so nothing else goes to the store.
    pub async fn adjust(
        &self,
        op: Adjustment<'_>,
        check: &Check,
    ) -> Result<Decision, LimiterError> {
        self.adjust_leased(op, check).await.map(|a| a.decision)
    }

    async fn adjust_leased(
        &self,
        op: Adjustment<'_>,
        check: &Check,
    ) -> Result<Adjusted, LimiterError> {
        // Under `failure.mode = "local"` the local store may hold leases
        // it handed out while the store was down: a release frees it there
        // too, and answers from there if the store cannot.
        let local = match op {
            Adjustment::Release(_) | Adjustment::Renew(_)
                if self.policy.mode_for(check) == FailureMode::Local =>
            {
                self.local
                    .as_ref()
                    .and_then(|l| l.apply_now(&op.op(check)).ok())
            }
            _ => None,
        };
        let result = self.adjust_store(op, check).await;
        let locally = local.as_ref().and_then(|l| l.lease);
        let answered_locally = result.is_err() && locally == Some(true);
        self.metrics
            .record_adjustment(op.as_str(), result.is_ok() || answered_locally);
        // Even after an error, even one that made no call: the script may
        // have run before the reply was lost, and dropping entries is
        // cheap and safe. A renewal frees nothing, nor does a release of a
        // lease that was not live anywhere.
        let freed_nothing = match (&result, op) {
            (_, Adjustment::Renew(_)) => true,
            (Ok(applied), Adjustment::Release(_)) => {
                applied.lease != Some(true) && locally != Some(true)
            }
            _ => false,
        };
        if !freed_nothing {
            self.invalidate_locally(&check.key);
        }
        match result {
            Ok(adjusted) => {
                self.count_published(adjusted.published);
                Ok(Adjusted {
                    decision: Decision::from_outcomes(check, &adjusted.outcomes),
                    lease: match (adjusted.lease, locally) {
                        (Some(a), Some(b)) => Some(a || b),
                        (a, b) => a.or(b),
                    },
                    reservation: adjusted.reservation,
                })
            }
            Err(_) if answered_locally => {
                // The lease was the local store's own: its answer stands.
                let local = local.expect("locally is Some");
                Ok(Adjusted {
                    decision: Decision::from_outcomes(check, &local.outcomes).degraded(),
                    lease: Some(true),
                    reservation: None,
                })
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

    async fn adjust_store(&self, op: Adjustment<'_>, check: &Check) -> Result<Applied, StoreError> {
        let Some(permit) = self.breakers.admit(self.store.failure_domain(check)) else {
            return Err(StoreError::Unavailable("circuit breaker open".into()));
        };
        let started = Instant::now();
        let result = self
            .store
            .apply(&[op.op(check)])
            .await
            .pop()
            .unwrap_or_else(|| Err(StoreError::Backend("a store gave no answer".into())));
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
