//! The answer to a check as sent: the body of every form, and the headers.

use std::sync::Arc;

use axum::Json;
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::request::AlgorithmName;
use crate::domain::{Decision, Level, LimitDecision, TenantMark};

/// The decision. Sent with status 200 whether allowed or not.
///
/// The single-rule form gets the first six fields only, exactly as before
/// policies existed; the policy and inline forms also get `policy`,
/// `shadow` and `limits`. Every form gets `waited_ms` when the request
/// asked to wait (`wait_ms` above 0), and only then.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"allowed": true, "limit": 100, "remaining": 99, "retry_after_ms": 0, "reset_after_ms": 60000, "degraded": false}))]
pub struct CheckResponse {
    /// The check as a whole: every limit allowed `cost` (a shadow policy
    /// is always allowed).
    pub allowed: bool,
    /// The `limit` of the most restrictive limit (the fewest remaining).
    pub limit: u64,
    /// Units still available after this request, of the most restrictive
    /// limit; never negative.
    pub remaining: u64,
    /// 0 when allowed. When denied, the smallest wait after which the same
    /// request would be allowed if nothing else arrives: the largest
    /// retry_after_ms of the denying limits.
    pub retry_after_ms: u64,
    /// Time until every limit is back to full capacity if nothing else
    /// arrives: the largest reset_after_ms of the limits.
    pub reset_after_ms: u64,
    /// True when the failure policy answered because the store was
    /// unreachable or too slow.
    pub degraded: bool,
    /// Policy and inline forms only: the policy applied, null for an
    /// inline check.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub policy: Option<Option<Arc<str>>>,
    /// Policy and inline forms only: true when a shadow policy answered
    /// allowed although a limit denied (`limits` shows which).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub shadow: Option<bool>,
    /// Policy and inline forms only: what each limit decided, in the
    /// policy's (or the request's) order. When the check is denied nothing
    /// is spent, and a limit that would have allowed shows its state as it
    /// is (`remaining`, `reset_after_ms` without this check).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub limits: Option<Vec<LimitResponse>>,
    /// The levels form only: each level's answer, in the request's order.
    /// The fields above are the combined decision: allowed only if every
    /// level allowed, the most restrictive limit of any level, and the
    /// largest `retry_after_ms` of the denying levels (when every level
    /// could pass if nothing else arrives).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub levels: Option<Vec<LevelResponse>>,
    /// `POST /v1/draw` only: the reservation's total so far, its check's
    /// `cost` and every draw it allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub drawn: Option<u64>,
    /// Requests with `wait_ms` above 0 only: milliseconds waited, from the
    /// first try to the answer; 0 when answered without waiting (allowed at
    /// once, or a denial the time left could not outlast).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub waited_ms: Option<u64>,
    /// Checks with a concurrency limit, when allowed with a cost above 0:
    /// the lease taken, to pass to `POST /v1/release` when the work is
    /// done (and to `/v1/renew` to keep it longer). Absent when nothing was
    /// taken: a denial, a look (cost 0), or an answer of the failure policy
    /// (`degraded`, except `failure.mode = "local"`, whose local store
    /// holds a lease of its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub lease: Option<LeaseResponse>,
    /// `POST /v1/release` only: whether the lease was live and is now
    /// freed; false for one that expired, was released already, or never
    /// was (nothing changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub released: Option<bool>,
    /// `POST /v1/renew` only: whether the lease was live and now lives
    /// `lease_ttl` from now (then `lease` says so); false for one that
    /// expired or was released (it is not brought back: get a new one).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub renewed: Option<bool>,
    /// Checks that asked for one (`reservation_ttl`), when allowed by the
    /// store: the reservation to name in `POST /v1/settle`. Absent from a
    /// denial, from an answer of the failure policy (`degraded`), and from
    /// a shadow policy's answer that a limit denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reservation: Option<ReservationResponse>,
    /// A policy check whose key has an override: `api` when one set by
    /// `PUT /v1/overrides` applied (it comes first), `file` when the
    /// policies file's did. Absent when the policy's own limits applied.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<String>, example = "api")]
    pub overridden: Option<&'static str>,
    /// The key is blocked (`PUT /v1/blocks`): denied without counting
    /// anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub blocked: Option<BlockedResponse>,
    /// The key is exempt (`PUT /v1/exemptions`): allowed whatever its
    /// limits said, and counted as usual (`limits` shows what they said).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub exempt: Option<bool>,
}

