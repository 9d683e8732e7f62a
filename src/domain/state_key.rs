//! Where one limit's state lives: one layout for both stores. The embedded
//! store hashes a [`StateKey`] as it is; the Redis store writes it out as a
//! key name ([`StateKey::write`]):
//! - inline checks: `<prefix>{<client key>}:<algorithm tag>:<window>`, the
//!   window in milliseconds or, for calendar periods, `cal.<unit>.<zone>`
//!   (`cal.day.Europe/Berlin`; zone names hold no `:`); a concurrency
//!   limit's is always `0` (`:cc:0`), its lease TTL left out; an inline
//!   bucket's (`token_bucket`, `gcra`) ends with its rule,
//!   `:<limit>:<burst>` (see below);
//! - a policy's limits: `<prefix>{<client key>}:p:<policy>:<limit>:<algorithm tag>:<window>`;
//! - a limit with a scope of its own (Envoy RLS descriptors):
//!   `<prefix>{<client key>}:p:<policy>:<limit>:s:<scope>:<algorithm tag>:<window>`
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
//! An inline bucket's name holds its `limit` and `burst` too. A bucket's
//! state is units used as of an instant, which a rule refilling faster
//! credits more than a slower one would, so two inline rules sharing one
//! bucket could each undo the other's denials: the deny cache could not
//! answer for either (`limiter::deny_cache`), and a flood on an inline
//! `gcra` key reached Redis on every check. Inline, another `limit` is
//! another rule (the caller names its rule on every check), so it gets a
//! bucket of its own; a policy's limit keeps its name, and its state, when
//! its `limit` changes. Versions before this one kept inline buckets under
//! `…:<tag>:<window>`; `redis.legacy_keys` reads and writes that name too,
//! for a rolling upgrade (`store::redis::wire`, docs/operations.md).
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

use super::{Algorithm, Check, Limit, Window};

/// One limit's state's address: the client key, the policy and limit names
/// (a policy's limits; `None` inline), the limit's own scope (Envoy RLS
/// descriptors), the algorithm and the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateKey<'a> {
    pub client: &'a str,
    pub named: Option<(&'a str, &'a str)>,
    pub scope: Option<&'a str>,
    pub algorithm: Algorithm,
    pub window: Window,
    /// An inline bucket's `limit` and `burst` (see the module doc).
    pub rule: Option<(u64, u64)>,
}

impl<'a> StateKey<'a> {
    pub fn of(check: &'a Check, limit: &'a Limit) -> StateKey<'a> {
        let (client, policy) = StateKey::owner(check, limit);
        StateKey {
            client,
            named: policy.map(|p| (p, &*limit.name)),
            scope: limit.scope.as_deref(),
            algorithm: limit.rule.algorithm,
            window: StateKey::window_of(limit),
            rule: StateKey::rule_of(check, limit),
        }
    }

    /// The client key and policy `limit`'s state lives under: its level's
    /// in a levels check (`domain::level`), else the check's.
    pub fn owner(check: &'a Check, limit: &'a Limit) -> (&'a str, Option<&'a str>) {
        match &limit.level {
            Some(level) => (&level.key, level.policy.as_deref()),
            None => (&check.key, check.policy.as_deref()),
        }
    }

    /// The rule part of `limit`'s address: an inline bucket's `limit` and
    /// `burst`, nothing for the others.
    pub fn rule_of(check: &Check, limit: &Limit) -> Option<(u64, u64)> {
        (StateKey::owner(check, limit).1.is_none() && limit.rule.algorithm.has_burst())
            .then_some((limit.rule.limit, limit.rule.burst))
    }

    /// The name versions before the rule part used: this address without it.
    pub fn legacy(&self) -> Option<StateKey<'a>> {
        self.rule.map(|_| StateKey {
            rule: None,
            ..*self
        })
    }

    /// The window part of `limit`'s address: its window, except that a
    /// concurrency limit's window is its leases' TTL, which must not part
    /// its state (leases taken before a change of `lease_ttl` still count,
    /// and can still be released): always 0 there.
    pub fn window_of(limit: &Limit) -> Window {
        match limit.rule.algorithm {
            Algorithm::Concurrency => Window::Length(0),
            _ => limit.rule.window,
        }
    }

    /// The Redis key name, after `prefix`.
    pub fn write(&self, prefix: &str) -> String {
        let named = self.named.map_or(0, |(p, l)| p.len() + l.len() + 4);
        let scope = self.scope.map_or(0, |s| s.len() + 3);
        let mut key = String::with_capacity(prefix.len() + self.client.len() + named + scope + 24);
        key.push_str(prefix);
        key.push('{');
        key.push_str(&hash_tag(self.client));
        key.push_str("}:");
        if let Some((policy, limit)) = self.named {
            key.push_str("p:");
            key.push_str(policy);
            key.push(':');
            key.push_str(limit);
            key.push(':');
        }
        if let Some(scope) = self.scope {
            key.push_str("s:");
            key.push_str(scope);
            key.push(':');
        }
        key.push_str(self.algorithm.key_tag());
        // Writing to a String cannot fail.
        let _ = match self.window {
            Window::Length(us) => write!(key, ":{}", us / 1_000),
            Window::Calendar(c) => write!(key, ":cal.{}.{}", c.unit, c.zone.name()),
        };
        if let Some((limit, burst)) = self.rule {
            let _ = write!(key, ":{limit}:{burst}");
        }
        key
    }
}

