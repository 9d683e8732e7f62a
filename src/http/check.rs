//! `POST /v1/check`: the request and response as they travel over HTTP,
//! converted to and from the domain's types.

use std::fmt;

use axum::Json;
use std::time::Instant;

use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiJson, ErrorBody};
use crate::domain::{Algorithm, Check, CheckInput, Decision, RuleInput, WindowInput};

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
    pub window: WindowSpec,
    /// Default: sliding_window.
    #[serde(default)]
    pub algorithm: Option<AlgorithmName>,
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
}

/// JSON Schema's `integer` includes numbers written with a zero fraction
/// (`100.0`), and clients (JavaScript, Python's json of a float) send them;
/// accept those, and nothing with a fraction.
fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_any(WholeNumber)
}

fn optional_whole_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    Option::<Whole>::deserialize(deserializer).map(|v| v.map(|Whole(n)| n))
}

struct Whole(u64);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        whole_number(deserializer).map(Whole)
    }
}

struct WholeNumber;

impl Visitor<'_> for WholeNumber {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative whole number")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        whole_f64(v).ok_or_else(|| E::invalid_value(de::Unexpected::Float(v), &self))
    }
}

/// `v` as a u64 if it is a whole number that a u64 holds exactly.
fn whole_f64(v: f64) -> Option<u64> {
    // 2^64 as f64; anything at or above it does not fit.
    const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
    (v.is_finite() && v.fract() == 0.0 && (0.0..TWO_POW_64).contains(&v)).then_some(v as u64)
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmName {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    Gcra,
}

impl From<AlgorithmName> for Algorithm {
    fn from(name: AlgorithmName) -> Self {
        match name {
            AlgorithmName::FixedWindow => Algorithm::FixedWindow,
            AlgorithmName::SlidingWindow => Algorithm::SlidingWindow,
            AlgorithmName::SlidingLog => Algorithm::SlidingLog,
            AlgorithmName::TokenBucket => Algorithm::TokenBucket,
            AlgorithmName::Gcra => Algorithm::Gcra,
        }
    }
}

/// A window: `"250ms"`, `"10s"`, `"1m"`, `"1h"`, `"1d"`, or an integer
/// number of seconds. From 1 ms to 366 days.
#[derive(Debug, Clone)]
pub struct WindowSpec(WindowInput);

impl<'de> Deserialize<'de> for WindowSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WindowVisitor;
        impl Visitor<'_> for WindowVisitor {
            type Value = WindowSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"250ms\", \"10s\", \"1m\", \"1h\", \"1d\", or a positive integer number of seconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<WindowSpec, E> {
                Ok(WindowSpec(WindowInput::Seconds(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<WindowSpec, E> {
                u64::try_from(v)
                    .map(|v| WindowSpec(WindowInput::Seconds(v)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<WindowSpec, E> {
                whole_f64(v)
                    .map(|v| WindowSpec(WindowInput::Seconds(v)))
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Float(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<WindowSpec, E> {
                Ok(WindowSpec(WindowInput::Text(v.to_owned())))
            }
        }
        deserializer.deserialize_any(WindowVisitor)
    }
}

impl PartialSchema for WindowSpec {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some("^[0-9]+(ms|s|m|h|d)$"))
                    .description(Some("A whole number and a unit: ms, s, m, h or d.")),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(31_622_400))
                    .description(Some("Seconds.")),
            )
            .description(Some("The window, from 1ms to 366d."))
            .examples([serde_json::json!("1m")])
            .into()
    }
}

impl ToSchema for WindowSpec {}

impl From<CheckRequest> for CheckInput {
    fn from(r: CheckRequest) -> Self {
        CheckInput {
            key: r.key,
            rule: RuleInput {
                limit: r.limit,
                window: r.window.0,
                algorithm: r.algorithm.map(Algorithm::from),
                burst: r.burst,
            },
            cost: r.cost,
        }
    }
}

/// The decision. Sent with status 200 whether allowed or not.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"allowed": true, "limit": 100, "remaining": 99, "retry_after_ms": 0, "reset_after_ms": 60000, "degraded": false}))]
pub struct CheckResponse {
    pub allowed: bool,
    pub limit: u64,
    /// Units still available after this request; never negative.
    pub remaining: u64,
    /// 0 when allowed. When denied, the smallest wait after which the same
    /// request would be allowed if nothing else arrives.
    pub retry_after_ms: u64,
    /// Time until the key is back to full capacity if nothing else arrives.
    pub reset_after_ms: u64,
    /// True when the failure policy answered because the store was
    /// unreachable or too slow.
    pub degraded: bool,
}

impl From<&Decision> for CheckResponse {
    fn from(d: &Decision) -> Self {
        CheckResponse {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_ms: d.retry_after_ms,
            reset_after_ms: d.reset_after_ms,
            degraded: d.degraded,
        }
    }
}

/// Check a rate limit and, if allowed, spend from it.
#[utoipa::path(
    post,
    path = "/v1/check",
    tag = "limits",
    request_body(content = CheckRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The decision, allowed or not. Denied responses carry Retry-After.", body = CheckResponse,
            headers(
                ("RateLimit-Policy" = String, description = "\"default\";q=<limit>;w=<window seconds>"),
                ("RateLimit" = String, description = "\"default\";r=<remaining>;t=<seconds until reset>"),
                ("X-RateLimit-Limit" = u64, description = "The limit"),
                ("X-RateLimit-Remaining" = u64, description = "Units remaining"),
                ("X-RateLimit-Reset" = u64, description = "Seconds until full capacity"),
                ("Retry-After" = u64, description = "When denied: seconds to wait, rounded up"),
            )),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "A field is missing, of the wrong type or out of range", body = ErrorBody),
        (status = 500, description = "The store answered with an error that is not an outage", body = ErrorBody),
    )
)]
pub async fn check(State(state): State<AppState>, request: Request) -> Response {
    // Timed here rather than in a middleware layer: profiling showed the
    // layer's per-request boxing, and the body is parsed inside this
    // function, so parsing and error answers are still counted.
    let started = Instant::now();
    let response = match decide(&state, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    state
        .metrics
        .check_duration
        .observe(started.elapsed().as_secs_f64());
    response
}

async fn decide(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let ApiJson(request) = ApiJson::<CheckRequest>::from_request(request, state).await?;
    let check = Check::new(request.into(), &state.bounds)?;
    let decision = state.limiter.check(&check).await?;
    let mut response = Json(CheckResponse::from(&decision)).into_response();
    let headers = response.headers_mut();
    for (name, value) in decision.headers() {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    Ok(response)
}
