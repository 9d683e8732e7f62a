//! Where counters live. [`Store`] is the one seam between deciding and
//! storing: the embedded [`memory::MemoryStore`] runs the domain functions
//! in-process, [`redis::RedisStore`] runs their Lua twins in Redis.

pub mod memory;
pub mod redis;
pub mod scripts;

use async_trait::async_trait;

use crate::domain::{Check, Outcome};

/// Runs checks atomically against shared state.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies `check` atomically, all or nothing: allowed iff every limit
    /// allows `cost`, and only then does every limit spend it. Returns one
    /// outcome per limit, in order, each what that limit alone decided.
    /// A check of one limit is the same call.
    async fn check(&self, check: &Check) -> Result<Vec<Outcome>, StoreError>;

    /// Deletes the state of every limit of `check` (its cost is ignored),
    /// atomically, then answers like a check of cost 0: one outcome per
    /// limit, in order.
    async fn reset(&self, check: &Check) -> Result<Adjusted, StoreError>;

    /// Gives back up to `check.cost` units of the most recent spending on
    /// every limit of `check`, each on its own and never beyond full
    /// capacity (see `State::refund`), atomically, then answers like a
    /// check of cost 0. A key without state is left alone.
    async fn refund(&self, check: &Check) -> Result<Adjusted, StoreError>;

    /// Succeeds while the store can answer checks (readiness). For Redis this
    /// also makes sure the scripts are loaded.
    async fn ping(&self) -> Result<(), StoreError>;

    /// `"memory"` or `"redis"`, for logs and metrics.
    fn name(&self) -> &'static str;

    /// Which independently failing part of the store serves `check`: the
    /// cluster node that owns its slot, 0 for a single server or the
    /// embedded store. The limiter keeps one circuit breaker per domain, so
    /// one failed cluster node does not degrade keys on the others.
    fn failure_domain(&self, _check: &Check) -> u64 {
        0
    }

    /// Keys holding state, where the store can count them cheaply (the
    /// embedded store); Redis reports its own.
    fn key_count(&self) -> Option<usize> {
        None
    }

    /// Keys evicted before their reset to make room, where the store does
    /// so itself (the embedded store at `memory.max_keys`); Redis counts its
    /// own in `INFO stats`.
    fn evictions(&self) -> Option<u64> {
        None
    }

    /// Connections to the store replaced because they stopped answering,
    /// if it has connections (Redis).
    fn connections_replaced(&self) -> Option<u64> {
        None
    }

    /// Calls to the store that decided checks, if checks share calls
    /// (Redis: one script call per check sent alone, one per micro-batch).
    /// Checks sent over calls made is the mean batch size.
    fn check_calls(&self) -> Option<u64> {
        None
    }
}

/// What a reset or refund did: the answer of a check of cost 0 afterwards
/// (one outcome per limit, in order; also reachable through `Deref`), and
/// whether the other instances sharing the store were told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjusted {
    pub outcomes: Vec<Outcome>,
    /// `Some(true)`: the change published its invalidation in the same
    /// atomic call (Redis); `Some(false)`: that PUBLISH failed (an ACL user
    /// without the channel), while the change itself happened; `None`: no
    /// other instance shares this store (the embedded store).
    pub published: Option<bool>,
}

impl std::ops::Deref for Adjusted {
    type Target = [Outcome];

    fn deref(&self) -> &[Outcome] {
        &self.outcomes
    }
}

/// Where a store's invalidation listener reports (the deny cache).
pub trait InvalidationSink: Send + Sync + 'static {
    /// `key`'s state changed (any instance's message, this one's included).
    fn invalidated(&self, key: &str);
    /// Something changed that cannot be told apart (a message that is no
    /// client key, messages dropped because the listener fell behind).
    fn invalidated_all(&self);
    /// `false`: invalidations may be missed from now on; `true`: they are
    /// received again from now on.
    fn subscribed(&self, up: bool);
}

/// Why a store could not answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer within the configured timeout.
    #[error("store timed out: {0}")]
    Timeout(String),
    /// The store is unreachable or temporarily refusing work
    /// (connection refused or reset, loading, failover in progress).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Redis refused our credentials or permissions (WRONGPASS, NOAUTH,
    /// NOPERM): a misconfiguration, answered by the failure policy.
    #[error("store refused our credentials: {0}")]
    Auth(String),
    /// The store answered something we cannot use: a script error, a key of
    /// the wrong type, an unexpected reply. Retrying will not help.
    #[error("store error: {0}")]
    Backend(String),
}

impl StoreError {
    /// Transient errors are answered by the failure policy; the others are
    /// bugs or corruption and surface as 500s so they get noticed.
    pub fn is_transient(&self) -> bool {
        !matches!(self, StoreError::Backend(_))
    }

    /// Whether the store (or its failure domain) is unreachable, slow or
    /// refusing us: what the circuit breaker counts as a failure.
    pub fn store_is_down(&self) -> bool {
        matches!(
            self,
            StoreError::Timeout(_) | StoreError::Unavailable(_) | StoreError::Auth(_)
        )
    }

    /// A bounded label for `ratekeeper_store_errors_total{kind}`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Auth(_) => "auth",
            StoreError::Backend(_) => "backend",
        }
    }
}
