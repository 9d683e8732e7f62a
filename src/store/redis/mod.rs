//! The Redis store: every call is one `FCALL` (or `EVALSHA`) of the one script
//! (`lua/ops.lua` and its parts), carrying the operations of one cluster
//! slot: a lone check, a reset or a refund, or a micro-batch of them
//! (`batch.rs`), or the slot's share of a list of operations, the lists'
//! slots sent at once.
//!
//! Why Lua and not MULTI/EXEC: a check reads, decides and writes; only a
//! script does all three atomically in one round trip, so every instance
//! of every caller shares one exact limit per key.
//!
//! Layout: `keys.rs` (key names and cluster slots), `wire.rs` (operations
//! to `KEYS`/`ARGV` and the reply back), `calls.rs` (one FCALL or
//! EVALSHA), `function.rs` (the script as a Redis function),
//! `batch.rs` (the micro-batcher task), `client.rs` (how every client is
//! built), `in_flight.rs` (the `redis.max_in_flight` cap),
//! `errors.rs` (outage or bug), `auth.rs` (refused credentials and
//! failed TLS handshakes), `tls.rs` (the rustls config and its re-read files),
//! `settings.rs` (the `[redis]` section it is built from),
//! `domains.rs` (which cluster node owns a slot), `nodes.rs` (a client
//! pool per cluster node, so one dead node stalls only its own keys) and
//! `invalidation.rs` (the pub/sub channel that keeps deny caches exact
//! across instances).
//!
//! Timeouts and reconnects follow `shared/DEPENDENCIES.md`: fred's
//! `default_command_timeout` (per-call options are ignored for EVALSHA),
//! `max_command_attempts = 1` so nothing is replayed after a reconnect, a
//! reconnect policy so a dropped connection comes back, and `fail_fast =
//! false` so a service started before Redis connects once Redis appears.

mod auth;
mod batch;
mod calls;
mod client;
mod domains;
mod errors;
mod function;
mod in_flight;
mod invalidation;
mod keys;
mod levels;
mod liveness;
mod nodes;
pub mod settings;
pub mod tenants;
pub mod tls;
pub mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use fred::types::scripts::Script;
use tokio::sync::mpsc;

use super::{Applied, Op, Store, StoreError, StoreStats, scripts};
use crate::domain::{Check, Clock, Limit, Outcome};
use crate::tasks::Tasks;
use client::{build_pool, client_config, reconnect_policy, tcp_config};
use errors::classify;
pub use in_flight::DEFAULT_MAX_IN_FLIGHT;
use in_flight::InFlight;
pub use invalidation::{FREED_PREFIX, InvalidationListener, MAX_MESSAGE_BYTES};
pub use settings::RedisSettings;

/// How to reach Redis and how to lay out keys: the `[redis]` settings as
/// `config` read them, and two knobs only tests turn.
#[derive(Clone)]
pub struct RedisOptions {
    pub settings: RedisSettings,
    /// `None`: scripts read Redis `TIME`, so all instances share one clock.
    /// Tests pass a controlled clock instead.
    pub clock: Option<Arc<dyn Clock>>,
    /// Extra key lifetime. 0 in production; tests that drive a simulated clock
    /// set it so real-time expiry cannot race simulated time.
    pub ttl_pad_ms: u64,
}

/// The settings alone: Redis's clock, no extra key lifetime.
impl From<RedisSettings> for RedisOptions {
    fn from(settings: RedisSettings) -> Self {
        RedisOptions {
            settings,
            clock: None,
            ttl_pad_ms: 0,
        }
    }
}

/// A store backed by a Redis server (or a cluster, via a `redis-cluster://` URL).
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
    /// Present when micro-batching is on; the batcher task ends when the last
    /// clone of this sender is dropped.
    batcher: Option<mpsc::Sender<batch::Job>>,
}

/// What the batcher task shares with the store.
pub(super) struct Inner {
    pool: Pool,
    /// The store's own background tasks (listeners, batcher, probes),
    /// ended and joined by `quit` before it closes the connections.
    tasks: Tasks,
    /// The one script (`store::scripts::OPS`).
    script: Script,
    /// The invalidation channel, which every call names.
    channel: String,
    scripts_loaded: AtomicBool,
    /// The same code as a function: whether calls use it.
    functions: function::Functions,
    /// Redis calls under way, direct or batched: with none, a check skips
    /// the batcher entirely, so a lone request pays nothing for batching.
    calls_in_flight: AtomicUsize,
    /// Script calls made for checks, alone or batched.
    check_calls: AtomicU64,
    /// Operations sent and not yet answered, against their cap.
    ops_in_flight: InFlight,
    clustered: bool,
    /// Credentials refused while connecting, to explain timeouts.
    auth: Arc<auth::AuthWatch>,
    /// Which node serves which slot, in a cluster.
    domains: Option<domains::Domains>,
    /// Replaces connections that stopped answering, in every pool.
    liveness: Arc<liveness::Liveness>,
    options: RedisOptions,
}

