//! The policies file's shape as serde reads it, with the span of every
//! value so a problem can name its line and column. Unknown keys anywhere
//! are errors: a typo must not silently drop a limit.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;

use crate::domain::WindowInput;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) policies: BTreeMap<Spanned<String>, Spanned<RawPolicy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    pub(super) description: Option<String>,
    pub(super) failure_mode: Option<Spanned<String>>,
    pub(super) shadow: Option<bool>,
    pub(super) limits: Option<Spanned<Vec<Spanned<RawLimit>>>>,
    #[serde(default)]
    pub(super) overrides: BTreeMap<Spanned<String>, Spanned<RawOverride>>,
    /// Forward-auth: where the key comes from, and the statuses answered.
    pub(super) key_from: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) deny_status: Option<Spanned<i64>>,
    pub(super) missing_key_status: Option<Spanned<i64>>,
    /// Hot-key leasing (`domain::lease_mode`).
    pub(super) lease: Option<Spanned<RawLease>>,
    /// A hierarchy (`hierarchy.rs`): its levels in place of limits, and
    /// forward-auth's source of each id.
    pub(super) levels: Option<Spanned<Vec<Spanned<RawLevel>>>>,
    pub(super) ids_from: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLevel {
    pub(super) name: Option<Spanned<String>>,
    pub(super) policy: Spanned<String>,
    pub(super) key: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLease {
    pub(super) max_units: Spanned<i64>,
    pub(super) ttl: Option<Spanned<RawWindow>>,
    pub(super) hot_rate: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOverride {
    pub(super) limits: Option<Spanned<Vec<Spanned<RawLimit>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) name: Spanned<String>,
    pub(super) algorithm: Option<Spanned<String>>,
    pub(super) limit: Spanned<i64>,
    /// Exactly one of `window` and `calendar` (Rule::new says which is
    /// missing or that both are there).
    pub(super) window: Option<Spanned<RawWindow>>,
    pub(super) calendar: Option<Spanned<String>>,
    pub(super) timezone: Option<Spanned<String>>,
    /// A concurrency limit's lease TTL, in place of a window.
    pub(super) lease_ttl: Option<Spanned<RawWindow>>,
    pub(super) burst: Option<Spanned<i64>>,
}

/// A window as the API takes it: a duration string or whole seconds.
pub(super) struct RawWindow(pub(super) WindowInput);

impl<'de> Deserialize<'de> for RawWindow {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WindowVisitor;
        impl Visitor<'_> for WindowVisitor {
            type Value = RawWindow;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a duration such as \"250ms\", \"10s\", \"1m\", \"1h\", \"1d\", or a positive integer number of seconds",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawWindow, E> {
                u64::try_from(v)
                    .map(|v| RawWindow(WindowInput::Seconds(v)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawWindow, E> {
                Ok(RawWindow(WindowInput::Seconds(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawWindow, E> {
                Ok(RawWindow(WindowInput::Text(v.to_owned())))
            }
        }
        deserializer.deserialize_any(WindowVisitor)
    }
}
