//! FailureMode: which answer a check gets when the store cannot give one,
//! and BreakerState: the states of the breaker that decides when it cannot.
//! Apart from the failure policy (`failure.rs`), which answers checks, so
//! that a check can name its mode without importing that answer.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// Allow: the outage costs exactness, never availability.
    Open = 0,
    /// Deny: the outage costs availability, never the limit.
    Closed = 1,
    /// Answer from the instance's own embedded store with the same
    /// algorithms: each instance limits on its own, so an outage admits at
    /// most `limit` per instance. The limiter holds that store; when it
    /// cannot answer either, the answer is [`Open`](Self::Open)'s.
    Local = 2,
}

impl FailureMode {
    pub const ALL: [FailureMode; 3] = [FailureMode::Open, FailureMode::Closed, FailureMode::Local];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
            FailureMode::Local => "local",
        }
    }
}

/// The state of one failure domain's circuit breaker (the machine is
/// `limiter::breaker`). Here, below the limiter, so that what reports it
/// (the `state` label of `ratekeeper_breaker_state`) needs no arrow up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

impl BreakerState {
    pub const ALL: [BreakerState; 3] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}
