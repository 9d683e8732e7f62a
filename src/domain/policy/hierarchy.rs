//! Hierarchies: a policy of the file that names its levels (each another
//! policy of the file and a key template), so that a caller sends the ids
//! (`{"org": "1", "team": "4", "user": "7"}`) and the templates build the
//! level keys (`org:1`, `team:4`, `user:7`). The check itself is a levels
//! check (`domain::level`) of those policies and keys, exactly the one a
//! caller listing them in `levels` would send: the same counters, the same
//! all-or-nothing decision.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::forward::{RequestView, Source, Unreadable};
use super::super::rule::ValidationError;

/// A policy of levels, validated: every level names a plain policy of the
/// same file, so a check resolves each by name in the set it was loaded
/// with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub name: Arc<str>,
    pub description: Option<String>,
    /// In the file's order: the order of a check's `levels`.
    pub levels: Arc<[HierarchyLevel]>,
    /// Every id the templates name, sorted.
    pub ids: Arc<[Arc<str>]>,
    /// Forward-auth: where each id comes from (`ids_from`), by id; `None`
    /// when the file gives none, and forward-auth cannot key the hierarchy.
    pub ids_from: Option<Arc<[IdSource]>>,
    /// `ids_from` as written, for `GET /v1/policies` and messages.
    pub ids_from_text: BTreeMap<String, String>,
    pub deny_status: u16,
    pub missing_key_status: u16,
}

/// One id and where forward-auth takes it from.
pub type IdSource = (Arc<str>, Source);

/// One level of a hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HierarchyLevel {
    /// The `level` label of its metrics and its name in answers; default
    /// the policy's name.
    pub name: Arc<str>,
    /// A plain policy of the same file.
    pub policy: Arc<str>,
    pub key: KeyTemplate,
}

/// The most distinct ids one hierarchy's templates may name.
pub const MAX_IDS: usize = 16;

/// A level's key: literal text and `{id}` placeholders, `org:{org}`.
///
/// Two sets of ids never build one key: a value's `\` and every character
/// of the text between two placeholders are escaped with `\`, so in
/// `team:{org}/{team}` the org `a/b` with the team `c` (`team:a\/b/c`) is
/// not the org `a` with the team `b/c` (`team:a/b\/c`); placeholders side
/// by side, which nothing could tell apart, are refused. Text before the
/// first placeholder or after the last needs no escape, so `org:{org}`
/// puts any value in as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    /// As written.
    pub text: String,
    parts: Vec<Part>,
    /// The characters escaped in values: `\` and those of the text between
    /// placeholders.
    escaped: Vec<char>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Id(Arc<str>),
}

/// An id's name: what a placeholder and an `ids` field are called.
fn valid_id(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl KeyTemplate {
    /// `org:{org}`, `team:{org}/{team}`, or text alone (one key for every
    /// caller: a global budget). `{` and `}` only delimit placeholders.
    pub fn parse(s: &str) -> Result<KeyTemplate, String> {
        if s.is_empty() {
            return Err("a key template cannot be empty".into());
        }
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(open) = rest.find(['{', '}']) {
            if rest[open..].starts_with('}') {
                return Err(format!("{s:?}: a \"}}\" without its \"{{\""));
            }
            let close = rest[open..]
                .find('}')
                .map(|i| open + i)
                .ok_or_else(|| format!("{s:?}: a \"{{\" is not closed"))?;
            let id = &rest[open + 1..close];
            if !valid_id(id) {
                return Err(format!(
                    "{s:?}: {{{id}}} is not an id: ids are 1 to 64 of a-z, 0-9 and _"
                ));
            }
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            parts.push(Part::Id(Arc::from(id)));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        let mut escaped = vec!['\\'];
        for pair in parts.windows(3) {
            if let [Part::Id(_), Part::Text(between), Part::Id(_)] = pair {
                escaped.extend(between.chars());
            }
        }
        if parts
            .windows(2)
            .any(|p| matches!(p, [Part::Id(_), Part::Id(_)]))
        {
            return Err(format!(
                "{s:?}: two placeholders side by side build one key from different ids \
                 (`{{a}}{{b}}` of 1 and 23 is that of 12 and 3); put text between them"
            ));
        }
        escaped.sort_unstable();
        escaped.dedup();
        Ok(KeyTemplate {
            text: s.to_string(),
            parts,
            escaped,
        })
    }

    /// The bytes of its literal text: every key it builds has them.
    pub fn text_bytes(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(text) => text.len(),
                Part::Id(_) => 0,
            })
            .sum()
    }

    /// The ids it names, in order (repeats kept).
    pub fn ids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.parts.iter().filter_map(|p| match p {
            Part::Id(id) => Some(id),
            Part::Text(_) => None,
        })
    }

    /// The key, every placeholder replaced by its id's value (escaped
    /// where two placeholders have text between them).
    fn fill<'a>(&self, value: impl Fn(&str) -> &'a str) -> String {
        let ids = self.ids().count();
        let mut key = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => key.push_str(text),
                Part::Id(id) if ids == 1 => key.push_str(value(id)),
                Part::Id(id) => {
                    for c in value(id).chars() {
                        if self.escaped.contains(&c) {
                            key.push('\\');
                        }
                        key.push(c);
                    }
                }
            }
        }
        key
    }
}

