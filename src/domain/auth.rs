//! Bearer tokens: the tokens file's format, and deciding what a presented
//! token may do, whichever transport it came by ([`presented`], [`TokenSet::authorize`]: the
//! HTTP `Authorization` header and the gRPC `authorization` metadata are
//! taken apart by the same code). Pure: the file is read, watched and
//! swapped at the edge (`crate::tokens`).
//!
//! A token is never kept in clear: each is held as its SHA-256 digest, and
//! a presented token is hashed and compared with every digest in constant
//! time, without stopping at a match. So neither the time taken nor its
//! variation with the token's length tells an attacker how close a guess
//! came, and a core dump or a `Debug` print holds no usable token.

mod credentials;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

pub use credentials::{Malformed, Presented, Refusal, presented};

/// The shortest token accepted, in bytes. 16 random bytes (128 bits, or
/// 22 characters of base64) cannot be guessed over the network; anything
/// shorter is more likely a placeholder or a password than a secret made
/// for this, so the file is refused rather than warned about.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The longest token accepted: a header of this size is already unusual.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// What a token may call. `Admin` includes everything `Check` may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `POST /v1/check`, forward-auth (`/v1/auth/...`), the gRPC
    /// `ShouldRateLimit`, and `/metrics` when `auth.protect_metrics` is on.
    Check,
    /// Also reset, refund and `GET /v1/policies`.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 2] = [Scope::Check, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Check => "check",
            Scope::Admin => "admin",
        }
    }

    /// Whether a token of this scope may call what `required` guards.
    pub fn covers(self, required: Scope) -> bool {
        self >= required
    }
}

/// A problem in a tokens file. Messages name the line, never the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenFileError {
    #[error(
        "line {line}: expected `<scope> <token>` or `<scope> <name> <token>` (scope check or admin)"
    )]
    Shape { line: usize },
    /// A token's name is shown in the audit trail and the logs.
    #[error(
        "line {line}: a token's name is 1 to 15 of A-Z a-z 0-9 _ . -, or an e-mail address \
         of up to 64 (never as long as a token, so a token in the name's place is refused \
         rather than shown in the audit trail)"
    )]
    Name { line: usize },
    #[error("line {line}: unknown scope (expected check or admin)")]
    UnknownScope { line: usize },
    #[error(
        "line {line}: the token is {len} bytes; tokens must be {MIN_TOKEN_BYTES} to \
         {MAX_TOKEN_BYTES} bytes (make one with `openssl rand -hex 32`)"
    )]
    Length { line: usize, len: usize },
    #[error(
        "line {line}: the token has a character outside A-Z a-z 0-9 - . _ ~ + / \
         (and trailing =), the characters of RFC 6750's b64token"
    )]
    Charset { line: usize },
    /// A `<...>` placeholder, as in the shipped `config/tokens.example`.
    #[error(
        "line {line}: a placeholder, not a token: put one made with \
         `openssl rand -hex 32` in its place"
    )]
    Placeholder { line: usize },
    #[error("line {line}: the same token as line {first}")]
    Duplicate { line: usize, first: usize },
    #[error("no tokens (a tokens file must hold at least one `<scope> <token>` line)")]
    Empty,
}

/// One configured token: its digest and scope.
#[derive(Clone)]
struct Entry {
    digest: [u8; 32],
    scope: Scope,
    /// `admin alice <token>`: who the audit trail says made a change.
    name: Option<std::sync::Arc<str>>,
}

/// A token's name as the audit trail shows it: nothing a log line or a
/// JSON string must escape, and shorter than a token (or an e-mail
/// address, which no token is: `@` is outside b64token), so that a line
/// with the token and something after it (`admin <token> note`) is refused
/// instead of showing the token as a name.
fn is_token_name(name: &str) -> bool {
    let chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.@-".contains(&b));
    let short = name.len() < MIN_TOKEN_BYTES;
    let email = name.contains('@') && name.len() <= 64;
    !name.is_empty() && chars && (short || email)
}

