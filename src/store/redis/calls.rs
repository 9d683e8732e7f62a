//! Running the scripts: one check, or one batch of checks sharing a slot.

use std::sync::atomic::Ordering;

use fred::prelude::*;
use fred::types::scripts::Script;

use super::errors::{classify, classify_message, is_moved, is_noscript};
use super::{CallGuard, Inner};
use crate::domain::{Check, Outcome};
use crate::store::{Adjusted, StoreError, scripts};

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

    pub(super) async fn load_scripts(&self) -> Result<(), StoreError> {
        for script in [
            &self.check_script,
            &self.batch_script,
            &self.reset_script,
            &self.refund_script,
        ] {
            script
                .load(self.pool.next_connected())
                .await
                .map_err(classify)?;
        }
        self.scripts_loaded.store(true, Ordering::Release);
        Ok(())
    }

    /// EVALSHA, and after a Redis restart or failover emptied its script
    /// cache, EVAL: it runs the call and caches the script in one round trip,
    /// so this costs one extra call, not two (SCRIPT LOAD + EVALSHA).
    /// `call` builds the keys and arguments; fred consumes them, and building
    /// them again on the rare NOSCRIPT is cheaper than cloning them always.
    /// In a cluster the call goes to the pool of the node owning the slot
    /// of `routing`'s key (computed only then: a single server needs none).
    pub(super) async fn run<K, R>(
        &self,
        routing: &Check,
        script: &Script,
        source: &'static str,
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
        let result = match client.evalsha(script.sha1().clone(), keys, args).await {
            Err(e) if is_noscript(&e) => {
                self.scripts_loaded.store(false, Ordering::Release);
                let (keys, args) = call();
                client.eval(source, keys, args).await
            }
            other => other,
        };
        self.liveness.observe(client, &result);
        if let (Err(e), Some(domains)) = (&result, &self.domains)
            && is_moved(e)
        {
            domains.suspect(&self.pool);
        }
        result.map_err(classify)
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

    /// One EVALSHA of the check script: every limit of `check`, all or nothing.
    pub(super) async fn check_one(&self, check: &Check) -> Result<Vec<Outcome>, StoreError> {
        self.check_calls.fetch_add(1, Ordering::Relaxed);
        let reply = self
            .run_one(check, &self.check_script, scripts::CHECK, None)
            .await?;
        outcomes(&reply, check.limits.len())
    }

    /// One EVALSHA of the reset or refund script (`lua/adjust.lua`): the
    /// same keys and arguments as a check plus the invalidation channel and
    /// the client key, which the script PUBLISHes; the same reply plus
    /// whether that PUBLISH succeeded.
    pub(super) async fn adjust_one(
        &self,
        check: &Check,
        refund: bool,
        channel: &str,
    ) -> Result<Adjusted, StoreError> {
        let (script, source) = if refund {
            (&self.refund_script, scripts::REFUND)
        } else {
            (&self.reset_script, scripts::RESET)
        };
        let reply = self.run_one(check, script, source, Some(channel)).await?;
        match reply.split_last() {
            Some((&flag, rest)) if flag == 0 || flag == 1 => Ok(Adjusted {
                outcomes: outcomes(rest, check.limits.len())?,
                published: Some(flag == 1),
            }),
            _ => Err(StoreError::Backend(format!(
                "unexpected script reply {reply:?}"
            ))),
        }
    }

    /// `script` with `check`'s keys and the check script's arguments, then
    /// (for reset and refund) `channel` and the client key.
    async fn run_one(
        &self,
        check: &Check,
        script: &Script,
        source: &'static str,
        channel: Option<&str>,
    ) -> Result<Vec<i64>, StoreError> {
        self.run(check, script, source, || {
            let keys: Vec<String> = check
                .limits
                .iter()
                .map(|l| self.key_for(check, l))
                .collect();
            let mut args = Vec::with_capacity(5 + 4 * check.limits.len());
            args.push(self.now_arg());
            args.push(self.options.ttl_pad_ms.to_string());
            args.push(check.cost.to_string());
            push_limits(&mut args, check);
            if let Some(channel) = channel {
                args.push(channel.to_string());
                args.push(check.key.clone());
            }
            (keys, args)
        })
        .await
    }

    /// One EVALSHA of the batch script for checks whose keys share a slot
    /// (see [`group_by_slot`](Self::group_by_slot)), applied in order. The
    /// outer error fails the whole call; an inner one, only its check.
    pub(super) async fn run_batch(
        &self,
        checks: &[&Check],
    ) -> Result<Vec<Result<Vec<Outcome>, StoreError>>, StoreError> {
        self.check_calls.fetch_add(1, Ordering::Relaxed);
        let limits: usize = checks.iter().map(|c| c.limits.len()).sum();
        let reply: Vec<Value> = self
            .run(checks[0], &self.batch_script, scripts::BATCH, || {
                let keys: Vec<String> = checks
                    .iter()
                    .flat_map(|c| c.limits.iter().map(|l| self.key_for(c, l)))
                    .collect();
                let mut args = Vec::with_capacity(2 + 2 * checks.len() + 4 * limits);
                args.push(self.now_arg());
                args.push(self.options.ttl_pad_ms.to_string());
                for check in checks {
                    args.push(check.limits.len().to_string());
                    args.push(check.cost.to_string());
                    push_limits(&mut args, check);
                }
                (keys, args)
            })
            .await?;
        if reply.len() != 4 * limits {
            return Err(StoreError::Backend(format!(
                "unexpected batch reply of {} values for {limits} limits",
                reply.len(),
            )));
        }
        let mut rest = &reply[..];
        Ok(checks
            .iter()
            .map(|check| {
                let (mine, after) = rest.split_at(4 * check.limits.len());
                rest = after;
                batch_outcomes(mine)
            })
            .collect())
    }
}

/// Each limit's algorithm tag, limit, window and burst.
fn push_limits(args: &mut Vec<String>, check: &Check) {
    for limit in check.limits.iter() {
        let rule = &limit.rule;
        args.push(rule.algorithm.key_tag().to_string());
        args.push(rule.limit.to_string());
        args.push(rule.window_us.to_string());
        args.push(rule.burst.to_string());
    }
}

/// One check's part of a batch reply: four numbers per limit, or -1 and
/// the error its check raised (see `lua/batch.lua`).
fn batch_outcomes(reply: &[Value]) -> Result<Vec<Outcome>, StoreError> {
    if let [Value::Integer(-1), message, ..] = reply {
        // The reply's own words, so its code classifies it as on the
        // direct path: an OOM or READONLY is an outage, not a 500.
        return Err(classify_message(&message.as_str().unwrap_or_default()));
    }
    let numbers: Option<Vec<i64>> = reply.iter().map(Value::as_i64).collect();
    match numbers {
        Some(numbers) => outcomes(&numbers, reply.len() / 4),
        None => Err(StoreError::Backend(format!(
            "unexpected batch reply {reply:?}"
        ))),
    }
}

/// Four numbers per limit: allowed, remaining, retry_after_us, reset_after_us.
fn outcomes(reply: &[i64], limits: usize) -> Result<Vec<Outcome>, StoreError> {
    if reply.len() != 4 * limits {
        return Err(StoreError::Backend(format!(
            "unexpected script reply {reply:?} for {limits} limits"
        )));
    }
    reply
        .chunks(4)
        .map(|four| match *four {
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
        })
        .collect()
}
