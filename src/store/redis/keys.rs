//! Key layout:
//! - inline checks: `<prefix>{<client key>}:<algorithm tag>:<window ms>`;
//! - a policy's limits: `<prefix>{<client key>}:p:<policy>:<limit>:<algorithm tag>:<window ms>`;
//! - a limit with a scope of its own (Envoy RLS descriptors):
//!   `<prefix>{<client key>}:p:<policy>:<limit>:s:<scope>:<algorithm tag>:<window ms>`
//!   (`s` is no algorithm tag, so the forms stay apart).
//!
//! The client key sits inside a hash tag so every limit of a check lives in
//! one cluster slot (one script call can apply them all). Algorithm and
//! window are part of the name, so another rule never shares state and a
//! policy whose limit changes algorithm or window starts afresh, while a
//! changed `limit` or `burst` keeps its counters. Policy and limit names
//! hold no `:`, `{` or `}`, so what follows the tag's `}` tells the two
//! forms and every policy apart.
//!
//! In the tag, `%` is written `%25` and `}` is written `%7D` (and nothing
//! else changes). A raw `}` would end the tag early, and a key starting
//! with one would leave the tag empty, so that Redis hashes each limit's
//! whole key name: the limits of one check would land in different cluster
//! slots and the script would fail with CROSSSLOT. Escaped, the tag is never
//! empty and is the same for every limit of a check; escaping `%` too keeps
//! two different client keys from ever sharing a key name.

use std::borrow::Cow;
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
            .map_or(0, |p| p.len() + limit.name.len() + 4)
            + limit.scope.as_ref().map_or(0, |s| s.len() + 3);
        let mut key = String::with_capacity(prefix.len() + check.key.len() + scope_len + 24);
        key.push_str(prefix);
        key.push('{');
        key.push_str(&escape(&check.key));
        key.push_str("}:");
        if let Some(policy) = &check.policy {
            key.push_str("p:");
            key.push_str(policy);
            key.push(':');
            key.push_str(&limit.name);
            key.push(':');
        }
        if let Some(scope) = &limit.scope {
            key.push_str("s:");
            key.push_str(scope);
            key.push(':');
        }
        key.push_str(tag);
        // Writing to a String cannot fail.
        let _ = write!(key, ":{window_ms}");
        key
    }

    /// The cluster slot of `check`'s keys (every limit's is the same),
    /// without building a key: Redis hashes only the tag, the escaped client
    /// key. Builds a key only when the prefix holds braces of its own.
    pub(super) fn slot_of(&self, check: &Check) -> u16 {
        if self.options.key_prefix.contains(['{', '}']) {
            return fred::util::redis_keyslot(self.key_for(check, &check.limits[0]).as_bytes());
        }
        fred::util::redis_keyslot(escape(&check.key).as_bytes())
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

/// The client key as written in the hash tag (see the module doc).
fn escape(key: &str) -> Cow<'_, str> {
    if key.is_empty() {
        // Validation refuses empty keys; should one get here, it still
        // needs a tag. No escaped key is a lone `%`.
        return Cow::Borrowed("%");
    }
    if !key.contains(['%', '}']) {
        return Cow::Borrowed(key);
    }
    let mut escaped = String::with_capacity(key.len() + 8);
    for c in key.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            '}' => escaped.push_str("%7D"),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{RedisOptions, RedisStore};
    use crate::domain::{Algorithm, Check, Limit, Rule};

    fn limit(name: &str, algorithm: Algorithm, window_us: u64) -> Limit {
        Limit {
            name: name.into(),
            rule: Rule {
                algorithm,
                limit: 1,
                window_us,
                burst: 1,
            },
            scope: None,
        }
    }

    /// `slot_of` skips building the keys; it must agree with hashing each
    /// limit's whole key name, whatever the client key and the prefix hold
    /// (a key starting with `}` once left the tag empty, sending the limits
    /// of one check to different slots: CROSSSLOT on a cluster).
    #[tokio::test]
    async fn every_limit_of_a_check_hashes_to_slot_of() {
        for prefix in ["rk:", "", "a{b}:", "x{", "a}b{"] {
            let store = RedisStore::connect(RedisOptions {
                url: "redis://127.0.0.1:1".into(),
                key_prefix: prefix.into(),
                timeout: Duration::from_millis(10),
                pool_size: 1,
                reconnect_max_delay: Duration::from_millis(10),
                unresponsive_timeout: Duration::from_millis(500),
                batch_window: Duration::ZERO,
                clock: None,
                ttl_pad_ms: 0,
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
        let store = RedisStore::connect(RedisOptions {
            url: "redis://127.0.0.1:1".into(),
            key_prefix: "rk:".into(),
            timeout: Duration::from_millis(10),
            pool_size: 1,
            reconnect_max_delay: Duration::from_millis(10),
            unresponsive_timeout: Duration::from_millis(500),
            batch_window: Duration::ZERO,
            clock: None,
            ttl_pad_ms: 0,
        })
        .unwrap();
        let rule = limit("x", Algorithm::Gcra, 1_000_000).rule;
        let keys: Vec<String> = ["a}b", "a%7Db", "a%257Db", "a%b", "a%25b", "user:42"]
            .iter()
            .map(|k| store.key_for(&Check::single(*k, rule, 1)))
            .collect();
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        assert_eq!(
            keys[5], "rk:{user:42}:gcra:1000",
            "plain keys are unchanged"
        );
        assert_eq!(keys[0], "rk:{a%7Db}:gcra:1000");
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
