//! The decision's rate-limit headers on an HTTP response, for every front
//! end that answers one (`/v1/check`, forward-auth).
//!
//! The names are the domain's ([`Decision::headers`]); each is mapped to a
//! `HeaderName` made at compile time rather than parsed per response
//! (`HeaderName::from_static` validates its input each call, about 100
//! instructions a header in `bench/cost.sh`'s profile).

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::domain::{Decision, HeaderText};

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const RETRY_AFTER: HeaderName = HeaderName::from_static("retry-after");

fn name(of: &'static str) -> HeaderName {
    match of {
        "ratelimit-policy" => RATELIMIT_POLICY,
        "ratelimit" => RATELIMIT,
        "x-ratelimit-limit" => X_LIMIT,
        "x-ratelimit-remaining" => X_REMAINING,
        "x-ratelimit-reset" => X_RESET,
        "retry-after" => RETRY_AFTER,
        other => HeaderName::from_static(other),
    }
}

/// Inserts every header of `decision` into `headers`. A value that is not
/// a valid header value (a limit name with a control character) is left
/// out rather than failing the answer.
pub(super) fn insert(headers: &mut HeaderMap, decision: &Decision) {
    headers.reserve(6);
    for (of, value) in decision.headers() {
        let value = match value {
            HeaderText::Number(n) => HeaderValue::from(n),
            HeaderText::Text(text) => match HeaderValue::try_from(text) {
                Ok(value) => value,
                Err(_) => continue,
            },
        };
        headers.insert(name(of), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name the domain gives maps to the same header as parsing it
    /// would, and none falls through to the parse.
    #[test]
    fn every_domain_header_has_its_constant() {
        for of in [
            "ratelimit-policy",
            "ratelimit",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "retry-after",
        ] {
            assert_eq!(name(of), HeaderName::from_static(of));
            assert_eq!(name(of).as_str(), of);
        }
    }
}
