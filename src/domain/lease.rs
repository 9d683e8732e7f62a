//! Lease ids: what a concurrency limit's acquire hands out and a release
//! or renewal names. 128 random bits from the operating system as 32 hex
//! digits, so nobody can guess (and release) another client's lease.

use std::fmt;

/// A lease's id: 32 lowercase hex digits when generated here; a release
/// may name any text (an unknown one changes nothing).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseId(String);

impl LeaseId {
    /// A fresh id of 128 random bits.
    ///
    /// ```
    /// use ratekeeper::domain::LeaseId;
    /// let (a, b) = (LeaseId::generate(), LeaseId::generate());
    /// assert_eq!(a.as_str().len(), 32);
    /// assert_ne!(a, b);
    /// ```
    pub fn generate() -> LeaseId {
        let mut bytes = [0u8; 16];
        // The OS's generator failing is not something to answer around.
        getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
        LeaseId(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// An id as a client sent it back, if it has the form of one (32
    /// lowercase hex digits): anything else was never handed out, and is
    /// answered as a mistake rather than as a lease that is gone.
    ///
    /// ```
    /// use ratekeeper::domain::LeaseId;
    /// let id = LeaseId::generate();
    /// assert_eq!(LeaseId::parse(id.as_str()), Some(id));
    /// assert_eq!(LeaseId::parse("{\"id\": \"...\"}"), None);
    /// ```
    pub fn parse(text: &str) -> Option<LeaseId> {
        let well_formed =
            text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        well_formed.then(|| LeaseId(text.to_owned()))
    }

    /// Any text as an id, unchecked: for tests and tools.
    pub fn from_text(text: impl Into<String>) -> LeaseId {
        LeaseId(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A lease an allowed check took, as answered: its id, and how long it
/// lives unless released or renewed (the concurrency limit's `lease_ttl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: LeaseId,
    pub expires_in_ms: u64,
}
