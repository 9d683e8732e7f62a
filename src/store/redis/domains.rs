//! Failure domains in a cluster: which primary owns a check's slot, so the
//! limiter can keep one circuit breaker per node. Read from fred's cached
//! cluster routing, copied into a small table of slot ranges that the hot
//! path searches under a read lock without allocating or writing anything
//! shared. The copy is refreshed, and the node pools (`nodes.rs`) set up or
//! closed, by listener tasks on fred's cluster change and reconnect events
//! (fred's every cluster sync ends in a change event), never on a
//! request's path. The same table routes checks to the node pools.

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use fred::prelude::*;
use fred::types::cluster::ClusterRouting;
use fred::types::config::Server;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::nodes::Nodes;
use crate::tasks::Tasks;

/// `(first slot, last slot, domain, primary)`.
type Range = (u16, u16, u64, Server);

pub(super) struct Domains {
    /// The store's tasks: a cluster sync is joined at its `quit`.
    tasks: Tasks,
    routing: Arc<Routing>,
    /// A cluster sync asked for after a MOVED is under way: a burst of
    /// MOVED replies asks for one.
    syncing: Arc<AtomicBool>,
    /// Dropped with the store, which ends the listeners: they hold a client
    /// (to read its routing), so its event channels never close on their own.
    _alive: watch::Sender<()>,
}

/// What the listeners write and the checks read.
struct Routing {
    /// Sorted by slot; empty while the routing is unknown.
    ranges: RwLock<Vec<Range>>,
    nodes: Nodes,
}

impl Domains {
    /// Starts listening to `pool`'s cluster events, on the store's `tasks`;
    /// the listeners end when this is dropped, or at the store's `quit`.
    pub(super) fn spawn(pool: &Pool, nodes: Nodes, tasks: &Tasks) -> Domains {
        let routing = Arc::new(Routing {
            ranges: RwLock::new(Vec::new()),
            nodes,
        });
        let (alive, _) = watch::channel(());
        for client in pool.clients() {
            tasks.spawn_until_shutdown(listen(client.clone(), routing.clone(), alive.subscribe()));
        }
        Domains {
            tasks: tasks.clone(),
            routing,
            syncing: Arc::new(AtomicBool::new(false)),
            _alive: alive,
        }
    }

    /// Reads fred's routing now, e.g. once connected, so the first checks
    /// find their nodes without waiting for a listener to run.
    pub(super) fn refresh(&self, pool: &Pool) {
        self.routing.refresh(pool.next().cached_cluster_state());
    }

    /// The domain of the node owning `slot`; 0 while the routing is unknown.
    pub(super) fn of(&self, slot: u16) -> u64 {
        self.routing
            .lookup(slot, |(_, _, domain, _)| *domain)
            .unwrap_or(0)
    }

    /// The pool of the node owning `slot`; `pool` (the cluster client)
    /// while the routing is unknown or that node's pool has no connection.
    pub(super) fn route(&self, pool: &Pool, slot: u16) -> Pool {
        self.routing
            .lookup(slot, |(_, _, _, server)| {
                self.routing.nodes.connected(server)
            })
            .flatten()
            .unwrap_or_else(|| pool.clone())
    }

    /// The routing may be out of date (a MOVED reply, a failed node): ask
    /// fred to sync with the cluster; its change event refreshes ours.
    pub(super) fn suspect(&self, pool: &Pool) {
        if self.syncing.load(Ordering::Relaxed) || self.syncing.swap(true, Ordering::AcqRel) {
            return;
        }
        let client = pool.next().clone();
        let syncing = self.syncing.clone();
        self.tasks.spawn_until_shutdown(async move {
            let _ = client.sync_cluster().await;
            syncing.store(false, Ordering::Release);
        });
    }

    pub(super) async fn quit_nodes(&self) {
        self.routing.nodes.quit_all().await;
    }
}

/// Refreshes `routing` from `client`'s cached cluster state on each of its
/// cluster change and reconnect events, until `alive` is dropped.
async fn listen(client: Client, routing: Arc<Routing>, mut alive: watch::Receiver<()>) {
    let (mut changes, mut connects) = (client.cluster_change_rx(), client.reconnect_rx());
    loop {
        let event = tokio::select! {
            change = changes.recv() => change.map(drop),
            connect = connects.recv() => connect.map(drop),
            _ = alive.changed() => return,
        };
        match event {
            Ok(()) | Err(RecvError::Lagged(_)) => routing.refresh(client.cached_cluster_state()),
            Err(RecvError::Closed) => return,
        }
    }
}

impl Routing {
    fn lookup<T>(&self, slot: u16, get: impl FnOnce(&Range) -> T) -> Option<T> {
        let ranges = self.ranges.read().unwrap_or_else(|e| e.into_inner());
        let at = ranges.partition_point(|(_, last, _, _)| *last < slot);
        match ranges.get(at) {
            Some(range) if range.0 <= slot => Some(get(range)),
            _ => None,
        }
    }

    fn refresh(&self, routing: Option<ClusterRouting>) {
        let mut ranges: Vec<Range> = routing
            .iter()
            .flat_map(|r| r.slots())
            .map(|r| {
                let id = domain(&r.primary.host, r.primary.port);
                (r.start, r.end, id, r.primary.clone())
            })
            .collect();
        if ranges.is_empty() {
            // Not known yet: keep what we have until the next event.
            return;
        }
        ranges.sort_unstable_by_key(|range| range.0);
        let mut owners: Vec<Server> = ranges.iter().map(|range| range.3.clone()).collect();
        owners.sort_unstable_by(|a, b| (&*a.host, a.port).cmp(&(&*b.host, b.port)));
        owners.dedup();
        // Pools first, so a check routed by the new table finds its node's.
        self.nodes.retain(&owners);
        let unchanged = *self.ranges.read().unwrap_or_else(|e| e.into_inner()) == ranges;
        if !unchanged {
            *self.ranges.write().unwrap_or_else(|e| e.into_inner()) = ranges;
        }
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
