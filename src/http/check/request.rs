//! The three forms of a check request, how a body is told apart as one of
//! them, and their conversion to the domain's inputs.
//!
//! 1. `{"policy", "key", "cost"?}`: a named policy from the policies file;
//! 2. `{"key", "limits": [...], "cost"?}`: several limits, inline;
//! 3. `{"key", "limit", "window", "algorithm"?, "burst"?, "cost"?}`: the
//!    single-rule form of the first API, parsed exactly as it always was
//!    (same type, same error messages).

use serde::Deserialize;
use utoipa::ToSchema;

pub use super::fields::{AlgorithmName, WindowSpec};
use super::fields::{CalendarName, optional_whole_number, whole_number};
use super::fields_present::{Present, RULE_FIELDS};
use crate::domain::{Algorithm, CheckInput, LimitInput, RuleInput};

/// May this key spend this much now?
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"key": "user:42", "limit": 100, "window": "1m", "algorithm": "sliding_window"}))]
pub struct CheckRequest {
    /// The client being limited: any UTF-8, 1 to 512 bytes
    /// (`limits.max_key_bytes`). The length bounds count characters; the
    /// server counts bytes, so a key of non-ASCII characters reaches the
    /// limit sooner.
    #[schema(min_length = 1, max_length = 512)]
    pub key: String,
    /// Units allowed per window, 1 to 1000000000000. For sliding_log at most
    /// 100000 (`limits.max_sliding_log_limit`). For token_bucket and gcra,
    /// the refill rate is `limit` per `window`, at most one unit per
    /// microsecond (`limit` ≤ the window in microseconds).
    #[schema(minimum = 1, maximum = 1_000_000_000_000_u64)]
    #[serde(deserialize_with = "whole_number")]
    pub limit: u64,
    /// Required unless `calendar` is given (one of the two).
    #[serde(default)]
    pub window: Option<WindowSpec>,
    #[serde(default)]
    pub calendar: Option<CalendarName>,
    /// The IANA time zone of `calendar`'s periods (`Europe/Berlin`,
    /// matched without regard to case), from the database built into the
    /// server. Default: UTC. Only with `calendar`; an unknown zone is 422.
    #[serde(default)]
    #[schema(max_length = 64, example = "Europe/Berlin")]
    pub timezone: Option<String>,
    /// Default: sliding_window (fixed_window with `calendar`).
    #[serde(default)]
    pub algorithm: Option<AlgorithmName>,
    /// concurrency only, and required there in place of `window`: how long
    /// a lease lives unless released or renewed, from 1ms to
    /// `limits.max_lease_ttl` (default 1h), whole milliseconds. The same
    /// forms as `window`.
    #[serde(default)]
    pub lease_ttl: Option<WindowSpec>,
    /// Units this request spends, default 1; 0 reports without spending.
    /// Must be at most `limit` (token_bucket and gcra: at most `burst`);
    /// a larger cost could never be allowed and is answered 422.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0)]
    pub cost: Option<u64>,
    /// token_bucket and gcra only (422 with another algorithm): bucket
    /// capacity, default `limit`. Refilling the whole bucket,
    /// `burst × window / limit`, must take at most 366 days.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 1, maximum = 1_000_000_000_000_u64)]
    pub burst: Option<u64>,
    /// Blocking acquire: when denied, wait up to this many milliseconds
    /// for the check to be allowed, trying again at each `retry_after_ms`;
    /// answered as soon as it is allowed, or with the denial once the time
    /// left cannot cover the next `retry_after_ms`. Nothing is spent
    /// unless allowed. Default 0: answer at once. At most `limits.max_wait`
    /// (default 10000); more is 422. Shadow and degraded answers never wait.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0, maximum = 10_000)]
    pub wait_ms: Option<u64>,
    /// Ask for a reservation, to settle this check's cost afterwards with
    /// `POST /v1/settle`: how long it can be settled, from 1ms to
    /// `limits.max_reservation_ttl` (default 1h), whole milliseconds, the
    /// same forms as `window`. An allowed answer then carries
    /// `reservation`. Not with `wait_ms`, nor on a check whose only limits
    /// are concurrency limits (422).
    #[serde(default)]
    pub reservation_ttl: Option<WindowSpec>,
}

impl From<CheckRequest> for CheckInput {
    fn from(r: CheckRequest) -> Self {
        CheckInput {
            key: r.key,
            rule: RuleInput {
                limit: r.limit,
                window: r.window.map(|w| w.0),
                calendar: r.calendar.map(|c| c.as_str().to_owned()),
                timezone: r.timezone,
                lease_ttl: r.lease_ttl.map(|w| w.0),
                algorithm: r.algorithm.map(Algorithm::from),
                burst: r.burst,
            },
            cost: r.cost,
        }
    }
}

