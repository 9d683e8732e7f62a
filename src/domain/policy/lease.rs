//! A policy's `lease = { max_units, ttl, hot_rate }`: validated into a
//! [`LeaseMode`], and refused unless every limit the policy can apply (its
//! own and every override's) can give a reservation back exactly.

use std::collections::HashMap;
use std::sync::Arc;

use toml::Spanned;

use super::problem::Report;
use super::raw::RawLease;
use crate::domain::lease_mode::{DEFAULT_HOT_RATE, DEFAULT_TTL_US, MAX_TTL_US, MIN_TTL_US};
use crate::domain::{LeaseMode, Limit, MAX_LIMIT, WindowInput, format_duration_us};

/// The policy's lease mode, or `None` with every problem reported.
pub(super) fn build_lease(
    path: &str,
    raw: &Spanned<RawLease>,
    limits: &[Limit],
    overrides: &HashMap<String, Arc<[Limit]>>,
    report: &mut Report,
) -> Option<LeaseMode> {
    let path = format!("{path}.lease");
    let before = report.count();
    let lease = raw.get_ref();
    let max_units = u64::try_from(*lease.max_units.get_ref())
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n));
    if max_units.is_none() {
        report.add(
            format!("{path}.max_units"),
            lease.max_units.span(),
            format!(
                "must be 1 to {MAX_LIMIT}, got {}",
                lease.max_units.get_ref()
            ),
        );
    }
    let ttl_us = ttl_of(&path, lease, report);
    let hot_rate = hot_rate_of(&path, lease, report);
    let unleasable = limits
        .iter()
        .chain(overrides.values().flat_map(|l| l.iter()))
        .find(|l| !l.rule.algorithm.gives_back());
    if let Some(limit) = unleasable {
        report.add(
            path.clone(),
            raw.span(),
            format!(
                "limit {:?} is {}, which cannot lease: only fixed_window and sliding_window give \
                 a reservation back exactly (see docs/leasing.md)",
                &*limit.name,
                limit.rule.algorithm.as_str()
            ),
        );
    }
    if report.count() != before {
        return None;
    }
    Some(LeaseMode {
        max_units: max_units?,
        ttl_us: ttl_us?,
        hot_rate: hot_rate?,
    })
}

/// `ttl`: a duration within the bounds, or the default when absent.
fn ttl_of(path: &str, lease: &RawLease, report: &mut Report) -> Option<u64> {
    lease.ttl.as_ref().map_or(Some(DEFAULT_TTL_US), |ttl| {
        let us = match &ttl.get_ref().0 {
            WindowInput::Seconds(s) => s.checked_mul(1_000_000),
            WindowInput::Text(t) => crate::domain::parse_duration_us(t).ok(),
        };
        let us = us.filter(|us| (MIN_TTL_US..=MAX_TTL_US).contains(us));
        if us.is_none() {
            report.add(
                format!("{path}.ttl"),
                ttl.span(),
                format!(
                    "must be a duration from {} to {} (e.g. \"500ms\", \"2s\")",
                    format_duration_us(MIN_TTL_US),
                    format_duration_us(MAX_TTL_US)
                ),
            );
        }
        us
    })
}

/// `hot_rate`: at least 1 unit per second, or the default when absent.
fn hot_rate_of(path: &str, lease: &RawLease, report: &mut Report) -> Option<u64> {
    lease
        .hot_rate
        .as_ref()
        .map_or(Some(DEFAULT_HOT_RATE), |rate| {
            let found = u64::try_from(*rate.get_ref()).ok().filter(|r| *r >= 1);
            if found.is_none() {
                report.add(
                    format!("{path}.hot_rate"),
                    rate.span(),
                    format!("must be at least 1 unit per second, got {}", rate.get_ref()),
                );
            }
            found
        })
}
