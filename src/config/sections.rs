//! Readers of the small sections and value shapes: `[limits]`,
//! `[breaker]`, `[auth]`, listen addresses and bounded integers.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::reader::Reader;
use super::{AuthSettings, GrpcSettings};
use crate::domain::{Bounds, parse_duration_us};
use crate::limiter::breaker::BreakerConfig;

pub(super) fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .map_err(|_| "must be an address with a port, e.g. 127.0.0.1:8080".into())
}

/// The `[breaker]` section; `None` when any key is invalid.
pub(super) fn read_breaker(r: &mut Reader) -> Option<BreakerConfig> {
    let consecutive = r.parse("breaker.consecutive_failures", |s| int_in(s, 1, 1_000_000));
    let ratio = r.parse("breaker.failure_ratio", |s| match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err("must be a number above 0 and at most 1, e.g. 0.5".into()),
    });
    let interval = r.duration("breaker.interval");
    let min_calls = r.parse("breaker.min_calls", |s| int_in(s, 1, 1_000_000));
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

/// The gRPC listener's bounds; `None` when any key is invalid.
pub(super) fn read_grpc(r: &mut Reader) -> Option<GrpcSettings> {
    let max_connections = r.parse("grpc.max_connections", |s| int_in(s, 1, 10_000_000));
    let handshake_timeout = r.duration("grpc.handshake_timeout");
    let idle_timeout = r.duration("grpc.idle_timeout");
    Some(GrpcSettings {
        max_connections: max_connections? as usize,
        handshake_timeout: handshake_timeout?,
        idle_timeout: idle_timeout?,
    })
}

/// The `[auth]` section; `None` when a key is invalid.
pub(super) fn read_auth(r: &mut Reader) -> Option<AuthSettings> {
    let tokens_file = r.parse("auth.tokens_file", |s| {
        Ok::<_, String>((!s.is_empty()).then(|| PathBuf::from(s)))
    });
    let protect_metrics = r.boolean("auth.protect_metrics");
    let (tokens_file, protect_metrics) = (tokens_file?, protect_metrics?);
    if protect_metrics && tokens_file.is_none() {
        // Without tokens nothing is protected: refuse rather than leave
        // /metrics open while the setting says otherwise.
        r.problems
            .push("auth.protect_metrics: needs auth.tokens_file (no tokens, no protection)".into());
        return None;
    }
    Some(AuthSettings {
        tokens_file,
        protect_metrics,
    })
}

/// Longest `limits.max_wait`.
const MAX_WAIT_US: u64 = 3_600_000_000;
/// Longest `limits.max_lease_ttl`: a day bounds how long a crashed
/// holder keeps its slot.
const MAX_LEASE_TTL_US: u64 = 86_400_000_000;

/// The `[limits]` section: the bounds on a check, and `limits.max_batch`;
/// each `None` when a key of it is invalid.
pub(super) fn read_limits(r: &mut Reader) -> (Option<Bounds>, Option<u64>, Option<u64>) {
    let max_key_bytes = r.parse("limits.max_key_bytes", |s| int_in(s, 1, 65_536));
    // A sliding log's memory no longer grows with its limit (at most 127
    // entries), so any valid limit may be allowed.
    let max_sliding_log_limit = r.parse("limits.max_sliding_log_limit", |s| {
        int_in(s, 1, crate::domain::MAX_LIMIT)
    });
    // The bound on one script call's work: each limit is a few Redis
    // commands.
    let max_limits_per_check = r.parse("limits.max_limits_per_check", |s| int_in(s, 1, 32));
    // "0s" turns waiting off (any wait_ms above 0 is refused); a waiter
    // holds a connection, so an hour is plenty.
    let max_wait_ms = r.parse("limits.max_wait", |s| match parse_duration_us(s) {
        Ok(us) if us <= MAX_WAIT_US => Ok(us / 1_000),
        Ok(_) => Err("must be at most 1h".to_string()),
        Err(m) => Err(m),
    });
    let max_waiters = r.parse("limits.max_waiters", |s| int_in(s, 0, 10_000_000));
    let max_waiters_per_key = r.parse("limits.max_waiters_per_key", |s| int_in(s, 0, 10_000_000));
    // The batch body's cap grows with it (4 KiB a check, see
    // `http::batch_body_limit`): 1000 is a 4 MiB body.
    let max_batch = r.parse("limits.max_batch", |s| int_in(s, 1, 1_000));
    // Each tracked (policy, key) is a slot of about 200 bytes; 0: no leasing.
    let max_lease_keys = r.parse("limits.max_lease_keys", |s| int_in(s, 0, 1_000_000));
    // Whole milliseconds, as every lease_ttl is.
    let max_lease_ttl_us = r.parse("limits.max_lease_ttl", |s| match parse_duration_us(s) {
        Ok(us) if (1_000..=MAX_LEASE_TTL_US).contains(&us) && us % 1_000 == 0 => Ok(us),
        Ok(_) => Err("must be whole milliseconds from 1ms to 1d".to_string()),
        Err(m) => Err(m),
    });
    // A reservation is one small record per allowed check that asked for
    // one; a day bounds how long a settle can come.
    let max_reservation_ttl_us =
        r.parse("limits.max_reservation_ttl", |s| {
            match parse_duration_us(s) {
                Ok(us) if (1_000..=MAX_LEASE_TTL_US).contains(&us) && us % 1_000 == 0 => Ok(us),
                Ok(_) => Err("must be whole milliseconds from 1ms to 1d".to_string()),
                Err(m) => Err(m),
            }
        });
    // One key's leases are one sorted set of at most this many members,
    // and every acquire counts them (ZCOUNT, O(log n)).
    let max_concurrency = r.parse("limits.max_concurrency", |s| int_in(s, 1, 100_000));
    let bounds = (|| {
        Some(Bounds {
            max_key_bytes: max_key_bytes? as usize,
            max_sliding_log_limit: max_sliding_log_limit?,
            max_limits_per_check: max_limits_per_check? as usize,
            max_wait_ms: max_wait_ms?,
            max_waiters: max_waiters? as usize,
            max_waiters_per_key: max_waiters_per_key? as usize,
            max_lease_ttl_us: max_lease_ttl_us?,
            max_reservation_ttl_us: max_reservation_ttl_us?,
            max_concurrency: max_concurrency?,
        })
    })();
    (bounds, max_batch, max_lease_keys)
}

pub(super) fn int_in(s: &str, min: u64, max: u64) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!("must be a whole number from {min} to {max}")),
    }
}
