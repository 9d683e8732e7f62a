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
}
