//! Key layout: `<prefix>{<client key>}:<algorithm tag>:<window ms>`. The
//! client key sits inside a hash tag so a check's key lives in one cluster
//! slot, and algorithm and window are part of the name so the same client
//! key under another rule never shares state. A client key containing `}`
//! ends the tag early, which changes only the slot, never the key itself.

use std::fmt::Write as _;

use super::Inner;
use crate::domain::Check;

impl Inner {
    pub(super) fn key_for(&self, check: &Check) -> String {
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

    /// The cluster slot of `check`'s key, without building the key: Redis
    /// hashes only the tag, `check.key` up to its first `}`. Builds the key
    /// only where the rule differs (an empty tag, braces in the prefix).
    pub(super) fn slot_of(&self, check: &Check) -> u16 {
        let tag = check.key.split('}').next().unwrap_or_default();
        let prefix = &self.options.key_prefix;
        if tag.is_empty() || prefix.contains(['{', '}']) {
            return fred::util::redis_keyslot(self.key_for(check).as_bytes());
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
                let check = Check {
                    key: key.into(),
                    rule: Rule {
                        algorithm: Algorithm::SlidingLog,
                        limit: 1,
                        window_us: 1_000_000,
                        burst: 1,
                    },
                    cost: 1,
                };
                let whole = fred::util::redis_keyslot(store.key_for(&check).as_bytes());
                assert_eq!(store.inner.slot_of(&check), whole, "{prefix:?} {key:?}");
            }
            store.quit().await;
        }
    }
}
