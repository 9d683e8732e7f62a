//! Taking apart what a request presents as credentials, and deciding
//! whether it may call what it asks for. The HTTP `Authorization` header
//! and the gRPC `authorization` metadata have the same syntax, so both
//! transports hand their raw values here: one place decides what is
//! malformed, what is missing and what is refused.

use super::{Scope, TokenSet, is_b64token};

/// Why credentials are malformed (RFC 6750 §3.1 `invalid_request`). Each
/// says what is wrong without repeating what was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// `Bearer` and nothing after it.
    NoToken,
    /// A token that is not a `b64token`, so cannot be one of ours.
    NotB64token,
    /// More than one `authorization` value: which one counts would be a
    /// guess, and a proxy may have added one.
    Several,
}

impl Malformed {
    pub fn what(self) -> &'static str {
        match self {
            Malformed::NoToken => "`Bearer` with no token",
            Malformed::NotB64token => {
                "the token is not made of A-Z a-z 0-9 - . _ ~ + / (and trailing =)"
            }
            Malformed::Several => "more than one authorization value",
        }
    }
}

/// What a request's authorization values hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Presented<'a> {
    /// No value, or another scheme: no bearer credentials at all.
    Nothing,
    Malformed(Malformed),
    Token(&'a [u8]),
}

/// The token of the one `Bearer <token>` value among `values` (the scheme
/// is case-insensitive, RFC 9110 §11.1).
pub fn presented<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Presented<'a> {
    let mut values = values.into_iter();
    let Some(value) = values.next() else {
        return Presented::Nothing;
    };
    if values.next().is_some() {
        return Presented::Malformed(Malformed::Several);
    }
    let (scheme, rest) =
        value.split_at(value.iter().position(|&b| b == b' ').unwrap_or(value.len()));
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Presented::Nothing;
    }
    let token = rest.trim_ascii();
    if token.is_empty() {
        return Presented::Malformed(Malformed::NoToken);
    }
    match std::str::from_utf8(token) {
        Ok(text) if is_b64token(text) => Presented::Token(token),
        _ => Presented::Malformed(Malformed::NotB64token),
    }
}

/// Why a request was refused. Holds no token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer credentials.
    Missing,
    Malformed(Malformed),
    /// A token that is not one of ours.
    Invalid,
    /// One of ours, whose scope does not cover what was asked (it needs
    /// the scope held here).
    Scope(Scope),
}

impl TokenSet {
    /// The scope of the token among `values` (a request's authorization
    /// values), when it covers `required`.
    pub fn authorize<'a>(
        &self,
        values: impl IntoIterator<Item = &'a [u8]>,
        required: Scope,
    ) -> Result<Scope, Refusal> {
        match presented(values) {
            Presented::Nothing => Err(Refusal::Missing),
            Presented::Malformed(why) => Err(Refusal::Malformed(why)),
            Presented::Token(token) => match self.scope_of(token) {
                None => Err(Refusal::Invalid),
                Some(scope) if !scope.covers(required) => Err(Refusal::Scope(required)),
                Some(scope) => Ok(scope),
            },
        }
    }
}
