//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` with tonic.
//!
//! The descriptors' limits are planned by the domain (`domain::rls`), then
//! checked all-or-nothing: every enforced limit of one request (same cost)
//! is one [`Check`], so one store call. Shadow-mode limits form a check of
//! their own (marked shadow), so they never deny and never stop the others
//! from spending. Descriptors with different `hits_addend` are different
//! costs, hence different checks: all-or-nothing holds within each.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tonic::Status;

use super::wire::RateLimitRequest;
use crate::domain::auth::Refusal;
use crate::domain::rls::{InvalidRequest, Planned, RlsConfig, Unit};
use crate::domain::{Bounds, Check, Decision, Limit, LimitDecision};
use crate::limiter::{Limiter, LimiterError, Request};
use crate::store::Op;

/// Why a request got no answer; mapped to a gRPC status in one place.
#[derive(Debug, thiserror::Error)]
pub enum RlsError {
    #[error(transparent)]
    Invalid(#[from] InvalidRequest),
    #[error("store error: {0}")]
    Store(#[from] LimiterError),
    /// Refused by bearer authentication ([`super::auth`]).
    #[error("{}", refused(*.0))]
    Unauthenticated(Refusal),
}

impl From<RlsError> for Status {
    fn from(e: RlsError) -> Status {
        match e {
            RlsError::Invalid(e) => Status::invalid_argument(e.0),
            RlsError::Store(e) => Status::unavailable(e.to_string()),
            RlsError::Unauthenticated(_) => Status::unauthenticated(e.to_string()),
        }
    }
}

/// What an `UNAUTHENTICATED` status says: what is wrong, never what was
/// sent.
fn refused(refusal: Refusal) -> String {
    const EXPECTED: &str = "expected one `authorization: Bearer <token>` metadata entry";
    match refusal {
        Refusal::Missing => format!("this service needs a bearer token: {EXPECTED}"),
        Refusal::Malformed(why) => {
            format!(
                "malformed authorization metadata: {}; {EXPECTED}",
                why.what()
            )
        }
        Refusal::Invalid => "the bearer token is not valid".into(),
        // Every token covers `check`, all this service needs.
        Refusal::Scope(required) => {
            format!("this service needs a token of scope {}", required.as_str())
        }
    }
}

pub struct RlsService {
    pub limiter: Arc<Limiter>,
    /// Swapped whole by the reloader.
    pub config: Arc<arc_swap::ArcSwap<RlsConfig>>,
    pub bounds: Bounds,
}

/// The largest request decoded. Envoy's are a few KiB (its own limit on a
/// client's request headers is 60 KiB by default), and this × the read
/// slots bounds what reading calls can make the server hold. A larger one
/// is not read, and answered OVER_LIMIT ([`super::service`]).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
impl RlsService {
    pub(super) async fn answer(
        &self,
        req: RateLimitRequest,
    ) -> Result<RateLimitResponse, RlsError> {
        let inputs = req
            .descriptors
            .into_iter()
            .enumerate()
            .map(|(i, d)| d.into_input(i))
            .collect::<Result<Vec<_>, _>>()?;
        let hits = u64::from(req.hits_addend);
        let config = self.config.load_full();
        let (domain, planned) = config.plan(&req.domain, &inputs, hits, &self.bounds)?;
        let mut statuses: Vec<DescriptorStatus> =
            planned.iter().map(status_without_limit).collect();
        let Some(domain) = domain else {
            return Ok(response(Code::Ok, statuses, None));
        };
        if let Some(Planned::Refused(why)) =
            planned.iter().find(|p| matches!(p, Planned::Refused(_)))
        {
            // The request is denied whatever the other descriptors say, so
            // none of them spends (all or nothing, as for one check).
            tracing::debug!(domain = %domain.name, reason = %why, "RLS descriptor refused");
            return Ok(response(Code::OverLimit, statuses, None));
        }
        let groups = checks(domain.name.as_ref(), &domain.policy, &planned);
        let (overall, headers) = self.decide(&groups, &mut statuses).await?;
        Ok(response(overall, statuses, headers.as_ref()))
    }

    /// Every group's check decided, in one run of the pipeline, into the
    /// statuses of its members: the overall code, and the decision whose
    /// limits the headers tell (the enforced ones when there are any).
    async fn decide(
        &self,
        groups: &[Group<'_>],
        statuses: &mut [DescriptorStatus],
    ) -> Result<(Code, Option<Decision>), RlsError> {
        // A cost over a limit's capacity is never allowed, whatever the
        // state: nothing to ask the store.
        let over = |check: &Check| check.limits.iter().any(|l| check.cost > l.rule.capacity());
        let runs: Vec<Request> = groups
            .iter()
            .filter(|g| !over(&g.check))
            .map(|g| Request::new(Op::check(&g.check)))
            .collect();
        let mut decided = self.limiter.run(&runs).await.into_iter();
        let mut overall = Code::Ok;
        let mut headers: Option<(bool, Decision)> = None;
        for group in groups {
            let decision = if over(&group.check) {
                over_capacity(&group.check)
            } else {
                let answer = decided.next().expect("one answer per check asked");
                answer?.decision
            };
            for (&(i, _, unit), &j) in group.members.iter().zip(&group.at) {
                statuses[i] = status_of(&decision.limits[j], decision.allowed, unit);
            }
            if !decision.allowed {
                overall = Code::OverLimit;
            }
            if headers
                .as_ref()
                .is_none_or(|(was_shadow, _)| *was_shadow && !group.check.shadow)
            {
                headers = Some((group.check.shadow, decision));
            }
        }
        Ok((overall, headers.map(|(_, d)| d)))
    }
}

/// One check of a request: its members (descriptor, limit, unit), where
/// each member's limit sits among the check's, and the check.
struct Group<'a> {
    members: Vec<Member<'a>>,
    at: Vec<usize>,
    check: Check,
}

/// Every group is a check of its own (all or nothing within it); they go
/// to the store in one call, applied in order.
fn checks<'a>(key: &str, policy: &Arc<str>, planned: &'a [Planned]) -> Vec<Group<'a>> {
    groups(planned)
        .into_iter()
        .map(|((shadow, cost), members)| {
            let (limits, at) = dedupe(&members);
            let check = Check {
                key: key.to_string(),
                limits: limits.into(),
                cost,
                policy: Some(policy.clone()),
                shadow,
                failure_mode: None,
                // RLS descriptors do not lease (policy files only).
                lease: None,
            };
            Group { members, at, check }
        })
        .collect()
}

