//! Readers of the small sections and value shapes: `[breaker]`, `[auth]`,
//! listen addresses and bounded integers.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::reader::Reader;
use super::{AuthSettings, GrpcSettings};
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
    let protect_metrics = r.parse("auth.protect_metrics", |s| match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("must be true or false".into()),
    });
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
pub(super) const MAX_WAIT_US: u64 = 3_600_000_000;

pub(super) fn int_in(s: &str, min: u64, max: u64) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!("must be a whole number from {min} to {max}")),
    }
}
