//! The scalar fields shared by the single-rule form and the inline form's
//! limits: whole numbers, algorithm names, windows.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::domain::{Algorithm, WindowInput};

/// JSON Schema's `integer` includes numbers written with a zero fraction
/// (`100.0`), and clients (JavaScript, Python's json of a float) send them;
/// accept those, and nothing with a fraction.
pub(super) fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_any(WholeNumber)
}

pub(super) fn optional_whole_number<'de, D: Deserializer<'de>>(
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
    /// At most `limit` in flight: an allowed check takes a lease (answered
    /// as `lease`), held until released (`POST /v1/release`) or its
    /// `lease_ttl` passes.
    Concurrency,
}

impl From<AlgorithmName> for Algorithm {
    fn from(name: AlgorithmName) -> Self {
        match name {
            AlgorithmName::FixedWindow => Algorithm::FixedWindow,
            AlgorithmName::SlidingWindow => Algorithm::SlidingWindow,
            AlgorithmName::SlidingLog => Algorithm::SlidingLog,
            AlgorithmName::TokenBucket => Algorithm::TokenBucket,
            AlgorithmName::Gcra => Algorithm::Gcra,
            AlgorithmName::Concurrency => Algorithm::Concurrency,
        }
    }
}

/// Calendar periods instead of a window: a fixed window per local day
/// (midnight to midnight, 23 or 25 hours across DST changes), ISO week
/// (from Monday), month or year (from 1 January), in `timezone`.
/// fixed_window only. Exclusive with `window`.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CalendarName {
    Day,
    Week,
    Month,
    Year,
}

impl CalendarName {
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarName::Day => "day",
            CalendarName::Week => "week",
            CalendarName::Month => "month",
            CalendarName::Year => "year",
        }
    }
}

/// A window: `"250ms"`, `"10s"`, `"1m"`, `"1h"`, `"1d"`, or an integer
/// number of seconds. From 1 ms to 366 days.
#[derive(Debug, Clone)]
pub struct WindowSpec(pub(crate) WindowInput);

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
