//! Reading keys one by one, collecting every problem instead of stopping,
//! and remembering every key asked for: that record is the declaration of
//! the known keys, so "unknown key" needs no list of its own.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use config::{Config, Map, Value, ValueKind};

use super::ConfigError;
use crate::domain::parse_duration_us;

/// Reads keys one by one, collecting problems instead of stopping.
///
/// Every reader asks for each of its keys whatever became of the others
/// (no `?` between two reads): a key it skipped would be taken for unknown.
pub(super) struct Reader<'a> {
    config: &'a Config,
    problems: Vec<String>,
    /// Every key asked for, valid or not.
    asked: BTreeSet<&'static str>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(config: &'a Config) -> Self {
        Reader {
            config,
            problems: Vec::new(),
            asked: BTreeSet::new(),
        }
    }

    /// The keys asked for so far.
    pub(super) fn asked(&self) -> &BTreeSet<&'static str> {
        &self.asked
    }

    /// Records a problem of `key` that no single parse sees (two keys that
    /// disagree, a file named by a key that cannot be read).
    pub(super) fn problem(&mut self, key: &str, message: impl std::fmt::Display) {
        self.problems.push(format!("{key}: {message}"));
    }

    /// `value` if nothing went wrong; otherwise every problem, the keys
    /// the readers did not ask for first.
    pub(super) fn finish<T>(self, value: Option<T>) -> Result<T, ConfigError> {
        let mut found = Vec::new();
        if let Ok(table) = self.config.cache.clone().into_table() {
            flatten("", &table, &mut found);
        }
        let mut problems: Vec<String> = found
            .into_iter()
            .filter(|key| !self.asked.contains(key.as_str()))
            .map(|key| format!("{key}: unknown key"))
            .collect();
        problems.extend(self.problems);
        match value {
            Some(value) if problems.is_empty() => Ok(value),
            _ => Err(ConfigError { problems }),
        }
    }

    /// The problems of the keys asked for, without looking for unknown
    /// ones (for a caller that reads only some of the keys).
    pub(super) fn problems_only(self) -> ConfigError {
        ConfigError {
            problems: self.problems,
        }
    }

    /// The raw text of `key`, recorded as asked for.
    fn raw(&mut self, key: &'static str) -> Result<String, config::ConfigError> {
        self.asked.insert(key);
        self.config.get_string(key)
    }

    pub(super) fn parse<T>(
        &mut self,
        key: &'static str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let result = self
            .raw(key)
            .map_err(|e| format!("cannot be read: {e}"))
            .and_then(|raw| parse(raw.trim()).map_err(|m| format!("{m} (got {raw:?})")));
        result.map_err(|m| self.problem(key, m)).ok()
    }

    /// Like [`parse`](Self::parse), but a problem quotes `shown(raw)`
    /// rather than the raw value (for values that may hold a password).
    pub(super) fn parse_secret<T>(
        &mut self,
        key: &'static str,
        shown: impl Fn(&str) -> String,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let result = self
            .raw(key)
            .map_err(|_| "cannot be read as a string".to_string())
            .and_then(|raw| parse(raw.trim()).map_err(|m| format!("{m} (got {:?})", shown(&raw))));
        result.map_err(|m| self.problem(key, m)).ok()
    }

    /// A list: a TOML array of strings, or (from the environment) one
    /// string of comma-separated items; each item through `parse`.
    pub(super) fn list<T>(
        &mut self,
        key: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<Vec<T>> {
        self.asked.insert(key);
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
        let parsed = items.and_then(|items| items.iter().map(|i| parse(i.trim())).collect());
        parsed.map_err(|m| self.problem(key, m)).ok()
    }

    /// `true` or `false` (a TOML boolean, or the word in a variable).
    pub(super) fn boolean(&mut self, key: &'static str) -> Option<bool> {
        self.parse(key, |s| match s {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("must be true or false".into()),
        })
    }

    /// A duration longer than zero.
    pub(super) fn duration(&mut self, key: &'static str) -> Option<Duration> {
        self.parse(key, |s| match parse_duration_us(s) {
            Ok(0) => Err("must be longer than zero".into()),
            Ok(us) => Ok(Duration::from_micros(us)),
            Err(m) => Err(m),
        })
    }

    /// A whole number from `min` to `max`.
    pub(super) fn int(&mut self, key: &'static str, min: u64, max: u64) -> Option<u64> {
        self.parse(key, |s| int_in(s, min, max))
    }

    /// Like [`int`](Self::int), as a count of things.
    pub(super) fn count(&mut self, key: &'static str, min: usize, max: usize) -> Option<usize> {
        self.int(key, min as u64, max as u64).map(|n| n as usize)
    }

    /// A path; empty means none.
    pub(super) fn path(&mut self, key: &'static str) -> Option<Option<PathBuf>> {
        self.parse(key, |s| Ok((!s.is_empty()).then(|| PathBuf::from(s))))
    }
}

pub(super) fn int_in(s: &str, min: u64, max: u64) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!("must be a whole number from {min} to {max}")),
    }
}

/// Every leaf of `table` as `section.key` (`redis.tls.ca_file`).
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
