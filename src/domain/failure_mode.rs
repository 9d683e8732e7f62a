//! FailureMode: which answer a check gets when the store cannot give one.
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