/// Why a check was blocked.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlockedResponse {
    /// The block's `reason`, if it gave one.
    pub reason: Option<String>,
    /// Milliseconds until the block expires; null when it has no expiry
    /// (then `retry_after_ms` is an hour).
    pub expires_in_ms: Option<u64>,
}

/// A reservation: what `POST /v1/settle` names to settle the check's cost.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReservationResponse {
    /// Opaque (URL-safe characters): pass it back unchanged. Any instance
    /// sharing the store can settle it.
    #[schema(value_type = String, pattern = "^[A-Za-z0-9_-]+$")]
    pub id: String,
    /// Milliseconds it can be settled for: the check's `reservation_ttl`.
    /// After that a settle is answered 404 and the units stay spent.
    pub expires_in_ms: u64,
}

impl ReservationResponse {
    /// The reservation `id` of a check that asked for one, if the store
    /// recorded it ([`Decision::reserved`]).
    pub fn granted(decision: &Decision, id: String, ttl_ms: u64) -> Option<ReservationResponse> {
        decision.reserved().then_some(ReservationResponse {
            id,
            expires_in_ms: ttl_ms,
        })
    }
}

/// A lease on a concurrency limit.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseResponse {
    /// 32 hex digits (128 random bits): unguessable, so only its holder
    /// can release it.
    #[schema(value_type = String, pattern = "^[0-9a-f]{32}$", example = "5f0c6a1e9b3d4c2a8e7f6b5a4c3d2e1f")]
    pub id: String,
    /// Milliseconds until it frees itself unless released or renewed: the
    /// concurrency limit's `lease_ttl`.
    pub expires_in_ms: u64,
}

/// A body's bytes before its `limits`, and per limit: generous for names
/// of a few dozen bytes, so the body is written without growing.
const BODY_BYTES: usize = 256;
const LIMIT_BYTES: usize = 224;

/// One limit's own decision.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitResponse {
    #[schema(value_type = String)]
    pub name: Arc<str>,
    #[schema(value_type = AlgorithmName)]
    pub algorithm: &'static str,
    pub limit: u64,
    /// Bucket capacity for token_bucket and gcra; `limit` otherwise.
    pub burst: u64,
    pub window_ms: u64,
    pub allowed: bool,
    pub remaining: u64,
    pub retry_after_ms: u64,
    pub reset_after_ms: u64,
}

impl From<&LimitDecision> for LimitResponse {
    fn from(l: &LimitDecision) -> Self {
        LimitResponse {
            name: l.name.clone(),
            algorithm: l.algorithm.as_str(),
            limit: l.limit,
            burst: l.burst,
            window_ms: l.window_ms,
            allowed: l.allowed,
            remaining: l.remaining,
            retry_after_ms: l.retry_after_ms,
            reset_after_ms: l.reset_after_ms,
        }
    }
}

impl CheckResponse {
    /// The single-rule form's body: the six fields it always had.
    pub fn single_rule(d: &Decision) -> Self {
        CheckResponse {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_ms: d.retry_after_ms,
            reset_after_ms: d.reset_after_ms,
            degraded: d.degraded,
            policy: None,
            shadow: None,
            limits: None,
            levels: None,
            drawn: None,
            waited_ms: None,
            lease: d.lease.as_ref().map(|l| LeaseResponse {
                id: l.id.as_str().to_owned(),
                expires_in_ms: l.expires_in_ms,
            }),
            released: None,
            renewed: None,
            reservation: None,
            overridden: None,
            blocked: match &d.tenant {
                Some(TenantMark::Blocked {
                    reason,
                    expires_in_ms,
                }) => Some(BlockedResponse {
                    reason: reason.as_deref().map(str::to_owned),
                    expires_in_ms: *expires_in_ms,
                }),
                _ => None,
            },
            exempt: matches!(d.tenant, Some(TenantMark::Exempt)).then_some(true),
        }
    }

    /// The policy and inline forms' body: also the policy and every limit.
    pub fn with_limits(d: &Decision) -> Self {
        CheckResponse {
            policy: Some(d.policy.clone()),
            shadow: Some(d.shadow),
            limits: Some(d.limits.iter().map(LimitResponse::from).collect()),
            ..CheckResponse::single_rule(d)
        }
    }

