//! The invalidation channel: what resets and refunds published, what this
//! instance heard, and whether it is subscribed (see `limiter::invalidate`).

use prometheus::{IntCounter, IntGauge, Registry};

use super::family::{counter, counter_vec, gauge};

pub struct InvalidationMetrics {
    /// `ratekeeper_invalidations_sent_total{result="ok"}`: a reset or
    /// refund script published.
    pub sent_ok: IntCounter,
    /// `{result="error"}`: its PUBLISH or the call failed.
    pub sent_error: IntCounter,
    /// Invalidations received on the channel (this instance's own included).
    pub received: IntCounter,
    /// 1 while subscribed to the channel (the deny cache is in use), 0
    /// otherwise.
    pub subscribed: IntGauge,
    /// Times the subscription was lost (the deny cache was dropped).
    pub subscription_lost: IntCounter,
}

impl InvalidationMetrics {
    pub fn register(registry: &Registry) -> InvalidationMetrics {
        let sent = counter_vec(
            registry,
            "ratekeeper_invalidations_sent_total",
            "Invalidations published by reset and refund (the Redis script publishes after \
             the change), by result: ok, or error (that PUBLISH failed, e.g. an ACL without \
             the channel, or the call itself failed): an error may leave other instances' \
             cached denials of that key for up to 1 s.",
            &["result"],
        );
        InvalidationMetrics {
            sent_ok: sent.with_label_values(&["ok"]),
            sent_error: sent.with_label_values(&["error"]),
            received: counter(
                registry,
                "ratekeeper_invalidations_received_total",
                "Invalidations received on the Redis channel, this instance's own included.",
            ),
            subscribed: gauge(
                registry,
                "ratekeeper_invalidation_subscribed",
                "1 while subscribed to the Redis invalidation channel (the deny cache is in use); \
                 0 while the subscription is lost (the deny cache is dropped and unused), and \
                 always 0 without Redis or without a deny cache.",
            ),
            subscription_lost: counter(
                registry,
                "ratekeeper_invalidation_subscription_lost_total",
                "Times the invalidation subscription was lost and the deny cache dropped.",
            ),
        }
    }
}