/// Counts one Redis call for as long as it lives, error paths included.
struct CallGuard<'a>(&'a AtomicUsize);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RedisStore {
    /// Builds the client and starts connecting in the background. Does not wait:
    /// a service started before Redis answers by its failure policy meanwhile.
    /// Must be called inside a tokio runtime.
    pub fn connect(options: impl Into<RedisOptions>) -> Result<Self, StoreError> {
        let options = options.into();
        let config = client_config(&options.settings)?;
        let clustered = config.server.is_clustered();
        let pool = build_pool(config.clone(), &options.settings)?;
        let tasks = Tasks::new();
        let auth = auth::AuthWatch::spawn(&pool, &tasks);
        let domains = clustered.then(|| {
            let nodes = nodes::Nodes::new(config, options.settings.clone(), tasks.clone());
            domains::Domains::spawn(&pool, nodes, &tasks)
        });
        // The connection tasks end when `quit` closes the pool.
        drop(pool.connect_pool());
        let window = options.settings.batch_window;
        let inner = Arc::new(Inner {
            pool,
            script: Script::from_lua(scripts::OPS.as_str()),
            channel: format!("{}invalidate", options.settings.key_prefix),
            scripts_loaded: AtomicBool::new(false),
            functions: function::Functions::default(),
            calls_in_flight: AtomicUsize::new(0),
            check_calls: AtomicU64::new(0),
            ops_in_flight: InFlight::new(options.settings.max_in_flight.max(1)),
            clustered,
            auth,
            domains,
            liveness: liveness::Liveness::new(options.settings.unresponsive_timeout, tasks.clone()),
            tasks,
            options,
        });
        let batcher = (!window.is_zero()).then(|| batch::spawn(inner.clone(), window));
        Ok(RedisStore { inner, batcher })
    }

    /// At most `cap` operations (checks, resets, refunds) sent and not yet
    /// answered (`redis.max_in_flight`, which `connect` sets); past it a call waits for room up
    /// to `redis.timeout`, then is answered with [`StoreError::Overloaded`],
    /// by the failure policy. Set once, before use.
    pub fn set_max_in_flight(&self, cap: usize) {
        self.inner.ops_in_flight.set_cap(cap.max(1));
    }

    /// Waits up to `limit` for the first connection, so a service started next
    /// to a healthy Redis is ready from its first request. Returns whether it
    /// connected; giving up is harmless, the client keeps trying.
    pub async fn wait_connected(&self, limit: Duration) -> bool {
        let connected = matches!(
            tokio::time::timeout(limit, self.inner.pool.wait_for_connect()).await,
            Ok(Ok(()))
        );
        if let (true, Some(domains)) = (connected, &self.inner.domains) {
            // The listeners do this on fred's events too; now, so the node
            // pools start connecting before the first check.
            domains.refresh(&self.inner.pool);
        }
        connected
    }

    /// The store's own background tasks still running: its listeners, its
    /// batcher, and any probe or sync under way. None after
    /// [`quit`](Self::quit), unless a batch call outlived its bound there.
    pub fn background_tasks(&self) -> usize {
        self.inner.tasks.len()
    }

    /// Ends the store's own tasks, then closes every connection. Listeners,
    /// probes and syncs write nothing and are cut at once; the batcher
    /// finishes the calls it has sent, each bounded by twice `redis.timeout`
    /// (a wait for room under `redis.max_in_flight`, then the call), which
    /// is how long this waits for them.
    pub async fn quit(&self) {
        let calls = self.inner.options.settings.timeout.saturating_mul(2);
        self.inner.tasks.shutdown(calls).await;
        if let Some(domains) = &self.inner.domains {
            domains.quit_nodes().await;
        }
        let _ = self.inner.pool.quit().await;
    }

    /// The Redis key holding the state of `check`'s first (in the
    /// single-rule form, only) limit.
    pub fn key_for(&self, check: &Check) -> String {
        self.inner.key_for(check, &check.limits[0])
    }

    /// The Redis key holding the state of `limit` of `check`.
    pub fn limit_key(&self, check: &Check, limit: &Limit) -> String {
        self.inner.key_for(check, limit)
    }

    /// Runs `checks` in order as the batcher would: one call per cluster
    /// slot. Public for the tests that hold batches to single checks.
    /// Fails if any check failed; see [`check_each`](Self::check_each).
    pub async fn check_batch(&self, checks: &[Check]) -> Result<Vec<Vec<Outcome>>, StoreError> {
        self.check_each(checks).await?.into_iter().collect()
    }

