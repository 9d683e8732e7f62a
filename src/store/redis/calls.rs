//! Running the script: one call carries the operations of one cluster slot
//! (see `wire.rs` for what it carries).

use std::sync::atomic::Ordering;

use fred::prelude::*;

use super::errors::{classify, is_moved, is_noscript};
use super::{CallGuard, Inner, wire};
use crate::domain::Check;
use crate::store::{Applied, Op, OpKind, StoreError, scripts};

impl Inner {
    /// Redis calls under way right now.
    pub(super) fn calls_in_flight(&self) -> usize {
        self.calls_in_flight.load(Ordering::Acquire)
    }

    pub(super) fn now_arg(&self) -> String {
        self.options
            .clock
            .as_ref()
            .map_or(String::new(), |c| c.now_us().to_string())
    }

    /// The script into every primary's cache, and the same code as a
    /// function library where the server and the ACL allow it
    /// (`function.rs`).
    pub(super) async fn load_scripts(&self) -> Result<(), StoreError> {
        let client = self.pool.next_connected();
        self.script.load(client).await.map_err(classify)?;
        self.load_function(client).await;
        self.scripts_loaded.store(true, Ordering::Release);
        Ok(())
    }

    /// FCALL of the function where it can be used (`function.rs`), else
    /// EVALSHA, and after a Redis restart or failover emptied its script
    /// cache, EVAL: it runs the call and caches the script in one round trip,
    /// so this costs one extra call, not two (SCRIPT LOAD + EVALSHA).
    /// A function found missing, or refused as a whole (OOM, READONLY), is
    /// run again by EVALSHA (`function.rs`).
    /// `call` builds the keys and arguments; fred consumes them, and building
    /// them again on the rare NOSCRIPT is cheaper than cloning them always.
    /// In a cluster the call goes to the pool of the node owning the slot
    /// of `routing`'s key (computed only then: a single server needs none).
    pub(super) async fn run<K, R>(
        &self,
        routing: &Check,
        call: impl Fn() -> (K, Vec<String>),
    ) -> Result<R, StoreError>
    where
        K: Into<fred::types::MultipleKeys> + Send,
        R: FromValue,
    {
        self.calls_in_flight.fetch_add(1, Ordering::AcqRel);
        let _call = CallGuard(&self.calls_in_flight);
        let routed;
        let pool = match &self.domains {
            Some(domains) => {
                routed = domains.route(&self.pool, self.slot_of(routing));
                &routed
            }
            None => &self.pool,
        };
        let (keys, args) = call();
        // A connected client, not the next in turn: after a restart the
        // pool's connections come back one by one, and a call given to one
        // still reconnecting waits for it, or fails, while another could
        // answer now.
        let client = pool.next_connected();
        let result = if self.functions.usable() {
            match client.fcall(self.function_name(), keys, args).await {
                Err(e) if self.fcall_failed(&e) => {
                    let (keys, args) = call();
                    self.evalsha(client, keys, args, &call).await
                }
                other => other,
            }
        } else {
            self.evalsha(client, keys, args, &call).await
        };
        self.liveness.observe(client, &result);
        if let (Err(e), Some(domains)) = (&result, &self.domains)
            && is_moved(e)
        {
            domains.suspect(&self.pool);
        }
        result.map_err(classify)
    }

    /// EVALSHA, or EVAL when the script cache lost it (see `run`).
    async fn evalsha<K, R>(
        &self,
        client: &Client,
        keys: K,
        args: Vec<String>,
        call: impl Fn() -> (K, Vec<String>),
    ) -> Result<R, Error>
    where
        K: Into<fred::types::MultipleKeys> + Send,
        R: FromValue,
    {
        match client.evalsha(self.script.sha1().clone(), keys, args).await {
            Err(e) if is_noscript(&e) => {
                self.scripts_loaded.store(false, Ordering::Release);
                let (keys, args) = call();
                client.eval(scripts::OPS.as_str(), keys, args).await
            }
            other => other,
        }
    }

    /// PUBLISH `message` on `channel`. In a cluster through the pool of a
    /// node (PUBLISH is broadcast to every node), not the discovery client,
    /// whose connections only pings exercise; like a check, a timeout makes
    /// the connection a suspect (`liveness.rs`).
    pub(super) async fn publish(&self, channel: &str, message: &str) -> Result<(), Error> {
        let routed;
        let pool = match &self.domains {
            Some(domains) => {
                routed = domains.route(&self.pool, fred::util::redis_keyslot(channel.as_bytes()));
                &routed
            }
            None => &self.pool,
        };
        let client = pool.next_connected();
        let result: Result<i64, Error> = client.publish(channel, message).await;
        self.liveness.observe(client, &result);
        result.map(drop)
    }

    /// One call carrying `ops`, whose keys share one cluster slot, applied
    /// in order. The outer error fails the whole call (an outage, a
    /// timeout); an inner one, only its operation.
    pub(super) async fn run_ops(
        &self,
        ops: &[Op<'_>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let admitted = self
            .ops_in_flight
            .admit(ops.len(), self.options.settings.timeout)
            .await;
        let Some(_admitted) = admitted else {
            return Err(StoreError::Overloaded(format!(
                "{} operations not sent: redis.max_in_flight operations were waiting on Redis for redis.timeout",
                ops.len()
            )));
        };
        if ops.iter().any(|op| op.kind == OpKind::Check) {
            self.check_calls.fetch_add(1, Ordering::Relaxed);
        }
        let reply: Vec<Value> = self.run(ops[0].check, || self.encode(ops)).await?;
        wire::decode(ops, &reply, self.options.settings.legacy_keys)
    }
}
