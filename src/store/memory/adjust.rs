//! Reset and refund on the embedded store: the domain's twins of
//! `lua/adjust.lua`, under the same shard lock as a check, so each is
//! atomic with respect to checks on the same client key.

use super::MemoryStore;
use crate::domain::Check;
use crate::domain::state_key::StateKey;
use crate::store::{Applied, StoreError};

impl MemoryStore {
    /// Deletes the state of every limit of `check`, then answers like a
    /// check of cost 0 (see [`Store::reset`](crate::store::Store::reset)).
    pub fn reset_now(&self, check: &Check) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut shard = self.inner.shard_of(check);
        for limit in check.limits.iter() {
            shard.map.remove(&StateKey::of(check, limit));
        }
        Ok(Applied::unshared(self.inner.check_in(
            &mut shard.map,
            check,
            0,
            now,
        )))
    }

    /// Gives back up to `check.cost` on every limit of `check`, then
    /// answers like a check of cost 0 (see
    /// [`Store::refund`](crate::store::Store::refund)). Expired state is
    /// "never seen", as after a Redis TTL: nothing to give back.
    pub fn refund_now(&self, check: &Check) -> Result<Applied, StoreError> {
        let now = self.inner.clock.now_us();
        let mut shard = self.inner.shard_of(check);
        for limit in check.limits.iter() {
            let Some(entry) = shard.map.get_mut(&StateKey::of(check, limit)) else {
                continue;
            };
            if entry.expires_at_us <= now {
                continue;
            }
            // The buckets' refunds set the expiry as their Lua does, only
            // ever lengthening it (PEXPIRE GT); the others keep the one
            // their last spend set.
            if let Some(lives) = entry.state.refund(&limit.rule, now, check.cost) {
                entry.expires_at_us = entry.expires_at_us.max(now.saturating_add(lives));
            }
        }
        Ok(Applied::unshared(self.inner.check_in(
            &mut shard.map,
            check,
            0,
            now,
        )))
    }
}