/// The client key as written in the hash tag (see the module doc): the
/// part of every key name Redis Cluster hashes.
pub fn hash_tag(client: &str) -> Cow<'_, str> {
    if client.is_empty() {
        // Validation refuses empty keys; should one get here, it still
        // needs a tag. No escaped key is a lone `%`.
        return Cow::Borrowed("%");
    }
    if !client.contains(['%', '}']) {
        return Cow::Borrowed(client);
    }
    let mut escaped = String::with_capacity(client.len() + 8);
    for c in client.chars() {
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
    use super::*;

    fn key(named: Option<(&str, &str)>, scope: Option<&str>, client: &str) -> String {
        let key = StateKey {
            client,
            named,
            scope,
            algorithm: Algorithm::Gcra,
            window: Window::Length(60_000_000),
            rule: None,
        };
        key.write("rk:")
    }

    #[test]
    fn a_calendar_window_is_written_with_its_unit_and_zone() {
        let calendar = crate::domain::Calendar {
            unit: crate::domain::CalendarUnit::Month,
            zone: crate::domain::Zone::named("america/new_york").unwrap(),
        };
        let key = StateKey {
            client: "k",
            named: Some(("api", "monthly")),
            scope: None,
            algorithm: Algorithm::FixedWindow,
            window: Window::Calendar(calendar),
            rule: None,
        };
        assert_eq!(
            key.write("rk:"),
            "rk:{k}:p:api:monthly:fw:cal.month.America/New_York"
        );
    }

    #[test]
    fn the_three_forms_are_written_as_documented() {
        assert_eq!(key(None, None, "user:42"), "rk:{user:42}:gcra:60000");
        assert_eq!(
            key(Some(("api", "burst")), None, "k"),
            "rk:{k}:p:api:burst:gcra:60000"
        );
        assert_eq!(
            key(Some(("rls.edge", "global")), Some("client=a"), "edge"),
            "rk:{edge}:p:rls.edge:global:s:client=a:gcra:60000"
        );
        assert_eq!(key(None, None, "}50%"), "rk:{%7D50%25}:gcra:60000");
    }

    fn check(policy: Option<&str>, algorithm: Algorithm, limit: u64, burst: u64) -> Check {
        let rule = crate::domain::Rule::with_length(algorithm, limit, 60_000_000, burst);
        Check {
            policy: policy.map(Into::into),
            ..Check::single("user:42", rule, 1)
        }
    }

    #[test]
    fn an_inline_bucket_is_written_with_its_rule_and_a_policy_limit_without() {
        let inline = check(None, Algorithm::TokenBucket, 100, 20);
        let key = StateKey::of(&inline, &inline.limits[0]);
        assert_eq!(key.write("rk:"), "rk:{user:42}:tb:60000:100:20");
        assert_eq!(
            key.legacy().map(|k| k.write("rk:")).as_deref(),
            Some("rk:{user:42}:tb:60000")
        );
        // Another limit inline is another bucket; a window algorithm's
        // counters stay shared by every limit, as a policy limit's do.
        let other = check(None, Algorithm::TokenBucket, 10, 20);
        assert_ne!(key, StateKey::of(&other, &other.limits[0]));
        let window = check(None, Algorithm::SlidingWindow, 100, 100);
        let key = StateKey::of(&window, &window.limits[0]);
        assert_eq!(key.write("rk:"), "rk:{user:42}:sw:60000");
        assert_eq!(key.legacy(), None);
        let policy = check(Some("api"), Algorithm::Gcra, 100, 20);
        let key = StateKey::of(&policy, &policy.limits[0]);
        assert_eq!(key.rule, None);
    }
}
