//! Startup bounds that depend on each other or on the process: the two
//! listeners' connection caps under the open-files limit, and the waiters'
//! cap under the connection cap. Each is lowered, with a warning, rather
//! than left to fail under load.

use tracing::{info, warn};

use crate::config::{RedisSettings, Settings};
use crate::http::server::PROBE_RESERVE;
use crate::listener::fds::{self, BASE_RESERVE, Caps};

/// Raises the open-files limit, then lowers what does not fit.
pub(super) fn apply(settings: &mut Settings) {
    fit_open_files(settings);
    leave_connections_to_others(settings);
}

/// File descriptors held for Redis: each pooled client's connection and
/// the invalidation subscriber's, plus a few for sentinels and probes. A
/// cluster client connects to every primary, counted as up to 8.
fn redis_reserve(redis: Option<&RedisSettings>) -> usize {
    let Some(redis) = redis else { return 0 };
    let per_node = redis.pool_size + 1;
    // redis-cluster://, rediss-cluster://, valkey(s)-cluster://.
    if redis.url.contains("-cluster://") {
        per_node * 8 + 4
    } else {
        per_node + 4
    }
}

fn fit_open_files(settings: &mut Settings) {
    let Some(limit) = fds::raise_fd_limit() else {
        warn!("cannot read the open-files limit; the connection caps are not checked against it");
        return;
    };
    let reserve = BASE_RESERVE + PROBE_RESERVE + redis_reserve(settings.redis.as_ref());
    let caps = Caps {
        http: settings.server.max_connections,
        grpc: settings.grpc.listen.map(|_| settings.grpc.max_connections),
    };
    let fitted = fds::fit(limit, caps, reserve);
    info!(
        open_files_limit = limit,
        max_connections = fitted.http,
        grpc_max_connections = fitted.grpc,
        reserve,
        "open-files limit is {limit}"
    );
    if fitted != caps {
        let (asked, lowered) = match (caps.grpc, fitted.grpc) {
            (Some(grpc), Some(to)) => (
                format!(
                    "server.max_connections ({}) + grpc.max_connections ({grpc})",
                    caps.http
                ),
                format!("{} and {to}", fitted.http),
            ),
            _ => (
                format!("server.max_connections ({})", caps.http),
                fitted.http.to_string(),
            ),
        };
        warn!(
            open_files_limit = limit,
            reserve,
            server_max_connections = fitted.http,
            grpc_max_connections = fitted.grpc,
            "the open-files limit ({limit}) is below {asked} + {reserve} kept for Redis, \
             reloading files and probes: lowered to {lowered}, so that a flood meets a cap \
             before it runs out of file descriptors; raise the limit (ulimit -n, \
             LimitNOFILE) or lower the caps"
        );
    }
    settings.server.max_connections = fitted.http;
    if let Some(grpc) = fitted.grpc {
        settings.grpc.max_connections = grpc;
    }
}

/// Waiters hold their connections: at most half of `server.max_connections`,
/// so that they can never take every connection from plain checks.
fn leave_connections_to_others(settings: &mut Settings) {
    let most = settings.server.max_connections / 2;
    let limits = &mut settings.limits.bounds;
    if limits.max_waiters > most {
        warn!(
            max_waiters = limits.max_waiters,
            lowered_to = most,
            "limits.max_waiters ({}) is above half of server.max_connections ({}): lowered \
             to {most}, so that waiting checks leave connections to the others",
            limits.max_waiters,
            settings.server.max_connections,
        );
        limits.max_waiters = most;
    }
}