impl Hierarchy {
    /// Each level's key for the `ids` a caller sent: every id the
    /// templates name, and no other; each a value of 1 to `max_bytes`
    /// bytes (a built key is bounded again as any key is).
    pub fn keys(
        &self,
        ids: &BTreeMap<String, String>,
        max_bytes: usize,
    ) -> Result<Vec<String>, ValidationError> {
        if let Some(unknown) = ids.keys().find(|k| !self.ids.iter().any(|i| **i == **k)) {
            return Err(ValidationError::new(
                format!("ids.{}", shown(unknown)),
                format!(
                    "is not an id of {:?} (its ids: {})",
                    &*self.name,
                    self.listed()
                ),
            ));
        }
        for id in self.ids.iter() {
            let Some(value) = ids.get(&**id) else {
                return Err(ValidationError::new(
                    format!("ids.{id}"),
                    format!("missing: {:?} needs {}", &*self.name, self.listed()),
                ));
            };
            if value.is_empty() || value.len() > max_bytes {
                return Err(ValidationError::new(
                    format!("ids.{id}"),
                    format!(
                        "an id is 1 to {max_bytes} bytes (limits.max_key_bytes), got {}",
                        value.len()
                    ),
                ));
            }
        }
        Ok(self
            .levels
            .iter()
            .map(|l| l.key.fill(|id| ids[id].as_str()))
            .collect())
    }

    /// The ids of a proxied request, by `ids_from`: `Ok(Err(id))` names
    /// the first id whose source is absent (or that has none: the
    /// hierarchy has no `ids_from`), and `Err` the header that stops the
    /// walk, as forward-auth's `key_from` does.
    pub fn ids_of(
        &self,
        request: &RequestView,
    ) -> Result<Result<BTreeMap<String, String>, Arc<str>>, Unreadable> {
        let Some(sources) = &self.ids_from else {
            return Ok(self
                .ids
                .first()
                .cloned()
                .map_or_else(|| Ok(BTreeMap::new()), Err));
        };
        let mut ids = BTreeMap::new();
        for (id, source) in sources.iter() {
            match source.value(request)? {
                Some(value) => ids.insert(id.to_string(), value),
                None => return Ok(Err(id.clone())),
            };
        }
        Ok(Ok(ids))
    }

    /// `org, team, user`.
    fn listed(&self) -> String {
        let names: Vec<&str> = self.ids.iter().map(|i| &**i).collect();
        names.join(", ")
    }
}

/// A client's id name in a message: its first 64 characters.
fn shown(name: &str) -> String {
    name.chars().take(64).collect()
}

#[cfg(test)]
#[path = "hierarchy_tests.rs"]
mod tests;
