//! The sections that bound work and say what happens when the store
//! fails: `[limits]`, `[top]`, `[deny_cache]`, `[memory]`, `[failure]` and
//! `[breaker]`, each read by one function that names each key once.

use std::time::Duration;

use super::reader::Reader;
use crate::domain::{Bounds, FailureMode, FailurePolicy, parse_duration_us};
use crate::limiter::breaker::BreakerConfig;

/// `[limits]`.
#[derive(Debug, Clone, Copy)]
pub struct LimitsSettings {
    /// What one check may ask (every key of `[limits]` but the two below).
    pub bounds: Bounds,
    /// Most checks in one `POST /v1/checks`. Beside `bounds` rather than in
    /// it: the domain validates a check against [`Bounds`], and a batch is
    /// only the HTTP transport's envelope.
    pub max_batch: usize,
    /// Most (policy, key) pairs whose rate is tracked for hot-key leasing
    /// (`limiter::lease`); 0: nothing leases.
    pub max_lease_keys: usize,
}

/// `[top]`: the heavy-hitters sketches.
#[derive(Debug, Clone, Copy)]
pub struct TopSettings {
    /// Counters per sketch and slice; 0: off.
    pub capacity: usize,
    /// Most sketches at once.
    pub max_sets: usize,
}

/// `[deny_cache]`.
#[derive(Debug, Clone, Copy)]
pub struct DenyCacheSettings {
    /// Entries of the local deny cache; 0 turns it off.
    pub capacity: usize,
}

/// `[memory]`: the embedded store.
#[derive(Debug, Clone)]
pub struct MemorySettings {
    pub sweep_interval: Duration,
    /// At most about this many keys; new keys beyond it get the failure policy.
    pub max_keys: usize,
}

/// Longest `limits.max_wait`.
const MAX_WAIT_US: u64 = 3_600_000_000;
/// Longest `limits.max_lease_ttl` and `limits.max_reservation_ttl`: a day
/// bounds how long a crashed holder keeps its slot, and how late a settle
/// can come.
const MAX_TTL_US: u64 = 86_400_000_000;

/// Whole milliseconds from 1ms to a day, as every lease_ttl and
/// reservation_ttl is.
fn whole_ms_up_to_a_day(s: &str) -> Result<u64, String> {
    match parse_duration_us(s) {
        Ok(us) if (1_000..=MAX_TTL_US).contains(&us) && us % 1_000 == 0 => Ok(us),
        Ok(_) => Err("must be whole milliseconds from 1ms to 1d".to_string()),
        Err(m) => Err(m),
    }
}

pub(super) fn read_limits(r: &mut Reader) -> Option<LimitsSettings> {
    let max_key_bytes = r.count("limits.max_key_bytes", 1, 65_536);
    // A sliding log's memory no longer grows with its limit (at most 127
    // entries), so any valid limit may be allowed.
    let max_sliding_log_limit = r.int("limits.max_sliding_log_limit", 1, crate::domain::MAX_LIMIT);
    // The bound on one script call's work: each limit is a few Redis
    // commands.
    let max_limits_per_check = r.count("limits.max_limits_per_check", 1, 32);
    // "0s" turns waiting off (any wait_ms above 0 is refused); a waiter
    // holds a connection, so an hour is plenty.
    let max_wait_ms = r.parse("limits.max_wait", |s| match parse_duration_us(s) {
        Ok(us) if us <= MAX_WAIT_US => Ok(us / 1_000),
        Ok(_) => Err("must be at most 1h".to_string()),
        Err(m) => Err(m),
    });
    let max_waiters = r.count("limits.max_waiters", 0, 10_000_000);
    let max_waiters_per_key = r.count("limits.max_waiters_per_key", 0, 10_000_000);
    // The batch body's cap grows with it (4 KiB a check, see
    // `http::batch_body_limit`): 1000 is a 4 MiB body.
    let max_batch = r.count("limits.max_batch", 1, 1_000);
    // Each tracked (policy, key) is a slot of about 200 bytes; 0: no leasing.
    let max_lease_keys = r.count("limits.max_lease_keys", 0, 1_000_000);
    let max_lease_ttl_us = r.parse("limits.max_lease_ttl", whole_ms_up_to_a_day);
    // A reservation is one small record per allowed check that asked for one.
    let max_reservation_ttl_us = r.parse("limits.max_reservation_ttl", whole_ms_up_to_a_day);
    // One key's leases are one sorted set of at most this many members,
    // and every acquire counts them (ZCOUNT, O(log n)).
    let max_concurrency = r.int("limits.max_concurrency", 1, 100_000);
    Some(LimitsSettings {
        bounds: Bounds {
            max_key_bytes: max_key_bytes?,
            max_sliding_log_limit: max_sliding_log_limit?,
            max_limits_per_check: max_limits_per_check?,
            max_wait_ms: max_wait_ms?,
            max_waiters: max_waiters?,
            max_waiters_per_key: max_waiters_per_key?,
            max_lease_ttl_us: max_lease_ttl_us?,
            max_reservation_ttl_us: max_reservation_ttl_us?,
            max_concurrency: max_concurrency?,
        },
        max_batch: max_batch?,
        max_lease_keys: max_lease_keys?,
    })
}

pub(super) fn read_top(r: &mut Reader) -> Option<TopSettings> {
    let capacity = r.count("top.capacity", 0, 65_536);
    let max_sets = r.count("top.max_sets", 1, 100_000);
    Some(TopSettings {
        capacity: capacity?,
        max_sets: max_sets?,
    })
}

pub(super) fn read_deny_cache(r: &mut Reader) -> Option<DenyCacheSettings> {
    let capacity = r.count("deny_cache.capacity", 0, 100_000_000);
    Some(DenyCacheSettings {
        capacity: capacity?,
    })
}

pub(super) fn read_memory(r: &mut Reader) -> Option<MemorySettings> {
    let sweep_interval = r.duration("memory.sweep_interval");
    let max_keys = r.count("memory.max_keys", 64, 1_000_000_000);
    Some(MemorySettings {
        sweep_interval: sweep_interval?,
        max_keys: max_keys?,
    })
}

pub(super) fn read_failure(r: &mut Reader) -> Option<FailurePolicy> {
    let mode = r.parse("failure.mode", |s| match s {
        "open" => Ok(FailureMode::Open),
        "closed" => Ok(FailureMode::Closed),
        "local" => Ok(FailureMode::Local),
        _ => Err("must be \"open\", \"closed\" or \"local\"".into()),
    });
    let closed_retry_after = r.duration("failure.closed_retry_after");
    Some(FailurePolicy {
        mode: mode?,
        closed_retry_after: closed_retry_after?,
    })
}

/// `[breaker]`; its `trial_interval` is `redis.probe_interval`, set when
/// the application is built.
pub(super) fn read_breaker(r: &mut Reader) -> Option<BreakerConfig> {
    let consecutive = r.int("breaker.consecutive_failures", 1, 1_000_000);
    let ratio = r.parse("breaker.failure_ratio", |s| match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err("must be a number above 0 and at most 1, e.g. 0.5".into()),
    });
    let interval = r.duration("breaker.interval");
    let min_calls = r.int("breaker.min_calls", 1, 1_000_000);
    let open_for = r.duration("breaker.open_for");
    Some(BreakerConfig {
        consecutive_failures: consecutive? as u32,
        failure_ratio: ratio?,
        interval: interval?,
        min_calls: min_calls? as u32,
        open_for: open_for?,
        ..BreakerConfig::default()
    })
}
