//! Failure domains in a cluster: which primary owns a check's slot, so the
//! limiter can keep one circuit breaker per node. Read from fred's cached
//! cluster routing, copied into a small table of slot ranges that the hot
//! path searches under a read lock without allocating. fred's cluster
//! change and reconnect events mark the copy stale; the next lookup
//! refreshes it.

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use fred::prelude::*;
use fred::types::cluster::ClusterRouting;
use tokio::sync::broadcast::error::RecvError;

pub(super) struct Domains {
    /// `(first slot, last slot, domain)`, sorted by slot.
    ranges: RwLock<Vec<(u16, u16, u64)>>,
    stale: Arc<AtomicBool>,
}

impl Domains {
    /// Starts listening to `pool`'s cluster events. The listeners hold only
    /// event receivers, so they end when the pool is dropped.
    pub(super) fn spawn(pool: &Pool) -> Domains {
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
        }
    }

    /// The domain of the node owning `slot`; 0 while the routing is unknown.
    pub(super) fn of(&self, pool: &Pool, slot: u16) -> u64 {
        if self.stale.swap(false, Ordering::AcqRel) {
            self.refresh(pool.next().cached_cluster_state());
        }
        let ranges = self.ranges.read().unwrap_or_else(|e| e.into_inner());
        let at = ranges.partition_point(|(_, last, _)| *last < slot);
        match ranges.get(at) {
            Some((first, _, domain)) if *first <= slot => *domain,
            _ => 0,
        }
    }

    fn refresh(&self, routing: Option<ClusterRouting>) {
        let mut ranges: Vec<(u16, u16, u64)> = routing
            .iter()
            .flat_map(|r| r.slots())
            .map(|r| (r.start, r.end, domain(&r.primary.host, r.primary.port)))
            .collect();
        if ranges.is_empty() {
            // Not known yet: look again next time.
            self.stale.store(true, Ordering::Release);
            return;
        }
        ranges.sort_unstable();
        *self.ranges.write().unwrap_or_else(|e| e.into_inner()) = ranges;
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
