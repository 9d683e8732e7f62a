//! Failure domains in a cluster: which primary owns a check's slot, so the
//! limiter can keep one circuit breaker per node. Read from fred's cached
//! cluster routing, copied into a small table of slot ranges that the hot
//! path searches under a read lock without allocating. fred's cluster
//! change and reconnect events mark the copy stale; the next lookup
//! refreshes it. The same table routes checks to the node pools
//! (`nodes.rs`).

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use fred::prelude::*;
use fred::types::cluster::ClusterRouting;
use fred::types::config::Server;
use tokio::sync::broadcast::error::RecvError;

use super::nodes::Nodes;

pub(super) struct Domains {
    /// `(first slot, last slot, domain, primary)`, sorted by slot.
    ranges: RwLock<Vec<(u16, u16, u64, Server)>>,
    stale: Arc<AtomicBool>,
    nodes: Nodes,
}

impl Domains {
    /// Starts listening to `pool`'s cluster events. The listeners hold only
    /// event receivers, so they end when the pool is dropped.
    pub(super) fn spawn(pool: &Pool, nodes: Nodes) -> Domains {
        let stale = Arc::new(AtomicBool::new(true));
        for client in pool.clients() {
            let (mut changes, mut connects) = (client.cluster_change_rx(), client.reconnect_rx());
            let stale = stale.clone();
            tokio::spawn(async move {
                loop {
                    let event = tokio::select! {
                        change = changes.recv() => change.map(drop),
                        connect = connects.recv() => connect.map(drop),
                    };
                    match event {
                        Ok(()) | Err(RecvError::Lagged(_)) => stale.store(true, Ordering::Release),
                        Err(RecvError::Closed) => return,
                    }
                }
            });
        }
        Domains {
            ranges: RwLock::new(Vec::new()),
            stale,
            nodes,
        }
    }

    /// The domain of the node owning `slot`; 0 while the routing is unknown.
    pub(super) fn of(&self, pool: &Pool, slot: u16) -> u64 {
        self.lookup(pool, slot, |(_, _, domain, _)| *domain)
            .unwrap_or(0)
    }

    /// The pool of the node owning `slot`; `pool` (the cluster client)
    /// while the routing is unknown or that node's pool is connecting.
    pub(super) fn route(&self, pool: &Pool, slot: u16) -> Result<Pool, super::StoreError> {
        let node = match self.lookup(pool, slot, |(_, _, _, server)| server.clone()) {
            Some(server) => self.nodes.connected(&server)?,
            None => None,
        };
        Ok(node.unwrap_or_else(|| pool.clone()))
    }

    /// The routing may be out of date (a MOVED reply, a failed node): read
    /// fred's again on the next lookup, and ask it to sync with the cluster.
    pub(super) fn suspect(&self, pool: &Pool) {
        if !self.stale.swap(true, Ordering::AcqRel) {
            let client = pool.next().clone();
            tokio::spawn(async move {
                let _ = client.sync_cluster().await;
            });
        }
    }

    pub(super) async fn quit_nodes(&self) {
        self.nodes.quit_all().await;
    }

    fn lookup<T>(
        &self,
        pool: &Pool,
        slot: u16,
        get: impl Fn(&(u16, u16, u64, Server)) -> T,
    ) -> Option<T> {
        if self.stale.swap(false, Ordering::AcqRel) {
            self.refresh(pool.next().cached_cluster_state());
        }
        let ranges = self.ranges.read().unwrap_or_else(|e| e.into_inner());
        let at = ranges.partition_point(|(_, last, _, _)| *last < slot);
        match ranges.get(at) {
            Some(range) if range.0 <= slot => Some(get(range)),
            _ => None,
        }
    }

    fn refresh(&self, routing: Option<ClusterRouting>) {
        let mut ranges: Vec<(u16, u16, u64, Server)> = routing
            .iter()
            .flat_map(|r| r.slots())
            .map(|r| {
                let id = domain(&r.primary.host, r.primary.port);
                (r.start, r.end, id, r.primary.clone())
            })
            .collect();
        if ranges.is_empty() {
            // Not known yet: look again next time.
            self.stale.store(true, Ordering::Release);
            return;
        }
        ranges.sort_unstable_by_key(|range| range.0);
        let mut owners: Vec<Server> = ranges.iter().map(|range| range.3.clone()).collect();
        owners.dedup();
        *self.ranges.write().unwrap_or_else(|e| e.into_inner()) = ranges;
        self.nodes.retain(&owners);
    }
}

/// A stable, non-zero id for a node (FNV-1a of host and port), the same in
/// every process, so logs and metrics of several instances agree.
fn domain(host: &str, port: u16) -> u64 {
    let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
    hash.write(host.as_bytes());
    hash.write(&port.to_be_bytes());
    hash.finish().max(1)
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_distinct_stable_non_zero_domains() {
        let a = domain("127.0.0.1", 7000);
        assert_eq!(a, domain("127.0.0.1", 7000));
        assert_ne!(a, domain("127.0.0.1", 7001));
        assert_ne!(a, domain("127.0.0.2", 7000));
        assert_ne!(a, 0);
    }
}
