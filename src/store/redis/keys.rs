//! Key names and cluster slots. The layout is the domain's, shared with
//! the embedded store (`domain::state_key`); here it is written out under
//! the configured prefix, and checks are grouped by the slot Redis hashes
//! them to.

use super::Inner;
use crate::domain::state_key::{StateKey, hash_tag};
use crate::domain::{Check, Limit};

impl Inner {
    pub(super) fn key_for(&self, check: &Check, limit: &Limit) -> String {
        StateKey::of(check, limit).write(&self.options.settings.key_prefix)
    }

    /// The cluster slot of `check`'s keys (every limit's is the same),
    /// without building a key: Redis hashes only the tag, the escaped client
    /// key. Builds a key only when the prefix holds braces of its own.
    pub(super) fn slot_of(&self, check: &Check) -> u16 {
        if self.options.settings.key_prefix.contains(['{', '}']) {
            return fred::util::redis_keyslot(self.key_for(check, &check.limits[0]).as_bytes());
        }
        fred::util::redis_keyslot(hash_tag(&check.key).as_bytes())
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

    use super::super::{DEFAULT_MAX_IN_FLIGHT, RedisSettings, RedisStore};
    use crate::domain::{Algorithm, Check, Limit, Rule};

    fn limit(name: &str, algorithm: Algorithm, window_us: u64) -> Limit {
        Limit {
            name: name.into(),
            rule: Rule {
                algorithm,
                limit: 1,
                window: crate::domain::Window::Length(window_us),
                burst: 1,
            },
            scope: None,
            level: None,
        }
    }

    /// `slot_of` skips building the keys; it must agree with hashing each
    /// limit's whole key name, whatever the client key and the prefix hold
    /// (a key starting with `}` once left the tag empty, sending the limits
    /// of one check to different slots: CROSSSLOT on a cluster).
    #[tokio::test]
    async fn every_limit_of_a_check_hashes_to_slot_of() {
        for prefix in ["rk:", "", "a{b}:", "x{", "a}b{"] {
            let store = RedisStore::connect(RedisSettings {
                url: "redis://127.0.0.1:1".into(),
                key_prefix: prefix.into(),
                timeout: Duration::from_millis(10),
                pool_size: 1,
                reconnect_max_delay: Duration::from_millis(10),
                unresponsive_timeout: Duration::from_millis(500),
                probe_interval: Duration::from_millis(250),
                batch_window: Duration::ZERO,
                max_in_flight: DEFAULT_MAX_IN_FLIGHT,
                legacy_keys: false,
                tls: None,
            })
            .unwrap();
            for key in [
                "user:42", "}x", "a}b{c", "{a}", "a{b}c", "{}", "ü}", "x{", "}", "%7D", "%", "",
            ] {
                let limits = vec![
                    limit("burst", Algorithm::SlidingLog, 1_000_000),
                    limit("daily", Algorithm::FixedWindow, 86_400_000_000),
                ];
                let mut policy = Check::multi(key, limits.clone(), 1);
                policy.policy = Some("api".into());
                for check in [policy, Check::multi(key, limits, 1)] {
                    for l in check.limits.iter() {
                        let whole =
                            fred::util::redis_keyslot(store.limit_key(&check, l).as_bytes());
                        assert_eq!(store.inner.slot_of(&check), whole, "{prefix:?} {key:?}");
                    }
                }
            }
            store.quit().await;
        }
    }

    #[tokio::test]
    async fn escaping_keeps_client_keys_apart() {
        let store = RedisStore::connect(RedisSettings {
            url: "redis://127.0.0.1:1".into(),
            key_prefix: "rk:".into(),
            timeout: Duration::from_millis(10),
            pool_size: 1,
            reconnect_max_delay: Duration::from_millis(10),
            unresponsive_timeout: Duration::from_millis(500),
            probe_interval: Duration::from_millis(250),
            batch_window: Duration::ZERO,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            legacy_keys: false,
            tls: None,
        })
        .unwrap();
        let rule = limit("x", Algorithm::Gcra, 1_000_000).rule;
        let keys: Vec<String> = ["a}b", "a%7Db", "a%257Db", "a%b", "a%25b", "user:42"]
            .iter()
            .map(|k| store.key_for(&Check::single(*k, rule, 1)))
            .collect();
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        // An inline bucket's name ends with its limit and burst (1 and 1).
        assert_eq!(
            keys[5], "rk:{user:42}:gcra:1000:1:1",
            "plain keys are unchanged"
        );
        assert_eq!(keys[0], "rk:{a%7Db}:gcra:1000:1:1");
        let mut scoped = Check::multi(
            "edge",
            vec![limit("login", Algorithm::FixedWindow, 1_000_000)],
            1,
        );
        scoped.policy = Some("rls.edge".into());
        let unscoped = store.limit_key(&scoped, &scoped.limits[0]);
        let mut with_scope = scoped.limits[0].clone();
        with_scope.scope = Some("client=a".into());
        assert_eq!(unscoped, "rk:{edge}:p:rls.edge:login:fw:1000");
        assert_eq!(
            store.limit_key(&scoped, &with_scope),
            "rk:{edge}:p:rls.edge:login:s:client=a:fw:1000",
            "a scope never changes the hash tag"
        );
        store.quit().await;
    }
}
