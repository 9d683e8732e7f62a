//! `/v1/auth/{policy}` (and `/v1/auth/{policy}/{*rest}`, as Envoy's
//! ext_authz appends the original path): forward-auth for a proxy in front
//! of a service. Any method, body ignored. The key comes from the policy's
//! `key_from`, the client address from the socket peer or, behind
//! `server.trusted_proxies`, from `X-Forwarded-For`/`X-Real-IP`; the cost
//! from `X-RateLimit-Cost`, believed only from a trusted proxy (a proxy
//! forwards every client header, so from anyone else it is the client's
//! own word). The check is the policy form of `/v1/check`.
//!
//! Answers: 200 with an empty body when allowed; the policy's
//! `deny_status` (429) with an `application/problem+json` body when denied;
//! JSON errors otherwise (see [`AuthError`]). Every decision carries the
//! rate-limit headers, plus `RateLimit-Degraded: ?1` when the failure
//! policy answered.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde::Deserialize;

use super::AppState;
use super::auth_error::{AuthError, explain, status};
use super::check::unknown_policy;
use super::endpoint::Endpoint;
use crate::domain::auth::Scope;
use crate::domain::forward::{Header, IpNet, RequestView, canonical, client_ip};
use crate::domain::{Check, Decision};
use crate::limiter::Request as Run;
use crate::store::Op;

/// The request header that sets the cost (default 1).
pub const COST_HEADER: &str = "x-ratelimit-cost";

/// The problem type of a denial (draft-ietf-httpapi-ratelimit-headers-11).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

#[derive(Deserialize)]
pub struct AuthPath {
    policy: String,
    rest: Option<String>,
}

/// Forward-auth: a proxy's subrequest with any method, the rest of the
/// path the client's own; a check scope, as a check's. Not in the OpenAPI
/// document, which `docs/proxies.md` stands in for.
pub(super) const ENDPOINTS: &[Endpoint] = &[
    forward_auth("/v1/auth/{policy}"),
    forward_auth("/v1/auth/{policy}/"),
    forward_auth("/v1/auth/{policy}/{*rest}"),
];

const fn forward_auth(path: &'static str) -> Endpoint {
    Endpoint {
        path,
        under: Some("/v1/auth/"),
        scope: Scope::Check,
        handler: |_| any(auth),
        doc: None,
    }
}

pub async fn auth(
    State(state): State<AppState>,
    path: Result<Path<AuthPath>, PathRejection>,
    request: Request,
) -> Response {
    // A path that is not UTF-8 once decoded: our JSON error, not axum's text.
    let path = match path {
        Ok(Path(path)) => path,
        Err(rejection) => return AuthError::InvalidRequest(rejection.body_text()).into_response(),
    };
    // Only the head is kept: the body is ignored, and must not be held
    // across the store call (it is not Sync).
    let (parts, _) = request.into_parts();
    match decide(&state, &path, &parts).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn decide(state: &AppState, path: &AuthPath, request: &Parts) -> Result<Response, AuthError> {
    let (check, deny_status) = prepare(state, path, request)?;
    let answer_ = state
        .limiter
        .run_one(Run::new(Op::check(&check)))
        .await
        .map_err(AuthError::Internal)?;
    Ok(answer(&answer_.decision, deny_status))
}

/// The check and the denial status, under the policy set in force now.
/// The set is loaded once and released before the store call: the check
/// holds its own references to the limits.
fn prepare(
    state: &AppState,
    path: &AuthPath,
    request: &Parts,
) -> Result<(Check, StatusCode), AuthError> {
    let set = state.policies.load();
    let headers = &request.headers;
    let (ip, from_proxy) = client_of(state, request);
    let lookup = |name: &str| header(headers, name);
    // `/v1/auth/p/` is the original path `/` (Envoy appends it).
    let rest = match &path.rest {
        Some(r) => Some(format!("/{r}")),
        None if request.uri.path().ends_with('/') => Some("/".to_string()),
        None => None,
    };
    let view = RequestView {
        header: &lookup,
        ip,
        path: rest.as_deref(),
    };
    // From anyone but a trusted proxy the header is the client's: ignored.
    // Read once the key is known, so that an unknown policy is a 404 and
    // a missing key its status, whatever the header.
    let cost = || if from_proxy { cost(headers) } else { Ok(None) };
    let Some(policy) = set.get(&path.policy) else {
        return match set.hierarchy(&path.policy) {
            Some(hierarchy) => super::auth_levels::prepare(state, &set, hierarchy, &view, cost),
            None => Err(AuthError::UnknownPolicy(unknown_policy(&set, &path.policy))),
        };
    };
    let forward = &policy.forward;
    let key = forward
        .key(&view)
        .map_err(|e| AuthError::UnreadableKey(e, status(forward.missing_key_status)))?;
    let Some(key) = key else {
        return Err(AuthError::MissingKey {
            status: status(forward.missing_key_status),
            tried: format!("{:?}", forward.key_from_text),
        });
    };
    let (check, _) = super::check::policy_for_key(state, policy, key, cost()?)
        .map_err(|e| AuthError::InvalidRequest(explain(e)))?;
    // Before any store call: no lease is taken that nobody could release.
    if let Some(limit) = check.concurrency() {
        return Err(AuthError::LeasedPolicy(
            policy.name.to_string(),
            limit.name.to_string(),
        ));
    }
    Ok((check, status(forward.deny_status)))
}

/// What the request holds under `name`, for a `header:` key source. Any
/// UTF-8 text counts (`HeaderValue::to_str` takes visible ASCII only, and
/// would make `X-User: José` absent); a value sent twice, or not UTF-8,
/// is unreadable and refuses the request. A comma counts as a second
/// value: HTTP lets a proxy join repeated field lines with commas (RFC
/// 9110 5.3), and Envoy's ext_authz does, so a client's forged value and
/// the proxy's real one arrive as `forged,real`, a fresh key per forgery.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Header<'a> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Header::Absent,
        (Some(_), Some(_)) => Header::Repeated,
        (Some(v), None) if v.as_bytes().contains(&b',') => Header::Repeated,
        (Some(v), None) => std::str::from_utf8(v.as_bytes()).map_or(Header::NotUtf8, Header::One),
    }
}