    /// Like [`check_batch`](Self::check_batch), with each check's own
    /// result: a key of the wrong type fails only its check. The outer
    /// error is a call's own (an outage, a timeout).
    pub async fn check_each(
        &self,
        checks: &[Check],
    ) -> Result<Vec<Result<Vec<Outcome>, StoreError>>, StoreError> {
        let mut outcomes = vec![None; checks.len()];
        for group in self
            .inner
            .group_by_slot(checks.iter().enumerate(), |(_, c)| c)
        {
            let (places, ops): (Vec<usize>, Vec<Op>) =
                group.into_iter().map(|(i, c)| (i, Op::check(c))).unzip();
            for (i, answer) in places.into_iter().zip(self.inner.run_ops(&ops).await?) {
                outcomes[i] = Some(answer.map(|a| a.outcomes));
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every check has a reply"))
            .collect())
    }
}

impl Inner {
    /// `ops` in one call per cluster slot, the calls at once, each
    /// operation's answer in its place.
    async fn apply_by_slot(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        // One call for everything (a lone operation, or a short list without
        // a cluster): no grouping, reordering or joining, which cost a single
        // check about 3 000 instructions (bench/cost.sh).
        if ops.len() == 1 || (!self.clustered && ops.len() <= MAX_OPS_PER_CALL) {
            return self.run_chunks(ops).await;
        }
        let groups = self.group_by_slot(ops.iter().copied().enumerate(), |(_, op)| op.check);
        let calls = groups.into_iter().map(|group| async move {
            let (places, ops): (Vec<usize>, Vec<Op>) = group.into_iter().unzip();
            let answers = self.run_chunks(&ops).await;
            places.into_iter().zip(answers).collect::<Vec<_>>()
        });
        let mut answers: Vec<Option<Result<Applied, StoreError>>> = vec![None; ops.len()];
        for (place, answer) in futures_util::future::join_all(calls)
            .await
            .into_iter()
            .flatten()
        {
            answers[place] = Some(answer);
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(StoreError::Backend("no answer".into()))))
            .collect()
    }

    /// `ops` of one cluster slot, in calls of at most [`MAX_OPS_PER_CALL`]
    /// one after another: a call holds Redis for all of its operations, and
    /// the order of the calls keeps operations on one key in their order.
    async fn run_chunks(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        let mut answers = Vec::with_capacity(ops.len());
        for chunk in ops.chunks(MAX_OPS_PER_CALL) {
            match self.run_ops(chunk).await {
                Ok(mine) => answers.extend(mine),
                Err(error) => answers.extend(std::iter::repeat_n(Err(error), chunk.len())),
            }
        }
        answers
    }
}

/// The most operations one script call carries (a batch of checks, or
/// checks gathered by micro-batching): a call holds Redis for all of them,
/// about 1 ms for 128 checks, so a longer list goes as several calls.
pub(super) const MAX_OPS_PER_CALL: usize = 128;

impl RedisStore {
    /// `ops`, some of them levels checks spanning cluster slots: those in
    /// two phases each (`levels.rs`), the others as usual, all at once.
    async fn apply_spanning(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        let (spanning, plain): (Vec<usize>, Vec<usize>) =
            (0..ops.len()).partition(|&i| self.inner.spans_slots(&ops[i]));
        let plain_ops: Vec<Op> = plain.iter().map(|&i| ops[i]).collect();
        let across = spanning.iter().map(|&i| self.inner.apply_across(&ops[i]));
        let (across, answers) = futures_util::future::join(
            futures_util::future::join_all(across),
            self.inner.apply_by_slot(&plain_ops),
        )
        .await;
        let mut all: Vec<Option<Result<Applied, StoreError>>> = vec![None; ops.len()];
        for (i, answer) in spanning.into_iter().zip(across) {
            all[i] = Some(answer);
        }
        for (i, answer) in plain.into_iter().zip(answers) {
            all[i] = Some(answer);
        }
        all.into_iter()
            .map(|a| {
                a.unwrap_or_else(|| Err(StoreError::Backend("no answer".into())))
                    .map_err(|e| self.inner.auth.explain(e))
            })
            .collect()
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn apply(&self, ops: &[Op<'_>]) -> Vec<Result<Applied, StoreError>> {
        if ops.iter().any(|op| self.inner.spans_slots(op)) {
            return self.apply_spanning(ops).await;
        }
        let answers = match (ops, &self.batcher) {
            // Batch only when a call is already under way: otherwise there
            // is nothing to wait for, and the hop through the batcher task
            // would only add latency.
            ([one], Some(batcher)) if self.inner.calls_in_flight() > 0 => {
                vec![batch::submit(batcher, one).await]
            }
            _ => self.inner.apply_by_slot(ops).await,
        };
        answers
            .into_iter()
            .map(|a| a.map_err(|e| self.inner.auth.explain(e)))
            .collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let client = self.inner.pool.next_connected();
        let pong: Result<String, _> = client.ping(None).await;
        self.inner.liveness.observe(client, &pong);
        pong.map_err(|e| self.inner.auth.explain(classify(e)))?;
        if !self.inner.scripts_loaded.load(Ordering::Acquire) {
            self.inner.load_scripts().await?;
        } else if self.inner.functions.should_retry() {
            self.inner.load_function(client).await;
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            connections_replaced: Some(self.inner.liveness.replaced()),
            check_calls: Some(self.inner.check_calls.load(Ordering::Relaxed)),
            ..StoreStats::default()
        }
    }

    fn failure_domain(&self, check: &Check) -> u64 {
        match &self.inner.domains {
            Some(domains) => domains.of(self.inner.slot_of(check)),
            None => 0,
        }
    }
}
