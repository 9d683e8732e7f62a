//! Which of the top-level fields that matter before parsing a body has:
//! those that pick its form, and those a handler refuses (`cost` in a
//! settle). One pass over the JSON that allocates nothing: each key is
//! compared where it lies (serde_json hands an unescaped key over as a
//! borrowed or scratch `str`) and each value is skipped. It replaced a
//! `HashMap<String, IgnoredAny>`, whose keys and hashing were about a
//! tenth of an embedded check's instructions (callgrind).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

/// The fields only the single-rule form (and an inline form's limits) have.
pub(super) const RULE_FIELDS: [&str; 7] = [
    "limit",
    "window",
    "calendar",
    "timezone",
    "lease_ttl",
    "algorithm",
    "burst",
];

/// The names [`Present`] records, in bit order: the two lead fields, every
/// one of [`RULE_FIELDS`] (one list, so a new rule field is recorded too),
/// and those a handler may refuse or needs (`reservation_ttl`, a settle's
/// `reservation`).
const NAMES: [&str; 9 + RULE_FIELDS.len()] = {
    let mut names = [""; 9 + RULE_FIELDS.len()];
    names[0] = "policy";
    names[1] = "limits";
    let mut i = 0;
    while i < RULE_FIELDS.len() {
        names[2 + i] = RULE_FIELDS[i];
        i += 1;
    }
    names[2 + RULE_FIELDS.len()] = "cost";
    names[3 + RULE_FIELDS.len()] = "wait_ms";
    names[4 + RULE_FIELDS.len()] = "reservation_ttl";
    names[5 + RULE_FIELDS.len()] = "reservation";
    names[6 + RULE_FIELDS.len()] = "levels";
    names[7 + RULE_FIELDS.len()] = "key";
    names[8 + RULE_FIELDS.len()] = "ids";
    names
};

// One bit per name in `Present`'s u16.
const _: () = assert!(NAMES.len() <= 16);

/// The fields of [`NAMES`] a JSON object has. A field counts when present,
/// even as `null`, and a field given twice counts once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Present(u16);

impl Present {
    /// The fields `json` has, or `None` when it is not one JSON object
    /// (malformed, another type, trailing bytes).
    pub fn of(json: &[u8]) -> Option<Present> {
        let mut deserializer = serde_json::Deserializer::from_slice(json);
        let present = Present::deserialize(&mut deserializer).ok()?;
        deserializer.end().ok()?;
        Some(present)
    }

    /// Whether the object has `name`, which must be one of [`NAMES`].
    pub fn has(self, name: &str) -> bool {
        let bit = NAMES.iter().position(|n| *n == name);
        debug_assert!(bit.is_some(), "{name} is not recorded");
        bit.is_some_and(|i| self.0 & (1 << i) != 0)
    }
}

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Present, D::Error> {
        deserializer.deserialize_map(PresentVisitor)
    }
}

struct PresentVisitor;

impl<'de> Visitor<'de> for PresentVisitor {
    type Value = Present;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Present, A::Error> {
        let mut bits = 0u16;
        while let Some(Name(bit)) = map.next_key()? {
            map.next_value::<IgnoredAny>()?;
            if let Some(i) = bit {
                bits |= 1 << i;
            }
        }
        Ok(Present(bits))
    }
}

/// A key as its position in [`NAMES`], if it is one of them.
struct Name(Option<usize>);

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Name, D::Error> {
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Name, E> {
                Ok(Name(NAMES.iter().position(|n| *n == key)))
            }
        }
        deserializer.deserialize_identifier(NameVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::Present;

    #[test]
    fn records_the_names_present_even_as_null_and_escaped() {
        let p =
            Present::of(br#"{"policy": null, "k\u0065y": 1, "c\u006fst": 2, "x": {"limits": 1}}"#)
                .unwrap();
        assert!(p.has("policy") && p.has("cost"));
        assert!(!p.has("limits"), "only top-level fields count");
        assert!(!p.has("wait_ms"));
        let twice = Present::of(br#"{"limits": [], "limits": 1}"#).unwrap();
        assert!(twice.has("limits"));
    }

    #[test]
    fn anything_but_one_object_is_none() {
        for json in [&b"[]"[..], b"1", b"null", b"{", b"{} {}", b"{\"a\": }", b""] {
            assert_eq!(Present::of(json), None, "{}", String::from_utf8_lossy(json));
        }
        assert_eq!(Present::of(b" {} "), Some(Present::default()));
    }
}
