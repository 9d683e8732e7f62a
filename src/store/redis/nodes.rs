//! One client pool per cluster primary, for the checks.
//!
//! Why not fred's cluster client: while it reconnects to any one node, it
//! routes no command at all (its reconnect loop runs in the task that
//! routes), so one dead primary would time out the checks of every healthy
//! one until a replica took over. The cluster client still discovers the
//! topology (`domains.rs`); each check goes to a plain client of the node
//! that owns its slot, so one node's outage stays its own.

use std::collections::HashMap;
use std::sync::RwLock;

use fred::prelude::*;
use fred::types::config::Server;

use super::{RedisSettings, build_pool};
use crate::store::StoreError;
use crate::tasks::Tasks;

pub(super) struct Nodes {
    /// The store's tasks: closing a gone node's pool is joined at `quit`.
    tasks: Tasks,
    pools: RwLock<HashMap<Server, Pool>>,
    /// The cluster client's config: credentials, TLS, timeouts.
    template: Config,
    settings: RedisSettings,
}

impl Nodes {
    pub(super) fn new(template: Config, settings: RedisSettings, tasks: Tasks) -> Nodes {
        Nodes {
            tasks,
            pools: RwLock::new(HashMap::new()),
            template,
            settings,
        }
    }

    /// The pool of `server` once any of its clients is connected (calls
    /// take a connected one). Otherwise `None`, and the caller uses the
    /// cluster client: a check queued behind a connection being set up
    /// would only time out. Not "all connected": one lost connection to a
    /// healthy node would send its checks to the cluster client, which
    /// sends nothing at all while it reconnects to any node. Read-only: only
    /// [`retain`](Self::retain) creates pools, so a check routed by a table
    /// just replaced cannot set one up for a node no longer owning slots.
    pub(super) fn connected(&self, server: &Server) -> Option<Pool> {
        let pools = self.read();
        let pool = pools.get(server)?;
        pool.clients()
            .iter()
            .any(|c| c.is_connected())
            .then(|| pool.clone())
    }

    fn create(&self, server: &Server) -> Result<Pool, StoreError> {
        let mut pools = self.pools.write().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = pools.get(server) {
            return Ok(pool.clone());
        }
        let config = Config {
            server: ServerConfig::Centralized {
                server: server.clone(),
            },
            ..self.template.clone()
        };
        let pool = build_pool(config, &self.settings)?;
        // The connection tasks end when `retain` or `quit_all` closes the pool.
        drop(pool.connect_pool());
        pools.insert(server.clone(), pool.clone());
        Ok(pool)
    }

    /// Starts connecting to every node that owns slots, so checks find its
    /// pool ready, and closes the pools of nodes that no longer own any (a
    /// failed primary demoted or gone), so they stop reconnecting.
    pub(super) fn retain(&self, owners: &[Server]) {
        for owner in owners {
            if let Err(error) = self.create(owner) {
                tracing::warn!(%error, "cannot set up a client for a cluster node");
            }
        }
        let mut pools = self.pools.write().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<Server> = pools
            .keys()
            .filter(|server| !owners.contains(server))
            .cloned()
            .collect();
        for server in gone {
            if let Some(pool) = pools.remove(&server) {
                self.tasks.spawn(async move {
                    let _ = pool.quit().await;
                });
            }
        }
    }

    pub(super) async fn quit_all(&self) {
        let pools: Vec<Pool> = self.read().values().cloned().collect();
        for pool in pools {
            let _ = pool.quit().await;
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Server, Pool>> {
        self.pools.read().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::DEFAULT_MAX_IN_FLIGHT;
    use std::time::Duration;

    #[tokio::test]
    async fn asking_for_an_unknown_node_creates_no_pool() {
        let options = RedisSettings {
            url: String::new(),
            key_prefix: "rk:".into(),
            timeout: Duration::from_millis(100),
            pool_size: 1,
            reconnect_max_delay: Duration::from_millis(100),
            unresponsive_timeout: Duration::from_millis(500),
            probe_interval: Duration::from_millis(250),
            batch_window: Duration::ZERO,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            legacy_keys: false,
            tls: None,
        };
        let nodes = Nodes::new(Config::default(), options, Tasks::new());
        let gone = Server::new("127.0.0.1", 1);
        assert!(nodes.connected(&gone).is_none());
        assert!(nodes.read().is_empty(), "no pool reconnecting to it");
    }
}