/// The tokens in force.
#[derive(Clone, Default)]
pub struct TokenSet {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Counts only: even digests have no business in a log.
        f.debug_struct("TokenSet")
            .field("check", &self.count(Scope::Check))
            .field("admin", &self.count(Scope::Admin))
            .finish()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// RFC 6750's `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" /
/// "+" / "/" ) *"="`. Anything else could not be sent in the header as is.
pub fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

impl TokenSet {
    /// Parses a tokens file: one `<scope> <token>` or `<scope> <name>
    /// <token>` per line, separated by spaces or tabs; blank lines and
    /// lines starting with `#` are skipped.
    /// Every problem is reported by line number only.
    pub fn parse(text: &str) -> Result<TokenSet, TokenFileError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut lines_of: Vec<usize> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.trim();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let mut fields = content.split_ascii_whitespace();
            let (scope, name, token) = match (fields.next(), fields.next(), fields.next()) {
                (_, _, Some(_)) if fields.next().is_some() => {
                    return Err(TokenFileError::Shape { line });
                }
                (Some(scope), Some(name), Some(token)) => (scope, Some(name), token),
                (Some(scope), Some(token), None) => (scope, None, token),
                _ => return Err(TokenFileError::Shape { line }),
            };
            if name.is_some_and(|n| !is_token_name(n)) {
                return Err(TokenFileError::Name { line });
            }
            let scope = match scope {
                "check" => Scope::Check,
                "admin" => Scope::Admin,
                _ => return Err(TokenFileError::UnknownScope { line }),
            };
            // The example's placeholders: refused by name rather than as a
            // bad character, so that a copied example says what to do.
            if token.starts_with('<') && token.ends_with('>') {
                return Err(TokenFileError::Placeholder { line });
            }
            if !(MIN_TOKEN_BYTES..=MAX_TOKEN_BYTES).contains(&token.len()) {
                let len = token.len();
                return Err(TokenFileError::Length { line, len });
            }
            if !is_b64token(token) {
                return Err(TokenFileError::Charset { line });
            }
            let digest = digest(token.as_bytes());
            // Loading is not the hot path: a plain comparison is fine here.
            if let Some(i) = entries.iter().position(|e| e.digest == digest) {
                let first = lines_of[i];
                return Err(TokenFileError::Duplicate { line, first });
            }
            let name = name.map(std::sync::Arc::from);
            entries.push(Entry {
                digest,
                scope,
                name,
            });
            lines_of.push(line);
        }
        if entries.is_empty() {
            return Err(TokenFileError::Empty);
        }
        Ok(TokenSet { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Tokens of exactly this scope.
    pub fn count(&self, scope: Scope) -> usize {
        self.entries.iter().filter(|e| e.scope == scope).count()
    }

    /// The name of the presented token (`admin alice <token>`), if it is
    /// one of ours and has one: for the audit trail of admin calls. The
    /// match is found in constant time, as in [`scope_of`](Self::scope_of).
    pub fn name_of(&self, presented: &[u8]) -> Option<std::sync::Arc<str>> {
        let presented = digest(presented);
        let mut index = u64::MAX;
        for (i, entry) in self.entries.iter().enumerate() {
            let hit = entry.digest.ct_eq(&presented);
            index = u64::conditional_select(&index, &(i as u64), hit);
        }
        let entry = self.entries.get(usize::try_from(index).ok()?)?;
        entry.name.clone()
    }

    /// The scope of the presented token, if it is one of ours. Every
    /// configured digest is compared, in constant time, whatever matched.
    pub fn scope_of(&self, presented: &[u8]) -> Option<Scope> {
        let presented = digest(presented);
        let mut found = subtle::Choice::from(0);
        let mut admin = subtle::Choice::from(0);
        for entry in &self.entries {
            let hit = entry.digest.ct_eq(&presented);
            found |= hit;
            let is_admin = u8::from(entry.scope == Scope::Admin);
            admin |= hit & subtle::Choice::from(is_admin);
        }
        // Tokens are unique, so at most one entry matched.
        let scope = u8::conditional_select(&0, &1, admin);
        bool::from(found).then_some(if scope == 1 {
            Scope::Admin
        } else {
            Scope::Check
        })
    }
}

#[cfg(test)]
mod tests;
