//! The Redis store: every check is one `EVALSHA` of its algorithm's script.
//!
//! Why Lua and not MULTI/EXEC: a check reads, decides and writes; only a
//! script does all three atomically in one round trip, so every instance
//! of every caller shares one exact limit per key.
//!
//! Key layout: `<prefix>{<client key>}:<algorithm tag>:<window ms>`. The
//! client key sits inside a hash tag so a check's key lives in one cluster
//! slot, and algorithm and window are part of the name so the same client
//! key under another rule never shares state. A client key containing `}`
//! ends the tag early, which changes only the slot, never the key itself.
//!
//! Timeouts and reconnects follow `shared/DEPENDENCIES.md`: fred's
//! `default_command_timeout` (per-call options are ignored for EVALSHA),
//! `max_command_attempts = 1` so nothing is replayed after a reconnect, a
//! reconnect policy so a dropped connection comes back, and `fail_fast =
//! false` so a service started before Redis connects once Redis appears.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use fred::types::scripts::Script;

use tokio::sync::mpsc;

use super::{Store, StoreError, batch, scripts};
use crate::domain::{Algorithm, Check, Clock, Outcome};

/// How to reach Redis and how to lay out keys.
#[derive(Clone)]
pub struct RedisOptions {
    pub url: String,
    pub key_prefix: String,
    /// Bound on every command, including the wait for a connection.
    pub timeout: Duration,
    pub pool_size: usize,
    /// Longest pause between reconnect attempts.
    pub reconnect_max_delay: Duration,
    /// Micro-batching: how long checks that arrive while another call is in
    /// flight wait to share one EVALSHA. Zero sends every check on its own.
    pub batch_window: Duration,
    /// `None`: scripts read Redis `TIME`, so all instances share one clock.
    /// Tests pass a controlled clock instead.
    pub clock: Option<Arc<dyn Clock>>,
    /// Extra key lifetime. 0 in production; tests that drive a simulated clock
    /// set it so real-time expiry cannot race simulated time.
    pub ttl_pad_ms: u64,
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
    scripts: [Script; 5],
    batch_script: Script,
    scripts_loaded: AtomicBool,
    /// Redis calls under way, direct or batched: with none, a check skips
    /// the batcher entirely, so a lone request pays nothing for batching.
    calls_in_flight: AtomicUsize,
    clustered: bool,
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
    pub fn connect(options: RedisOptions) -> Result<Self, StoreError> {
        let mut config = Config {
            fail_fast: false,
            ..Config::from_url(&options.url).map_err(|e| StoreError::Backend(e.to_string()))?
        };
        // Rediscover a cluster through every node it last knew, not only the
        // URL's: with the default, a client whose URL node dies stays down
        // for good, even after a replica has taken over (fred only retries
        // the configured endpoint). Not a cluster: nothing to set.
        let _ = config
            .server
            .set_cluster_discovery_policy(fred::types::config::ClusterDiscoveryPolicy::UseCache);
        let clustered = config.server.is_clustered();
        let max_delay = options
            .reconnect_max_delay
            .as_millis()
            .min(u32::MAX as u128) as u32;
        let pool = Builder::from_config(config)
            .with_performance_config(|p| p.default_command_timeout = options.timeout)
            .with_connection_config(|c| {
                c.max_command_attempts = 1;
                c.connection_timeout = options.timeout.max(Duration::from_millis(500));
                c.internal_command_timeout = options.timeout.max(Duration::from_millis(500));
            })
            .set_policy(ReconnectPolicy::new_exponential(
                0,
                50,
                max_delay.max(50),
                2,
            ))
            .build_pool(options.pool_size.max(1))
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        // The connection tasks end when `quit` closes the pool.
        drop(pool.connect_pool());
        let window = options.batch_window;
        let inner = Arc::new(Inner {
            pool,
            scripts: Algorithm::ALL.map(|a| Script::from_lua(scripts::source(a))),
            batch_script: Script::from_lua(scripts::BATCH),
            scripts_loaded: AtomicBool::new(false),
            calls_in_flight: AtomicUsize::new(0),
            clustered,
            options,
        });
        let batcher = (!window.is_zero()).then(|| batch::spawn(inner.clone(), window));
        Ok(RedisStore { inner, batcher })
    }

    /// Waits up to `limit` for the first connection, so a service started next
    /// to a healthy Redis is ready from its first request. Returns whether it
    /// connected; giving up is harmless, the client keeps trying.
    pub async fn wait_connected(&self, limit: Duration) -> bool {
        matches!(
            tokio::time::timeout(limit, self.inner.pool.wait_for_connect()).await,
            Ok(Ok(()))
        )
    }

