//! A Redis Cluster of real `redis-server` processes on free loopback ports,
//! with explicit cluster-bus ports so nothing depends on `port + 10000`
//! being free, and optionally a replica per primary for failover tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::tls::Certs;
use super::{answering, wait_until};
use super::{free_port, fresh_dir, path_str, redis_cli, redis_cli_binary, redis_server_binary};

/// How long a silent node takes to be marked failed. Low so a failover
/// test is quick; a replica is promoted about 1 to 2 s after that.
pub const NODE_TIMEOUT_MS: u64 = 1000;

pub struct RedisCluster {
    /// Every node's port, primaries and replicas, in start order.
    pub ports: Vec<u16>,
    nodes: Vec<Option<Child>>,
    dir: PathBuf,
    /// Client ports the nodes announce, by start order; empty: their own.
    announced: Vec<u16>,
    /// With TLS (`tls-cluster yes`): every node's TLS port, in start
    /// order, and the certificates; the plaintext ports stay for the test.
    pub tls_ports: Vec<u16>,
    tls: Option<Certs>,
}

/// One line of `CLUSTER NODES`, as far as the tests need it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    /// The address it announces (a container's IP, or 127.0.0.1).
    pub host: String,
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    /// The primary's id, for a replica.
    pub primary_id: Option<String>,
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// `primaries` primaries and no replicas.
    pub fn start(primaries: usize) -> RedisCluster {
        Self::start_with(primaries, 0)
    }

    /// `primaries` primaries, each with `replicas` replicas. Returns once the
    /// cluster state is ok on every node and every replica is in sync.
    ///
    /// `cluster-require-full-coverage no`: with the default (yes) every node
    /// refuses every key while one slot range has no live primary, so one
    /// failed node would take the whole cluster down until the failover.
    pub fn start_with(primaries: usize, replicas: usize) -> RedisCluster {
        Self::start_announcing(primaries, replicas, &[])
    }

    /// Like [`start_with`](Self::start_with), node `i` announcing
    /// `announced[i]` as its client port (`cluster-announce-port`), so
    /// clients reach it through a proxy there; the cluster bus stays direct.
    pub fn start_announcing(primaries: usize, replicas: usize, announced: &[u16]) -> RedisCluster {
        Self::start_all(primaries, replicas, announced, None)
    }

    /// `primaries` primaries whose clients and cluster bus speak TLS
    /// (`tls-cluster yes`) with `certs`' server certificate; clients need
    /// no certificate of their own. [`tls_url`](Self::tls_url) names them.
    pub fn start_tls(primaries: usize, certs: &Certs) -> RedisCluster {
        Self::start_all(primaries, 0, &[], Some(certs.clone()))
    }

    fn start_all(
        primaries: usize,
        replicas: usize,
        announced: &[u16],
        tls: Option<Certs>,
    ) -> RedisCluster {
        let _ = redis_cli_binary(); // fail early and clearly if it is missing
        let mut cluster = RedisCluster {
            ports: Vec::new(),
            nodes: Vec::new(),
            dir: fresh_dir("cluster"),
            announced: announced.to_vec(),
            tls_ports: Vec::new(),
            tls,
        };
        for _ in 0..primaries * (1 + replicas) {
            let tls_port = free_port();
            let (port, child) = (0..5)
                .find_map(|_| cluster.spawn_node(tls_port))
                .expect("could not start a cluster node on a free port");
            cluster.ports.push(port);
            cluster.nodes.push(Some(child));
            cluster
                .tls_ports
                .extend(cluster.tls.is_some().then_some(tls_port));
        }
        let addresses: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let output = Command::new(redis_cli_binary())
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        cluster.wait_healthy(primaries * (1 + replicas));
        cluster
    }

    /// A node; with TLS, its TLS port is `tls_port`.
    fn spawn_node(&self, tls_port: u16) -> Option<(u16, Child)> {
        let (port, bus) = (free_port(), free_port());
        let tls: Vec<String> = match &self.tls {
            Some(certs) => {
                let mut args = certs.server_args("server", tls_port, false);
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
                args
            }
            None => Vec::new(),
        };
        let node_dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&node_dir).unwrap();
        let announce: Vec<String> = match self.announced.get(self.ports.len()) {
            Some(announced) => vec![
                "--cluster-announce-port".into(),
                announced.to_string(),
                "--cluster-announce-bus-port".into(),
                bus.to_string(),
            ],
            None => Vec::new(),
        };
        let child = Command::new(redis_server_binary())
            .args(&announce)
            .args(&tls)
            .args(["--port", &port.to_string()])
            .args(["--cluster-port", &bus.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .args(["--cluster-require-full-coverage", "no"])
            // A replica whose link to its primary lagged more than
            // validity-factor × node-timeout (10 s) would refuse to fail
            // over; on a loaded 2-core machine that made the failover tests
            // wait forever. 0: a replica always may.
            .args(["--cluster-replica-validity-factor", "0"])
            .args(["--dir", path_str(&node_dir)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("failed to run redis-server");
        answering(child, port)
    }

    /// Every node says the cluster is ok and knows `nodes` nodes, and every
    /// replica's link to its primary is up (otherwise it could not take over).
    fn wait_healthy(&self, nodes: usize) {
        for &port in &self.ports {
            wait_until(Duration::from_secs(20), "cluster state ok", || {
                let info = redis_cli(port, &["cluster", "info"]);
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{nodes}"))
            });
        }
        for node in self.nodes_info().iter().filter(|n| !n.primary) {
            wait_until(Duration::from_secs(20), "replica in sync", || {
                redis_cli(node.port, &["info", "replication"]).contains("master_link_status:up")
            });
        }
    }

    /// The one node named in [`url`](Self::url): the first node started,
    /// which `redis-cli --cluster create` makes a primary.
    pub fn seed(&self) -> u16 {
        self.ports[0]
    }

    /// A URL naming one node only, as the simplest configuration does.
    pub fn url(&self) -> String {
        format!("redis-cluster://127.0.0.1:{}", self.seed())
    }

    /// `rediss-cluster://` naming the first node's TLS port.
    pub fn tls_url(&self) -> String {
        format!("rediss-cluster://127.0.0.1:{}", self.tls_ports[0])
    }

    /// `CLUSTER NODES` as seen by the first live node.
    pub fn nodes_info(&self) -> Vec<NodeInfo> {
        nodes_info_among(&self.live_ports())
    }

    fn live_ports(&self) -> Vec<u16> {
        self.ports
            .iter()
            .zip(&self.nodes)
            .filter(|(_, child)| child.is_some())
            .map(|(port, _)| *port)
            .collect()
    }

    /// The port of the live primary serving `slot`, if any.
    pub fn owner_of(&self, slot: u16) -> Option<u16> {
        Self::owner_among(&self.live_ports(), slot)
    }

    /// The primary serving `slot` according to the first of `ports` that
    /// answers (a plain function of ports, for polling from another thread).
    pub fn owner_among(ports: &[u16], slot: u16) -> Option<u16> {
        nodes_info_among(ports)
            .into_iter()
            .find(|n| n.serves(slot))
            .map(|n| n.port)
    }

    /// The port of a replica of the primary on `port`.
    pub fn replica_of(&self, port: u16) -> Option<u16> {
        let nodes = self.nodes_info();
        let id = &nodes.iter().find(|n| n.port == port)?.id;
        nodes
            .iter()
            .find(|n| n.primary_id.as_ref() == Some(id))
            .map(|n| n.port)
    }

    /// SIGKILL the node on `port`.
    pub fn kill(&mut self, port: u16) {
        let index = self
            .ports
            .iter()
            .position(|&p| p == port)
            .expect("a node of this cluster");
        if let Some(mut child) = self.nodes[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn nodes_info_among(ports: &[u16]) -> Vec<NodeInfo> {
    ports
        .iter()
        .map(|&port| redis_cli(port, &["cluster", "nodes"]))
        .find(|text| !text.is_empty())
        .map_or_else(Vec::new, |text| parse_nodes(&text))
}

impl NodeInfo {
    /// Whether this node, a live primary, owns `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.primary && !self.failed && self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// The reply of `CLUSTER NODES`, a node per line.
pub fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            // host:port@cport[,hostname]
            let address = fields[1].split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            let port = port.parse().ok()?;
            let flags = fields[2];
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => range.parse().ok().map(|s| (s, s)),
                })
                .collect();
            Some(NodeInfo {
                id: fields[0].to_string(),
                host: host.to_string(),
                port,
                primary: flags.contains("master"),
                failed: flags.contains("fail"),
                primary_id: (fields[3] != "-").then(|| fields[3].to_string()),
                slots,
            })
        })
        .collect()
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