/// The policy form: every limit of a named policy, with the key's
/// overrides. For example `{"policy": "api", "key": "k_123", "cost": 1}`.
// No schema example: it would name a policy the server may not have, and
// a tool that sends examples expects them to be accepted.
#[derive(Debug, Deserialize, ToSchema)]
pub struct PolicyCheckRequest {
    /// A policy of the loaded policies file (`GET /v1/policies` lists
    /// them). Any other name, or any name while no file is loaded, is
    /// answered 422 with code `unknown_policy`.
    #[schema(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub policy: String,
    /// The client being limited: any UTF-8, 1 to 512 bytes
    /// (`limits.max_key_bytes`). A key with an override in the policy
    /// gets the override's limits.
    #[schema(min_length = 1, max_length = 512)]
    pub key: String,
    /// Units this request spends on every limit, default 1; 0 reports
    /// without spending. At most the smallest capacity among the policy's
    /// limits (`limit`, or `burst` for token_bucket and gcra); more is 422.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0)]
    pub cost: Option<u64>,
    /// Blocking acquire: when denied, wait up to this many milliseconds
    /// for the check to be allowed, trying again at each `retry_after_ms`;
    /// answered as soon as it is allowed, or with the denial once the time
    /// left cannot cover the next `retry_after_ms`. Nothing is spent
    /// unless allowed. Default 0: answer at once. At most `limits.max_wait`
    /// (default 10000); more is 422. Shadow and degraded answers never wait.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0, maximum = 10_000)]
    pub wait_ms: Option<u64>,
    /// Ask for a reservation, to settle this check's cost afterwards with
    /// `POST /v1/settle`: how long it can be settled, from 1ms to
    /// `limits.max_reservation_ttl` (default 1h), whole milliseconds, the
    /// same forms as `window`. An allowed answer then carries
    /// `reservation`. Not with `wait_ms`, nor on a check whose only limits
    /// are concurrency limits (422).
    #[serde(default)]
    pub reservation_ttl: Option<WindowSpec>,
}

/// The inline form: several limits on one key, decided all or nothing.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"key": "k_123", "limits": [
    {"name": "burst", "algorithm": "token_bucket", "limit": 10, "window": "1s", "burst": 20},
    {"name": "daily", "algorithm": "fixed_window", "limit": 10000, "window": "1d"}
], "cost": 1}))]
pub struct InlineCheckRequest {
    /// The client being limited: any UTF-8, 1 to 512 bytes
    /// (`limits.max_key_bytes`).
    #[schema(min_length = 1, max_length = 512)]
    pub key: String,
    /// 1 to `limits.max_limits_per_check` (default 8) limits. Names are
    /// unique (a missing name is the limit's position, "0", "1", ...), and
    /// no two limits share both algorithm and window (inline state is kept
    /// by algorithm and window, so they would be one counter). The check is
    /// allowed iff every limit allows `cost`; only then does every limit
    /// spend it.
    #[schema(min_items = 1, max_items = 8)]
    pub limits: Vec<LimitSpec>,
    /// Units this request spends on every limit, default 1; 0 reports
    /// without spending. At most the smallest capacity among the limits
    /// (`limit`, or `burst` for token_bucket and gcra); more is 422.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0)]
    pub cost: Option<u64>,
    /// Blocking acquire: when denied, wait up to this many milliseconds
    /// for the check to be allowed, trying again at each `retry_after_ms`;
    /// answered as soon as it is allowed, or with the denial once the time
    /// left cannot cover the next `retry_after_ms`. Nothing is spent
    /// unless allowed. Default 0: answer at once. At most `limits.max_wait`
    /// (default 10000); more is 422. Shadow and degraded answers never wait.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0, maximum = 10_000)]
    pub wait_ms: Option<u64>,
    /// Ask for a reservation, to settle this check's cost afterwards with
    /// `POST /v1/settle`: how long it can be settled, from 1ms to
    /// `limits.max_reservation_ttl` (default 1h), whole milliseconds, the
    /// same forms as `window`. An allowed answer then carries
    /// `reservation`. Not with `wait_ms`, nor on a check whose only limits
    /// are concurrency limits (422).
    #[serde(default)]
    pub reservation_ttl: Option<WindowSpec>,
}