    /// Closes every connection.
    pub async fn quit(&self) {
        let _ = self.inner.pool.quit().await;
    }

    /// The Redis key holding `check`'s state.
    pub fn key_for(&self, check: &Check) -> String {
        self.inner.key_for(check)
    }

    /// Runs `checks` in order as the batcher would: one batch call per
    /// cluster slot. Public for the tests that hold batches to single checks.
    pub async fn check_batch(&self, checks: &[Check]) -> Result<Vec<Outcome>, StoreError> {
        let mut outcomes = vec![None; checks.len()];
        for group in self
            .inner
            .group_by_slot(checks.iter().enumerate(), |(_, c)| c)
        {
            let (indexes, group): (Vec<usize>, Vec<&Check>) = group.into_iter().unzip();
            for (i, outcome) in indexes.into_iter().zip(self.inner.run_batch(&group).await?) {
                outcomes[i] = Some(outcome);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every check has a reply"))
            .collect())
    }
}

impl Inner {
    fn key_for(&self, check: &Check) -> String {
        let rule = &check.rule;
        let tag = rule.algorithm.key_tag();
        let window_ms = rule.window_us / 1_000;
        let mut key = String::with_capacity(self.options.key_prefix.len() + check.key.len() + 24);
        key.push_str(&self.options.key_prefix);
        key.push('{');
        key.push_str(&check.key);
        key.push_str("}:");
        key.push_str(tag);
        // Writing to a String cannot fail.
        let _ = write!(key, ":{window_ms}");
        key
    }

    /// Redis calls under way right now.
    pub(super) fn calls_in_flight(&self) -> usize {
        self.calls_in_flight.load(Ordering::Acquire)
    }

    fn now_arg(&self) -> String {
        self.options
            .clock
            .as_ref()
            .map_or(String::new(), |c| c.now_us().to_string())
    }

    async fn load_scripts(&self) -> Result<(), StoreError> {
        for script in self.scripts.iter().chain([&self.batch_script]) {
            script.load(self.pool.next()).await.map_err(classify)?;
        }
        self.scripts_loaded.store(true, Ordering::Release);
        Ok(())
    }

    /// EVALSHA, and after a Redis restart or failover emptied its script
    /// cache, EVAL: it runs the call and caches the script in one round trip,
    /// so this costs one extra call, not two (SCRIPT LOAD + EVALSHA).
    /// `call` builds the keys and arguments; fred consumes them, and building
    /// them again on the rare NOSCRIPT is cheaper than cloning them always.
    async fn run<K: Into<fred::types::MultipleKeys> + Send>(
        &self,
        script: &Script,
        source: &'static str,
        call: impl Fn() -> (K, Vec<String>),
    ) -> Result<Vec<i64>, StoreError> {
        self.calls_in_flight.fetch_add(1, Ordering::AcqRel);
        let _call = CallGuard(&self.calls_in_flight);
        let (keys, args) = call();
        match self.pool.evalsha(script.sha1().clone(), keys, args).await {
            Err(e) if is_noscript(&e) => {
                self.scripts_loaded.store(false, Ordering::Release);
                let (keys, args) = call();
                self.pool.eval(source, keys, args).await
            }
            other => other,
        }
        .map_err(classify)
    }

    pub(super) async fn check_one(&self, check: &Check) -> Result<Outcome, StoreError> {
        let rule = &check.rule;
        let algorithm = rule.algorithm;
        let reply = self
            .run(
                &self.scripts[algorithm.index()],
                scripts::source(algorithm),
                || {
                    let args = vec![
                        self.now_arg(),
                        rule.limit.to_string(),
                        rule.window_us.to_string(),
                        check.cost.to_string(),
                        rule.burst.to_string(),
                        self.options.ttl_pad_ms.to_string(),
                    ];
                    (self.key_for(check), args)
                },
            )
            .await?;
        outcome(&reply)
    }

