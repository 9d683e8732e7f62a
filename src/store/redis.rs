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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use fred::types::scripts::Script;

use super::{Store, StoreError, scripts};
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
    pool: Pool,
    scripts: Arc<[Script; 5]>,
    scripts_loaded: Arc<AtomicBool>,
    options: RedisOptions,
}

impl RedisStore {
    /// Builds the client and starts connecting in the background. Does not wait:
    /// a service started before Redis answers by its failure policy meanwhile.
    pub fn connect(options: RedisOptions) -> Result<Self, StoreError> {
        let config = Config {
            fail_fast: false,
            ..Config::from_url(&options.url).map_err(|e| StoreError::Backend(e.to_string()))?
        };
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
        Ok(RedisStore {
            pool,
            scripts: Arc::new(Algorithm::ALL.map(|a| Script::from_lua(scripts::source(a)))),
            scripts_loaded: Arc::new(AtomicBool::new(false)),
            options,
        })
    }

    /// Waits up to `limit` for the first connection, so a service started next
    /// to a healthy Redis is ready from its first request. Returns whether it
    /// connected; giving up is harmless, the client keeps trying.
    pub async fn wait_connected(&self, limit: Duration) -> bool {
        matches!(
            tokio::time::timeout(limit, self.pool.wait_for_connect()).await,
            Ok(Ok(()))
        )
    }

    /// Closes every connection.
    pub async fn quit(&self) {
        let _ = self.pool.quit().await;
    }

    /// The Redis key holding `check`'s state.
    pub fn key_for(&self, check: &Check) -> String {
        let rule = &check.rule;
        let tag = rule.algorithm.key_tag();
        let window_ms = rule.window_us / 1_000;
        let mut key = String::with_capacity(self.options.key_prefix.len() + check.key.len() + 24);
        key.push_str(&self.options.key_prefix);
        key.push('{');
        key.push_str(&check.key);
        key.push_str("}:");
        key.push_str(tag);
        key.push(':');
        key.push_str(&window_ms.to_string());
        key
    }

    async fn load_scripts(&self) -> Result<(), StoreError> {
        for script in self.scripts.iter() {
            script.load(self.pool.next()).await.map_err(classify)?;
        }
        self.scripts_loaded.store(true, Ordering::Release);
        Ok(())
    }

    async fn evalsha(
        &self,
        script: &Script,
        key: String,
        args: Vec<String>,
    ) -> Result<Vec<i64>, Error> {
        self.pool.evalsha(script.sha1().clone(), key, args).await
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
        let rule = &check.rule;
        let script = &self.scripts[rule.algorithm.index()];
        let now = self
            .options
            .clock
            .as_ref()
            .map_or(String::new(), |c| c.now_us().to_string());
        let args = vec![
            now,
            rule.limit.to_string(),
            rule.window_us.to_string(),
            check.cost.to_string(),
            rule.burst.to_string(),
            self.options.ttl_pad_ms.to_string(),
        ];
        let key = self.key_for(check);
        let reply = match self.evalsha(script, key.clone(), args.clone()).await {
            // Redis restarted or failed over: its script cache is empty.
            // EVAL runs the check and caches the script in one round trip,
            // so this costs one extra call, not two (SCRIPT LOAD + EVALSHA).
            Err(e) if is_noscript(&e) => {
                self.scripts_loaded.store(false, Ordering::Release);
                self.pool
                    .eval(scripts::source(rule.algorithm), key, args)
                    .await
            }
            other => other,
        }
        .map_err(classify)?;
        match reply[..] {
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

    async fn ping(&self) -> Result<(), StoreError> {
        let _: String = self.pool.ping(None).await.map_err(classify)?;
        if !self.scripts_loaded.load(Ordering::Acquire) {
            self.load_scripts().await?;
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