    /// The levels form's body: the combined decision and each level's.
    pub fn with_levels(d: &Decision) -> Self {
        CheckResponse {
            levels: Some(level_answers(d)),
            ..CheckResponse::single_rule(d)
        }
    }

    /// The JSON body with the decision's rate-limit headers.
    pub fn into_response_for(self, decision: &Decision) -> Response {
        // Sized for the body up front: axum's `Json` starts at 128 bytes and
        // grows by copying, three times for a check of two limits.
        let limits = self.limits.as_ref().map_or(0, Vec::len)
            + self.levels.as_ref().map_or(0, |l| l.len() * 2);
        let mut body = Vec::with_capacity(BODY_BYTES + LIMIT_BYTES * limits);
        let mut response = match serde_json::to_writer(&mut body, &self) {
            Ok(()) => (
                [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                body,
            )
                .into_response(),
            // Not reachable with these types (no map keys, no floats); as `Json` would.
            Err(_) => Json(self).into_response(),
        };
        crate::http::rate_headers::insert(response.headers_mut(), decision);
        response
    }
}

/// One level's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct LevelResponse {
    /// The level's name: its position (`"0"`, `"1"`, ...) in a `levels`
    /// check, or the name a policy with levels gives it (its `level`
    /// label in the metrics either way).
    #[schema(value_type = String)]
    pub name: Arc<str>,
    /// The level's client key: as sent, or as the policy's key template
    /// built it from `ids`.
    pub key: String,
    /// Every limit of this level allowed `cost`.
    pub allowed: bool,
    /// The `limit` of this level's most restrictive limit.
    pub limit: u64,
    /// Units this level has left after the check (or, when the check was
    /// denied, as it is: nothing was spent).
    pub remaining: u64,
    /// 0 when this level allowed; otherwise the smallest wait after which
    /// it would.
    pub retry_after_ms: u64,
    /// Time until this level is back to full capacity.
    pub reset_after_ms: u64,
    /// The level's policy, null for inline limits.
    #[schema(value_type = Option<String>)]
    pub policy: Option<Arc<str>>,
    /// What each limit of this level decided, in its policy's (or the
    /// level's) order: for a policy's level, or one of several inline
    /// limits (a level of one inline rule is its own answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub limits: Option<Vec<LimitResponse>>,
}

/// Each level's answer, in order, from the combined `decision`.
pub(super) fn level_answers(decision: &Decision) -> Vec<LevelResponse> {
    let mut answers = Vec::new();
    let mut start = 0;
    while start < decision.limits.len() {
        let level = decision.limits[start].level.clone();
        let index = level.as_ref().map(|l| l.index);
        let end = (start..decision.limits.len())
            .find(|&i| decision.limits[i].level.as_ref().map(|l| l.index) != index)
            .unwrap_or(decision.limits.len());
        answers.push(level_answer(level, &decision.limits[start..end]));
        start = end;
    }
    answers
}

fn level_answer(level: Option<Arc<Level>>, limits: &[LimitDecision]) -> LevelResponse {
    // As the whole check's: the fewest remaining, a denying one among
    // equals, then the first.
    let tightest = (0..limits.len())
        .min_by_key(|&i| (limits[i].remaining, limits[i].allowed, i))
        .unwrap_or(0);
    LevelResponse {
        name: level
            .as_ref()
            .map_or_else(|| Arc::from("0"), |l| l.name.clone()),
        key: level
            .as_ref()
            .map_or_else(String::new, |l| l.key.to_string()),
        allowed: limits.iter().all(|l| l.allowed),
        limit: limits[tightest].limit,
        remaining: limits[tightest].remaining,
        retry_after_ms: limits
            .iter()
            .filter(|l| !l.allowed)
            .map(|l| l.retry_after_ms)
            .max()
            .unwrap_or(0),
        reset_after_ms: limits.iter().map(|l| l.reset_after_ms).max().unwrap_or(0),
        // Listed for a policy, or several limits: one inline rule's limit
        // says nothing the level's own fields do not.
        limits: (level.as_ref().is_some_and(|l| l.policy.is_some()) || limits.len() > 1)
            .then(|| limits.iter().map(LimitResponse::from).collect()),
        policy: level.and_then(|l| l.policy.clone()),
    }
}