type Member<'a> = (usize, &'a Limit, Unit);

/// The group's distinct limits, and each member's position among them. The
/// same descriptor twice is one counter, applied once: two limits on one
/// state key in one script would both read the same count and could admit
/// past the limit.
fn dedupe(members: &[Member<'_>]) -> (Vec<Limit>, Vec<usize>) {
    let mut limits: Vec<Limit> = Vec::with_capacity(members.len());
    let at = members
        .iter()
        .map(|&(_, l, _)| {
            limits.iter().position(|x| x == l).unwrap_or_else(|| {
                limits.push(l.clone());
                limits.len() - 1
            })
        })
        .collect();
    (limits, at)
}

/// One limited descriptor's status: OVER_LIMIT when the check was denied
/// and this limit is one that denied it.
fn status_of(d: &LimitDecision, check_allowed: bool, unit: Unit) -> DescriptorStatus {
    let denied = !check_allowed && !d.allowed;
    DescriptorStatus {
        code: if denied { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(RateLimit {
            name: d.name.to_string(),
            requests_per_unit: clamp(d.limit),
            unit: proto_unit(unit),
        }),
        limit_remaining: clamp(d.remaining),
        duration_until_reset: Some(duration(d.reset_after_ms)),
        ..Default::default()
    }
}

/// The limited descriptors grouped by (shadow, cost), in first-seen order.
fn groups(planned: &[Planned]) -> Vec<((bool, u64), Vec<Member<'_>>)> {
    let mut out: Vec<((bool, u64), Vec<Member<'_>>)> = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        if let Planned::Limited {
            limit,
            unit,
            shadow,
            cost,
        } = p
        {
            let k = (*shadow, *cost);
            match out.iter_mut().find(|(g, _)| *g == k) {
                Some((_, m)) => m.push((i, limit, *unit)),
                None => out.push((k, vec![(i, limit, *unit)])),
            }
        }
    }
    out
}

/// A cost above a limit's capacity can never pass (envoyproxy/ratelimit
/// answers OVER_LIMIT too): every such limit denies, nothing is spent.
fn over_capacity(check: &Check) -> Decision {
    let outcomes: Vec<_> = check
        .limits
        .iter()
        .map(|l| crate::domain::Outcome {
            allowed: check.cost <= l.rule.capacity(),
            remaining: l.rule.capacity(),
            retry_after_us: 0,
            reset_after_us: 0,
        })
        .collect();
    Decision::from_outcomes(check, &outcomes)
}

/// OVER_LIMIT for the whole request, no descriptor decided.
pub(super) fn over_limit() -> RateLimitResponse {
    response(Code::OverLimit, Vec::new(), None)
}

fn status_without_limit(p: &Planned) -> DescriptorStatus {
    let refused = matches!(p, Planned::Refused(_));
    DescriptorStatus {
        code: if refused { Code::OverLimit } else { Code::Ok } as i32,
        limit_remaining: if matches!(p, Planned::Unlimited) {
            u32::MAX
        } else {
            0
        },
        ..Default::default()
    }
}

fn response(
    code: Code,
    statuses: Vec<DescriptorStatus>,
    d: Option<&Decision>,
) -> RateLimitResponse {
    let headers = d
        .map(|d| {
            d.headers()
                .map(|(k, v)| HeaderValue {
                    key: k.to_string(),
                    value: v.to_string(),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    RateLimitResponse {
        overall_code: code as i32,
        statuses,
        response_headers_to_add: headers,
        ..Default::default()
    }
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn duration(ms: u64) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(ms / 1_000).unwrap_or(i64::MAX),
        nanos: ((ms % 1_000) * 1_000_000) as i32,
    }
}

fn proto_unit(u: Unit) -> i32 {
    match u {
        Unit::Second => 1,
        Unit::Minute => 2,
        Unit::Hour => 3,
        Unit::Day => 4,
        Unit::Month => 5,
        Unit::Year => 6,
        Unit::Week => 7,
    }
}