/// One limit of an inline check: the fields of the single-rule form, and a
/// name.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LimitSpec {
    /// `[a-z0-9_.-]{1,64}`, unique in the check. Default: the limit's
    /// position in `limits` ("0", "1", ...).
    #[serde(default)]
    #[schema(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub name: Option<String>,
    /// Units allowed per window, 1 to 1000000000000. For sliding_log at most
    /// 100000 (`limits.max_sliding_log_limit`). For token_bucket and gcra,
    /// at most one unit per microsecond (`limit` ≤ the window in µs).
    #[schema(minimum = 1, maximum = 1_000_000_000_000_u64)]
    #[serde(deserialize_with = "whole_number")]
    pub limit: u64,
    /// Required unless `calendar` is given (one of the two).
    #[serde(default)]
    pub window: Option<WindowSpec>,
    #[serde(default)]
    pub calendar: Option<CalendarName>,
    /// The IANA time zone of `calendar`'s periods (`Europe/Berlin`,
    /// matched without regard to case), from the database built into the
    /// server. Default: UTC. Only with `calendar`; an unknown zone is 422.
    #[serde(default)]
    #[schema(max_length = 64, example = "Europe/Berlin")]
    pub timezone: Option<String>,
    /// Default: sliding_window (fixed_window with `calendar`).
    #[serde(default)]
    pub algorithm: Option<AlgorithmName>,
    /// concurrency only, and required there in place of `window`: how long
    /// a lease lives unless released or renewed, from 1ms to
    /// `limits.max_lease_ttl` (default 1h). At most one concurrency limit
    /// per check.
    #[serde(default)]
    pub lease_ttl: Option<WindowSpec>,
    /// token_bucket and gcra only (422 with another algorithm): bucket
    /// capacity, default `limit`. Refilling the whole bucket,
    /// `burst × window / limit`, must take at most 366 days.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 1, maximum = 1_000_000_000_000_u64)]
    pub burst: Option<u64>,
}

impl From<LimitSpec> for LimitInput {
    fn from(l: LimitSpec) -> Self {
        LimitInput {
            name: l.name,
            rule: RuleInput {
                limit: l.limit,
                window: l.window.map(|w| w.0),
                calendar: l.calendar.map(|c| c.as_str().to_owned()),
                timezone: l.timezone,
                lease_ttl: l.lease_ttl.map(|w| w.0),
                algorithm: l.algorithm.map(Algorithm::from),
                burst: l.burst,
            },
        }
    }
}

/// Which form a body is, judged by the top-level fields it has before any
/// of them is parsed, so that each form keeps its own error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Policy,
    Inline,
    SingleRule,
    /// Several forms, each on its own key, as one (`levels.rs`).
    Levels,
    /// A policy with levels and its ids (`hierarchy.rs`).
    Hierarchy,
}

impl Form {
    /// The form of a body whose top-level field names are `fields` (`None`:
    /// not a JSON object, which the single-rule parser rejects as it always
    /// did). A field counts when present, even as `null`. Fields of two
    /// forms together are an error naming them.
    pub fn of(fields: Option<Present>) -> Result<Form, String> {
        let Some(fields) = fields else {
            return Ok(Form::SingleRule);
        };
        let has = |name: &str| fields.has(name);
        let (form, lead, others): (Form, &str, Vec<&str>) = if has("ids") {
            let mut others = vec!["key", "limits", "levels"];
            others.extend(RULE_FIELDS);
            (Form::Hierarchy, "ids", others)
        } else if has("levels") {
            let mut others = vec!["policy", "key", "limits"];
            others.extend(RULE_FIELDS);
            (Form::Levels, "levels", others)
        } else if has("policy") {
            let mut others = vec!["limits"];
            others.extend(RULE_FIELDS);
            (Form::Policy, "policy", others)
        } else if has("limits") {
            (Form::Inline, "limits", RULE_FIELDS.to_vec())
        } else {
            return Ok(Form::SingleRule);
        };
        let conflicts: Vec<String> = others
            .into_iter()
            .filter(|f| has(f))
            .map(|f| format!("`{f}`"))
            .collect();
        if conflicts.is_empty() {
            return Ok(form);
        }
        Err(format!(
            "`{lead}` cannot be combined with {}: a check is one of five forms, \
             {{\"policy\", \"key\", \"cost\"}}, {{\"key\", \"limits\", \"cost\"}}, \
             {{\"key\", \"limit\", \"window\" or \"calendar\", \"algorithm\", \"burst\", \"cost\"}}, \
             {{\"levels\", \"cost\"}} or {{\"policy\", \"ids\", \"cost\"}}",
            conflicts.join(", ")
        ))
    }
}
