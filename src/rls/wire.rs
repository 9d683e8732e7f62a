//! The `ShouldRateLimit` request as it comes off the wire: prost types of
//! our own that mirror `envoy.service.ratelimit.v3.RateLimitRequest` field
//! for field, except that a descriptor entry's key and value are `bytes`.
//!
//! Why not envoy-types' generated types: their `string` fields make prost
//! refuse a value that is not UTF-8, which fails the whole call (INTERNAL)
//! before any of our code runs. Envoy copies a header's bytes into those
//! strings as the client sent them (HTTP/1.1 allows 0x80-0xFF in values),
//! and answers an error by letting the request through with no limit at
//! all (`failure_mode_deny: false`, its default). `string` and `bytes` are
//! the same on the wire, so these decode every request Envoy sends, and
//! the bytes reach the planner unchanged (see `domain::rls::scope_of`).
//! The domain stays a `string`: only Envoy's own config sets it.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::google::protobuf::UInt64Value;

use crate::domain::rls::{DescriptorInput, InvalidRequest, Unit};

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor` (its other
/// messages hold no strings, so they are envoy-types' own).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

/// `RateLimitDescriptor.Entry`, read as bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Entry {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

impl RateLimitDescriptor {
    /// The planner's input for `descriptors[i]`.
    pub(super) fn into_input(self, i: usize) -> Result<DescriptorInput, InvalidRequest> {
        if self.is_negative_hits {
            // Only Envoy's config sets it (`HitsAddend.is_negative_hits`).
            return Err(InvalidRequest(format!(
                "descriptors[{i}]: is_negative_hits is not supported"
            )));
        }
        // An unknown unit is the domain's to refuse, for this descriptor only.
        let override_limit = self
            .limit
            .map(|o| (u64::from(o.requests_per_unit), unit_of(o.unit)));
        Ok(DescriptorInput {
            entries: self.entries.into_iter().map(|e| (e.key, e.value)).collect(),
            override_limit,
            hits_addend: self.hits_addend.map(|h| h.value),
        })
    }
}

/// The proto's unit numbers (WEEK was added after YEAR, hence 7).
fn unit_of(n: i32) -> Option<Unit> {
    Some(match n {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        7 => Unit::Week,
        _ => return None,
    })
}
