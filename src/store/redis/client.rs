//! How every client of the store is built: the configuration the URL
//! describes, the pool with its timeouts and attempts, TCP's own timeout
//! and the reconnect policy (the module doc of `mod.rs` says why each).

use std::time::Duration;

use fred::prelude::*;

use super::RedisSettings;
use crate::store::StoreError;

/// A pool of `settings.pool_size` clients for `config`, with the timeouts,
/// attempts and reconnect policy described in the module doc. Connecting
/// is left to the caller.
pub(super) fn build_pool(config: Config, settings: &RedisSettings) -> Result<Pool, StoreError> {
    let max_delay = settings
        .reconnect_max_delay
        .as_millis()
        .min(u32::MAX as u128) as u32;
    Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = settings.timeout)
        .with_connection_config(|c| {
            c.max_command_attempts = 1;
            c.connection_timeout = settings.timeout.max(Duration::from_millis(500));
            c.internal_command_timeout = settings.timeout.max(Duration::from_millis(500));
            c.tcp = tcp_config(settings);
        })
        .set_policy(reconnect_policy(max_delay))
        .build_pool(settings.pool_size.max(1))
        .map_err(|e| StoreError::Backend(e.to_string()))
}

/// Without this, data sent down a path that silently died sits
/// unacknowledged until TCP's own retransmissions give up, 15 minutes by
/// default on Linux; with it the kernel closes the socket and fred
/// reconnects. A backstop to `liveness.rs` (which sees a silent connection
/// first) for a client stuck writing into a full socket buffer; at least
/// a second, so one lost packet's retransmission never cuts a connection.
pub(super) fn tcp_config(settings: &RedisSettings) -> fred::types::config::TcpConfig {
    fred::types::config::TcpConfig {
        user_timeout: Some(settings.unresponsive_timeout.max(Duration::from_secs(1))),
        ..Default::default()
    }
}

/// The client configuration `settings.url` describes, for every client of
/// the store.
pub(super) fn client_config(settings: &RedisSettings) -> Result<Config, StoreError> {
    let uses_tls = super::tls::url_uses_tls(&settings.url);
    // fred is handed the URL without its TLS `s`: given `rediss`, it would
    // build a TLS config of its own from the system's roots (and fail if
    // any of them is unreadable); ours is set below.
    let url = settings.url.replacen("rediss", "redis", uses_tls as usize);
    let mut config = Config {
        fail_fast: false,
        ..Config::from_url(&url).map_err(|e| StoreError::Backend(e.to_string()))?
    };
    config.tls = match (&settings.tls, uses_tls) {
        (Some(tls), true) => Some(tls.fred_config()),
        (None, true) => Some(
            super::tls::TlsClient::load(Default::default())
                .map_err(|e| StoreError::Backend(e.to_string()))?
                .fred_config(),
        ),
        // Never a silent downgrade: TLS settings with a plain URL.
        (Some(_), false) => {
            return Err(StoreError::Backend(
                "TLS settings given for a URL without TLS: use rediss://".into(),
            ));
        }
        (None, false) => None,
    };
    // Rediscover a cluster through every node it last knew, not only the
    // URL's: with the default, a client whose URL node dies stays down
    // for good, even after a replica has taken over (fred only retries
    // the configured endpoint). Not a cluster: nothing to set.
    let _ = config
        .server
        .set_cluster_discovery_policy(fred::types::config::ClusterDiscoveryPolicy::UseCache);
    Ok(config)
}

/// Reconnect soon after a drop, then back off: a restart is over in tens of
/// milliseconds, and every check sent meanwhile waits for its connection
/// (or times out). fred's defaults, a 50 ms first delay plus up to 100 ms of
/// jitter, kept checks waiting 50–150 ms after a 25 ms restart, long enough
/// for the queued ones to time out; some jitter still spreads the
/// reconnects of many instances.
pub(super) fn reconnect_policy(max_delay_ms: u32) -> ReconnectPolicy {
    let mut policy = ReconnectPolicy::new_exponential(0, 10, max_delay_ms.max(10), 2);
    policy.set_jitter(10);
    policy
}
