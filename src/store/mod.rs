//! Where counters live. [`Store`] is the one seam between deciding and
//! storing: the embedded [`memory::MemoryStore`] runs the domain functions
//! in-process, [`redis::RedisStore`] runs their Lua twins in Redis.

pub mod memory;
mod op;
mod record;
pub mod redis;
pub mod scripts;

pub use op::{Applied, DrawMode, Drawn, Op, OpKind, Settled};

use async_trait::async_trait;

use crate::domain::Check;

/// Runs operations atomically against shared state: the seam between
/// deciding and storing. Every kind of store work is an [`Op`] through
/// [`apply`](Store::apply); the tests' shorthand for one operation alone
/// is `StoreExt` (`tests/support/store_ext.rs`).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies `ops`, each atomically and in order (operations on one
    /// client key see each other's writes in that order), and answers each
    /// on its own: one operation's error is that operation's, not the
    /// call's. Each answer carries the store time it ran at
    /// ([`Applied::at_us`]). On Redis the operations of one cluster slot
    /// share one script call, and the calls for different slots go out at
    /// once.
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>>;

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

    /// What the store counts of itself, for `/metrics`.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}

/// What a store counts of itself: each `None` where this store does not
/// count it (then Redis reports its own, or it has no such thing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Keys holding state, where the store can count them cheaply (the
    /// embedded store); Redis reports its own.
    pub key_count: Option<usize>,
    /// Concurrency leases its keys hold, where the store bounds them
    /// itself (the embedded store: each counts against `memory.max_keys`).
    pub lease_count: Option<usize>,
    /// Keys evicted before their reset to make room, where the store does
    /// so itself (the embedded store at `memory.max_keys`); Redis counts
    /// its own in `INFO stats`.
    pub evictions: Option<u64>,
    /// Reservations held (`domain::reservation`), where the store keeps
    /// them itself (the embedded store, bounded by `memory.max_keys`);
    /// Redis counts them among its keys.
    pub reservation_count: Option<usize>,
    /// Connections to the store replaced because they stopped answering,
    /// if it has connections (Redis).
    pub connections_replaced: Option<u64>,
    /// Calls to the store that decided checks, if checks share calls
    /// (Redis: one script call per check sent alone, one per
    /// micro-batch). Checks sent over calls made is the mean batch size.
    pub check_calls: Option<u64>,
}

/// Where a store's invalidation listener reports (the deny cache).
pub trait InvalidationSink: Send + Sync + 'static {
    /// `key`'s state changed (any instance's message, this one's included).
    fn invalidated(&self, key: &str);
    /// Units of `key` were given back ([`OpKind::GiveBack`]): capacity is
    /// back, as after a refund, but nothing else changed. By default the
    /// same as [`invalidated`](InvalidationSink::invalidated); a holder of
    /// leased chunks keeps them here, where a reset or refund drops them.
    fn freed(&self, key: &str) {
        self.invalidated(key);
    }
    /// The runtime overrides, blocks or exemptions changed: reload them now.
    fn tenants_changed(&self) {}
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
    /// The TLS handshake with Redis failed: an untrusted or expired
    /// certificate, a client certificate refused, a plaintext port. A
    /// misconfiguration, answered by the failure policy like an outage;
    /// the message says what to fix.
    #[error("TLS to the store failed: {0}")]
    Tls(String),
    /// Not sent: this instance already has as many operations waiting on
    /// the store as it can answer in time (`redis.max_in_flight`).
    /// Answered by the failure policy, and not a sign the store is down.
    #[error("store overloaded: {0}")]
    Overloaded(String),
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
            StoreError::Timeout(_)
                | StoreError::Unavailable(_)
                | StoreError::Auth(_)
                | StoreError::Tls(_)
        )
    }

    /// Every value [`kind`](Self::kind) answers: the series of
    /// `ratekeeper_store_errors_total`, exported at 0 before any error.
    pub const KINDS: [&'static str; 6] = [
        "timeout",
        "unavailable",
        "auth",
        "backend",
        "overloaded",
        "tls",
    ];

    /// A bounded label for `ratekeeper_store_errors_total{kind}`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Auth(_) => "auth",
            StoreError::Backend(_) => "backend",
            StoreError::Tls(_) => "tls",
            StoreError::Overloaded(_) => "overloaded",
        }
    }
}