/// The client's address (see [`client_ip`] for whom we believe), and
/// whether the peer is a trusted proxy.
fn client_of(state: &AppState, request: &Parts) -> (IpAddr, bool) {
    // Always there under our server; a router driven in-process has no peer.
    let peer = request
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    client_behind(peer, &state.trusted_proxies, &request.headers)
}

/// [`client_of`] once the peer is known.
fn client_behind(peer: IpAddr, trusted: &[IpNet], headers: &HeaderMap) -> (IpAddr, bool) {
    if !trusted.iter().any(|net| net.contains(peer)) {
        return (canonical(peer), false);
    }
    let forwarded = forwarded_hops(headers);
    let forwarded: Vec<&str> = forwarded.iter().map(String::as_str).collect();
    // One X-Real-IP only: a proxy that appends rather than replaces it
    // would put the client's forged value first.
    let mut real_ips = headers.get_all("x-real-ip").iter();
    let real_ip = match (real_ips.next(), real_ips.next()) {
        (Some(v), None) => v.to_str().ok(),
        _ => None,
    };
    (client_ip(peer, trusted, &forwarded, real_ip), true)
}

/// The hops of every `X-Forwarded-For` header, in order. The raw bytes are
/// split on `,` first, so a hop that is not UTF-8 becomes one hop that
/// won't parse (it must stop the walk, not vanish) without hiding the
/// readable hops of its header.
fn forwarded_hops(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(|hop| std::str::from_utf8(hop).unwrap_or("?").to_string())
        .collect()
}

/// `X-RateLimit-Cost`: absent is 1 (decided by the check); otherwise one
/// whole number from 1, like the JSON `cost` (its upper bound is the
/// check's). Unlike `/v1/check`, 0 is refused: a forward-auth call lets a
/// request through, so it always spends.
fn cost(headers: &HeaderMap) -> Result<Option<u64>, AuthError> {
    let mut values = headers.get_all(COST_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |shown: &str| {
        AuthError::InvalidRequest(format!(
            "X-RateLimit-Cost: must be one whole number from 1 to the policy's smallest limit, got {shown:?}"
        ))
    };
    if values.next().is_some() {
        return Err(bad("several headers"));
    }
    let text = value.to_str().map_err(|_| bad("non-ASCII bytes"))?.trim();
    let shown: String = text.chars().take(32).collect();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(&shown));
    }
    match text.parse::<u64>() {
        Ok(0) | Err(_) => Err(bad(&shown)),
        Ok(n) => Ok(Some(n)),
    }
}

/// 200 and no body, or the denial with its problem body; the decision's
/// headers either way.
fn answer(decision: &Decision, deny_status: StatusCode) -> Response {
    let mut response = if decision.allowed {
        StatusCode::OK.into_response()
    } else {
        let violated = decision
            .limits
            .iter()
            .filter(|l| !l.allowed)
            .map(|l| match &l.level {
                // A level's limit by its level: two levels may both have a "daily".
                Some(level) => format!("{}/{}", level.name, l.name),
                None => l.name.to_string(),
            })
            .collect::<Vec<String>>();
        let body = serde_json::json!({
            "type": QUOTA_EXCEEDED,
            "title": "Request cannot be satisfied as assigned quota has been exceeded",
            "status": deny_status.as_u16(),
            "violated-policies": violated,
        });
        let mut denied = (deny_status, Json(body)).into_response();
        denied.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        denied
    };
    super::rate_headers::insert(response.headers_mut(), decision);
    let headers = response.headers_mut();
    if decision.degraded {
        // A structured-field boolean (RFC 9651), like the draft's headers.
        headers.insert(
            HeaderName::from_static("ratelimit-degraded"),
            HeaderValue::from_static("?1"),
        );
    }
    response
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
