//! Which sink method each message of the invalidation channel reaches.

use std::sync::Mutex;

use super::{CHECK_PREFIX, FREED_PREFIX, MAX_MESSAGE_BYTES, deliver};
use crate::store::InvalidationSink;

/// What the sink was told, in order.
#[derive(Default)]
struct Told(Mutex<Vec<String>>);

impl Told {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn push(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
}

impl InvalidationSink for Told {
    fn invalidated(&self, key: &str) {
        self.push(format!("invalidated {key}"));
    }

    fn freed(&self, key: &str) {
        self.push(format!("freed {key}"));
    }

    fn invalidated_all(&self) {
        self.push("all".into());
    }

    fn subscribed(&self, _up: bool) {}
}

/// Only `invalidated`: what the deny cache implements.
#[derive(Default)]
struct Plain(Told);

impl InvalidationSink for Plain {
    fn invalidated(&self, key: &str) {
        self.0.invalidated(key);
    }

    fn invalidated_all(&self) {
        self.0.invalidated_all();
    }

    fn subscribed(&self, _up: bool) {}
}

fn told(sink: &Told, message: &[u8]) -> Vec<String> {
    deliver(sink, Some(message));
    sink.take()
}

#[test]
fn a_give_back_is_freed_and_anything_else_invalidated() {
    let sink = Told::default();
    let freed = format!("{FREED_PREFIX}client-1");
    assert_eq!(told(&sink, freed.as_bytes()), ["freed client-1"]);
    assert_eq!(told(&sink, b"client-1"), ["invalidated client-1"]);
    let check = format!("{CHECK_PREFIX}abc:1");
    assert!(told(&sink, check.as_bytes()).is_empty());
    assert_eq!(told(&sink, b"\xff\xfe"), ["all"]);
    deliver(&sink, None);
    assert_eq!(sink.take(), ["all"]);
}

/// The bound on a key's length applies to the key after the prefix, so
/// the longest key a check allows is freed, not taken for noise.
#[test]
fn the_bound_applies_to_the_key_after_the_prefix() {
    let sink = Told::default();
    let longest = "k".repeat(MAX_MESSAGE_BYTES);
    let freed = format!("{FREED_PREFIX}{longest}");
    assert_eq!(told(&sink, freed.as_bytes()), [format!("freed {longest}")]);
    let longer = format!("{freed}k");
    assert_eq!(told(&sink, longer.as_bytes()), ["all"]);
    assert_eq!(told(&sink, format!("{longest}k").as_bytes()), ["all"]);
}

#[test]
fn a_sink_without_freed_is_invalidated() {
    let sink = Plain::default();
    deliver(&sink, Some(format!("{FREED_PREFIX}client-1").as_bytes()));
    assert_eq!(sink.0.take(), ["invalidated client-1"]);
}
