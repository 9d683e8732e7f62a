//! Running the scripts: one check, or one batch of checks sharing a slot.

use std::sync::atomic::Ordering;

use fred::prelude::*;
use fred::types::scripts::Script;

use super::errors::{classify, classify_message, is_moved, is_noscript};
use super::{CallGuard, Inner};
use crate::domain::{Check, Outcome};
use crate::store::{StoreError, scripts};

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
        for script in self.scripts.iter().chain([&self.batch_script]) {
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
        if let (Err(e), Some(domains)) = (&result, &self.domains) {
            if is_moved(e) {
                domains.suspect(&self.pool);
            }
        }
        result.map_err(classify)
    }

    pub(super) async fn check_one(&self, check: &Check) -> Result<Outcome, StoreError> {
        let rule = &check.rule;
        let algorithm = rule.algorithm;
        let reply: Vec<i64> = self
            .run(
                check,
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

    /// One EVALSHA of the batch script for checks whose keys share a slot
    /// (see [`group_by_slot`](Self::group_by_slot)), applied in order. The
    /// outer error fails the whole call; an inner one, only its check.
    pub(super) async fn run_batch(
        &self,
        checks: &[&Check],
    ) -> Result<Vec<Result<Outcome, StoreError>>, StoreError> {
        let reply: Vec<Value> = self
            .run(checks[0], &self.batch_script, scripts::BATCH, || {
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
                "unexpected batch reply of {} values for {} checks",
                reply.len(),
                checks.len()
            )));
        }
        Ok(reply.chunks(4).map(batch_outcome).collect())
    }
}

/// One check's part of a batch reply: four numbers, or -1 and the error
/// its check raised (see `lua/batch.lua`).
fn batch_outcome(reply: &[Value]) -> Result<Outcome, StoreError> {
    if let [Value::Integer(-1), message, ..] = reply {
        // The reply's own words, so its code classifies it as on the
        // direct path: an OOM or READONLY is an outage, not a 500.
        return Err(classify_message(&message.as_str().unwrap_or_default()));
    }
    let numbers: Option<Vec<i64>> = reply.iter().map(Value::as_i64).collect();
    match numbers {
        Some(numbers) => outcome(&numbers),
        None => Err(StoreError::Backend(format!(
            "unexpected batch reply {reply:?}"
        ))),
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
