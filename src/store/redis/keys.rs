//! Key layout:
//! - inline checks: `<prefix>{<client key>}:<algorithm tag>:<window ms>`;
//! - a policy's limits: `<prefix>{<client key>}:p:<policy>:<limit>:<algorithm tag>:<window ms>`.
//!
//! The client key sits inside a hash tag so every limit of a check lives in
//! one cluster slot (one script call can apply them all). Algorithm and
//! window are part of the name, so another rule never shares state and a
//! policy whose limit changes algorithm or window starts afresh, while a
//! changed `limit` or `burst` keeps its counters. Policy and limit names
//! hold no `:`, `{` or `}`, so what follows the tag's `}` tells the two
//! forms and every policy apart. A client key containing `}` ends the tag
//! early, which changes only the slot, never the key itself.
//!
//! One exception: a client key that is empty or starts with `}` would leave
//! the tag empty, and Redis then hashes the whole key, so the limits of one
//! check would land in different slots (CROSSSLOT on a cluster). Such a key
//! opens with `#{#` instead of `{`, which makes `#` its tag; no other key
//! has `#` right after the prefix, so no two client keys share a name.
//! (A prefix holding `{}` empties every tag; don't configure one.)

use std::fmt::Write as _;

use super::Inner;
use crate::domain::{Check, Limit};

impl Inner {
    pub(super) fn key_for(&self, check: &Check, limit: &Limit) -> String {
        let rule = &limit.rule;
        let tag = rule.algorithm.key_tag();
        let window_ms = rule.window_us / 1_000;
        let prefix = &self.options.key_prefix;
        let scope_len = check
            .policy
            .as_ref()
            .map_or(0, |p| p.len() + limit.name.len() + 4);
        let mut key = String::with_capacity(prefix.len() + check.key.len() + scope_len + 26);
        key.push_str(prefix);
        if !prefix.contains('{') && (check.key.is_empty() || check.key.starts_with('}')) {
            // See the module doc: an empty tag would spread the check's keys.
            key.push_str("#{#");
        } else {
            key.push('{');
        }
        key.push_str(&check.key);
        key.push_str("}:");
        if let Some(policy) = &check.policy {
            key.push_str("p:");
            key.push_str(policy);
            key.push(':');
            key.push_str(&limit.name);
            key.push(':');
        }
        key.push_str(tag);
        // Writing to a String cannot fail.
        let _ = write!(key, ":{window_ms}");
        key
    }

    /// The cluster slot of `check`'s key, without building the key: Redis
    /// hashes only the tag, `check.key` up to its first `}`. Builds the key
    /// only where the rule differs (an empty tag, braces in the prefix).
    pub(super) fn slot_of(&self, check: &Check) -> u16 {
        let tag = check.key.split('}').next().unwrap_or_default();
        let prefix = &self.options.key_prefix;
        if tag.is_empty() || prefix.contains(['{', '}']) {
            return fred::util::redis_keyslot(self.key_for(check, &check.limits[0]).as_bytes());
        }
        fred::util::redis_keyslot(tag.as_bytes())
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
            let slot = self.slot_of(check(&item));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, members)) => members.push(item),
                None => groups.push((slot, vec![item])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{RedisOptions, RedisStore};
    use crate::domain::{Algorithm, Check, Rule};

    /// `slot_of` skips building the key; it must agree with hashing the key.
    #[tokio::test]
    async fn slot_of_agrees_with_hashing_the_whole_key() {
        for prefix in ["rk:", "", "a{b}:"] {
            let store = RedisStore::connect(RedisOptions {
                url: "redis://127.0.0.1:1".into(),
                key_prefix: prefix.into(),
                timeout: Duration::from_millis(10),
                pool_size: 1,
                reconnect_max_delay: Duration::from_millis(10),
                batch_window: Duration::ZERO,
                clock: None,
                ttl_pad_ms: 0,
            })
            .unwrap();
            for key in [
                "user:42", "}x", "a}b{c", "{a}", "a{b}c", "{}", "ü}", "x{", "}",
            ] {
                let check = Check::single(
                    key,
                    Rule {
                        algorithm: Algorithm::SlidingLog,
                        limit: 1,
                        window_us: 1_000_000,
                        burst: 1,
                    },
                    1,
                );
                let whole = fred::util::redis_keyslot(store.key_for(&check).as_bytes());
                assert_eq!(store.inner.slot_of(&check), whole, "{prefix:?} {key:?}");
            }
            store.quit().await;
        }
    }
}