    /// Groups items by the cluster slot of their check's key, keeping
    /// arrival order within each group (a single server is one group).
    pub(super) fn group_by_slot<T>(
        &self,
        items: impl IntoIterator<Item = T>,
        check: impl Fn(&T) -> &Check,
    ) -> Vec<Vec<T>> {
        let items = items.into_iter();
        if !self.clustered {
            return vec![items.collect()];
        }
        let mut groups: Vec<(u16, Vec<T>)> = Vec::new();
        for item in items {
            let slot = fred::util::redis_keyslot(self.key_for(check(&item)).as_bytes());
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, members)) => members.push(item),
                None => groups.push((slot, vec![item])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// One EVALSHA of the batch script for checks whose keys share a slot
    /// (see [`group_by_slot`](Self::group_by_slot)), applied in order.
    pub(super) async fn run_batch(&self, checks: &[&Check]) -> Result<Vec<Outcome>, StoreError> {
        let reply = self
            .run(&self.batch_script, scripts::BATCH, || {
                let keys: Vec<String> = checks.iter().map(|c| self.key_for(c)).collect();
                let mut args = Vec::with_capacity(2 + 5 * checks.len());
                args.push(self.now_arg());
                args.push(self.options.ttl_pad_ms.to_string());
                for check in checks {
                    let rule = &check.rule;
                    args.push(rule.algorithm.key_tag().to_string());
                    args.push(rule.limit.to_string());
                    args.push(rule.window_us.to_string());
                    args.push(check.cost.to_string());
                    args.push(rule.burst.to_string());
                }
                (keys, args)
            })
            .await?;
        if reply.len() != 4 * checks.len() {
            return Err(StoreError::Backend(format!(
                "unexpected batch reply of {} numbers for {} checks",
                reply.len(),
                checks.len()
            )));
        }
        reply.chunks(4).map(outcome).collect()
    }
}

fn outcome(reply: &[i64]) -> Result<Outcome, StoreError> {
    match *reply {
        [allowed, remaining, retry, reset] if remaining >= 0 && retry >= 0 && reset >= 0 => {
            Ok(Outcome {
                allowed: allowed == 1,
                remaining: remaining as u64,
                retry_after_us: retry as u64,
                reset_after_us: reset as u64,
            })
        }
        _ => Err(StoreError::Backend(format!(
            "unexpected script reply {reply:?}"
        ))),
    }
}

/// Server error codes that mean "not now" rather than "never". OOM: Redis is
/// at maxmemory with noeviction and refuses writes, an outage of capacity.
const TRANSIENT_SERVER_CODES: [&str; 7] = [
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "READONLY",
    "OOM",
];

/// Maps a fred error to whether the failure policy should answer.
fn classify(error: Error) -> StoreError {
    let details = error.details();
    // Server replies start with an upper-case code (ERR, WRONGTYPE, LOADING...);
    // fred's own errors about connection state are sentences ("Failed to
    // route command.", "Too many failed write attempts.").
    let code = details.split_whitespace().next().unwrap_or("");
    let from_server = !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase());
    match error.kind() {
        ErrorKind::Timeout => StoreError::Timeout(error.to_string()),
        ErrorKind::IO
        | ErrorKind::Canceled
        | ErrorKind::Routing
        | ErrorKind::Cluster
        | ErrorKind::Backpressure => StoreError::Unavailable(error.to_string()),
        _ if TRANSIENT_SERVER_CODES.contains(&code) => StoreError::Unavailable(error.to_string()),
        ErrorKind::Unknown if !from_server => StoreError::Unavailable(error.to_string()),
        _ => StoreError::Backend(error.to_string()),
    }
}

fn is_noscript(error: &Error) -> bool {
    error.details().starts_with("NOSCRIPT")
}

#[async_trait]
impl Store for RedisStore {
    async fn check(&self, check: &Check) -> Result<Outcome, StoreError> {
        match &self.batcher {
            // Batch only when a call is already under way: otherwise there is
            // nothing to wait for, and the hop through the batcher task would
            // only add latency.
            Some(batcher) if self.inner.calls_in_flight() > 0 => {
                batch::submit(batcher, check).await
            }
            _ => self.inner.check_one(check).await,
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let _: String = self.inner.pool.ping(None).await.map_err(classify)?;
        if !self.inner.scripts_loaded.load(Ordering::Acquire) {
            self.inner.load_scripts().await?;
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(kind: ErrorKind, details: &str) -> &'static str {
        classify(Error::new(kind, details.to_string())).kind()
    }

    #[test]
    fn outages_are_transient_and_bugs_are_not() {
        assert_eq!(kind_of(ErrorKind::Timeout, "Request timed out."), "timeout");
        assert_eq!(kind_of(ErrorKind::IO, "Connection closed."), "unavailable");
        assert_eq!(
            kind_of(ErrorKind::Unknown, "Failed to route command."),
            "unavailable"
        );
        assert_eq!(
            kind_of(ErrorKind::Unknown, "Too many failed write attempts."),
            "unavailable"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "LOADING Redis is loading the dataset in memory"
            ),
            "unavailable"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "OOM command not allowed when used memory > 'maxmemory'."
            ),
            "unavailable"
        );
        assert_eq!(
            kind_of(
                ErrorKind::Unknown,
                "ERR Error running script (call to f_x): @user_script:1: boom"
            ),
            "backend"
        );
        assert_eq!(
            kind_of(
                ErrorKind::InvalidArgument,
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ),
            "backend"
        );
    }
}
