//! Reservations: what ties a settle to a check that really happened.
//!
//! A check that means to settle asks for one (`reservation_ttl`). Its id
//! is self-describing, so it needs no server secret and any instance
//! sharing the store can settle it: base64url (no padding) of a version
//! byte, a 128-bit random nonce, and the description of the check (the
//! bytes the front end needs to rebuild it: for HTTP, the check's JSON with
//! its cost, the reserved amount). The store keeps one record per
//! reservation under the nonce, beside the check's state (same hash tag),
//! holding a digest of nonce and description; it is written by the check
//! itself, atomically, only when the check is allowed, and lives
//! `reservation_ttl`.
//!
//! A settle sends the nonce, the digest it computes from the id, and
//! `actual`. A record that is missing (never written, expired, evicted) or
//! holds another digest (the description was edited, or the nonce taken
//! from another id) is "unknown" and nothing changes: so a caller can only
//! settle what a real check reserved, on that check's key and limits,
//! with that check's cost. The record then says "settled as `actual`"
//! (keeping its expiry), so the same settle again changes nothing, and a
//! different `actual` is a conflict.
//!
//! The digest is SHA-256, cut to 128 bits: a forger must find a
//! description with the same digest as a live record's, a second
//! preimage.

use sha2::{Digest, Sha256};

/// The first byte of every id: the layout above.
const VERSION: u8 = 1;

/// Bytes of the nonce.
const NONCE_BYTES: usize = 16;

/// A reservation as a store operation carries it: where its record lives
/// (the nonce, 32 hex digits), what the record must hold (the digest, 32
/// hex digits), and, for the check that makes it, how long it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    nonce: String,
    digest: String,
    /// Milliseconds the record lives, from the check; 0 in a settle's.
    pub ttl_ms: u64,
}

/// What an allowed check that asked for a reservation answers: its id and
/// how long it can be settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub id: String,
    pub expires_in_ms: u64,
}

impl Reservation {
    /// A fresh reservation of the check `description`, living `ttl_ms`,
    /// and its id.
    pub fn new(description: &[u8], ttl_ms: u64) -> (Reservation, String) {
        let mut nonce = [0u8; NONCE_BYTES];
        // The OS's generator failing is not something to answer around.
        getrandom::fill(&mut nonce).expect("the operating system's random generator failed");
        let mut raw = Vec::with_capacity(1 + NONCE_BYTES + description.len());
        raw.push(VERSION);
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(description);
        let reservation = Reservation {
            nonce: hex(&nonce),
            digest: digest(&nonce, description),
            ttl_ms,
        };
        (reservation, base64url(&raw))
    }

    /// The reservation an id names, and the description it carries; `None`
    /// when it cannot be an id (then it names nothing, as an unknown one).
    /// Whether the store holds it is the store's to say.
    ///
    /// ```
    /// use ratekeeper::domain::Reservation;
    /// let (made, id) = Reservation::new(br#"{"policy":"api","key":"k","cost":3}"#, 60_000);
    /// let (named, description) = Reservation::parse(&id).unwrap();
    /// assert_eq!(description, br#"{"policy":"api","key":"k","cost":3}"#);
    /// assert_eq!((named.nonce(), named.digest()), (made.nonce(), made.digest()));
    /// assert!(Reservation::parse("not an id").is_none());
    /// ```
    pub fn parse(id: &str) -> Option<(Reservation, Vec<u8>)> {
        let raw = from_base64url(id)?;
        let (&version, rest) = raw.split_first()?;
        if version != VERSION || rest.len() <= NONCE_BYTES {
            return None;
        }
        let (nonce, description) = rest.split_at(NONCE_BYTES);
        let reservation = Reservation {
            nonce: hex(nonce),
            digest: digest(nonce, description),
            ttl_ms: 0,
        };
        Some((reservation, description.to_vec()))
    }

    /// Where the record lives: 32 hex digits.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// What the record of this reservation holds: 32 hex digits.
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

fn digest(nonce: &[u8], description: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(nonce);
    hash.update(description);
    hex(&hash.finalize()[..16])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn base64url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn from_base64url(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.as_bytes().chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let v = ALPHABET.iter().position(|&a| a == c)? as u32;
            n |= v << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    // Only the one encoding of these bytes: no stray low bits.
    (base64url(&out) == text).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips_every_length() {
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(from_base64url(&base64url(&bytes)), Some(bytes));
        }
        assert_eq!(base64url(b"\xfb\xff"), "-_8");
        assert_eq!(from_base64url("-_9"), None, "stray low bits");
        assert_eq!(from_base64url("a+b="), None);
    }

    #[test]
    fn an_edited_description_changes_the_digest() {
        let (made, id) = Reservation::new(br#"{"key":"a","cost":5}"#, 1_000);
        assert_eq!(made.ttl_ms, 1_000);
        let (named, _) = Reservation::parse(&id).unwrap();
        assert_eq!(named.digest(), made.digest());
        let mut raw = from_base64url(&id).unwrap();
        let last = raw.len() - 3;
        raw[last] ^= 1;
        let (edited, _) = Reservation::parse(&base64url(&raw)).unwrap();
        assert_eq!(edited.nonce(), made.nonce());
        assert_ne!(edited.digest(), made.digest());
        let (other, _) = Reservation::new(br#"{"key":"a","cost":5}"#, 1_000);
        assert_ne!(other.nonce(), made.nonce());
    }
}
