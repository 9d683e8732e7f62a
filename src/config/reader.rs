//! Reading keys one by one, collecting every problem instead of stopping.

use std::collections::BTreeSet;
use std::time::Duration;

use config::{Config, Map, Value, ValueKind};

use super::KNOWN_KEYS;
use crate::domain::parse_duration_us;

/// Reads keys one by one, collecting problems instead of stopping.
pub(super) struct Reader<'a> {
    pub(super) config: &'a Config,
    pub(super) problems: Vec<String>,
}

impl Reader<'_> {
    pub(super) fn parse<T>(
        &mut self,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let result = self
            .config
            .get_string(key)
            .map_err(|e| format!("cannot be read: {e}"))
            .and_then(|raw| parse(raw.trim()).map_err(|m| format!("{m} (got {raw:?})")));
        result
            .map_err(|m| self.problems.push(format!("{key}: {m}")))
            .ok()
    }

    /// Like [`parse`](Self::parse), but a problem quotes `shown(raw)`
    /// rather than the raw value (for values that may hold a password).
    pub(super) fn parse_secret<T>(
        &mut self,
        key: &str,
        shown: impl Fn(&str) -> String,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let result = self
            .config
            .get_string(key)
            .map_err(|_| "cannot be read as a string".to_string())
            .and_then(|raw| parse(raw.trim()).map_err(|m| format!("{m} (got {:?})", shown(&raw))));
        result
            .map_err(|m| self.problems.push(format!("{key}: {m}")))
            .ok()
    }

    /// A list: a TOML array of strings, or (from the environment) one
    /// string of comma-separated items; each item through `parse`.
    pub(super) fn list<T>(
        &mut self,
        key: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<Vec<T>> {
        let items: Result<Vec<String>, String> = match self.config.get_array(key) {
            Ok(values) => values
                .into_iter()
                .map(|v| v.into_string().map_err(|e| format!("cannot be read: {e}")))
                .collect(),
            Err(_) => self
                .config
                .get_string(key)
                .map(|s| {
                    s.split(',')
                        .map(|i| i.trim().to_string())
                        .filter(|i| !i.is_empty())
                        .collect()
                })
                .map_err(|e| format!("cannot be read: {e}")),
        };
        let parsed = items.and_then(|items| {
            items
                .iter()
                .map(|i| parse(i.trim()))
                .collect::<Result<Vec<T>, String>>()
        });
        parsed
            .map_err(|m| self.problems.push(format!("{key}: {m}")))
            .ok()
    }

    /// `true` or `false` (a TOML boolean, or the word in a variable).
    pub(super) fn boolean(&mut self, key: &str) -> Option<bool> {
        self.parse(key, |s| match s {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("must be true or false".into()),
        })
    }

    pub(super) fn duration(&mut self, key: &str) -> Option<Duration> {
        self.parse(key, |s| match parse_duration_us(s) {
            Ok(0) => Err("must be longer than zero".into()),
            Ok(us) => Ok(Duration::from_micros(us)),
            Err(m) => Err(m),
        })
    }

    pub(super) fn unknown_keys(&mut self) {
        let known: BTreeSet<&str> = KNOWN_KEYS.iter().copied().collect();
        let mut found = Vec::new();
        if let Ok(table) = self.config.cache.clone().into_table() {
            flatten("", &table, &mut found);
        }
        for key in found {
            if !known.contains(key.as_str()) {
                self.problems.push(format!("{key}: unknown key"));
            }
        }
    }
}

pub(super) fn flatten(prefix: &str, table: &Map<String, Value>, out: &mut Vec<String>) {
    for (name, value) in table {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match &value.kind {
            ValueKind::Table(inner) => flatten(&path, inner, out),
            _ => out.push(path),
        }
    }
}
