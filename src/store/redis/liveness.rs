//! Replacing a Redis connection that stopped answering.
//!
//! A connection can die without a reset: a conntrack or NAT entry that
//! expired, a failover to a new address behind the same name, a network
//! blip that half-opened TCP. Nothing then comes back on it, yet it still
//! counts as connected, so every check sent down it times out, and the
//! breaker's trial calls keep taking it, until TCP itself gives up
//! (minutes). Under fail-open that is limiting off for the whole instance.
//!
//! Two signals replace it:
//! - **A call that timed out** on a connected client makes its connection
//!   a suspect: one PING on that same client, allowed
//!   `unresponsive_timeout`. A reply within it means the connection works
//!   and Redis was only slow (a long script, a fork): nothing happens. No
//!   reply: the client is told to reconnect (with Sentinel that asks a
//!   sentinel for the primary again). One probe per client at a time, so
//!   a flood of timeouts costs one PING. A client that is not connected is
//!   never probed: it is reconnecting already (Redis down or restarting),
//!   and fred queues a forced reconnect behind the one under way, so each
//!   would tear down the next fresh connection.
//! - **The kernel** (`TCP_USER_TIMEOUT`, `tcp_config` in `client.rs`): data
//!   written and not acknowledged for `unresponsive_timeout` (at least 1 s)
//!   closes the socket, which fred sees as a dropped connection and
//!   reconnects. This catches a dead path even when the client is stuck
//!   writing into a full socket buffer.
//!
//! Why not fred's own `UnresponsiveConfig`: it measures from the *last*
//! write, so under steady traffic (a write every millisecond) a dead
//! connection never looks unresponsive; and it arms a timer on every turn
//! of the client's routing loop, which the hot path would pay for.
//!
//! A frozen Redis (SIGSTOP) looks the same from here and is reconnected
//! too; the new connection's handshake waits for it like any command.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;

use crate::tasks::Tasks;

/// Probes suspect connections and replaces the dead ones; shared by every
/// pool of one store (a cluster's node pools included).
pub(super) struct Liveness {
    /// The store's tasks: a probe is joined at its `quit`.
    tasks: Tasks,
    timeout: Duration,
    /// Ids of the clients being probed now.
    probing: Mutex<HashSet<String>>,
    /// Connections replaced because they stopped answering.
    replaced: AtomicU64,
}

impl Liveness {
    pub(super) fn new(timeout: Duration, tasks: Tasks) -> Arc<Liveness> {
        Arc::new(Liveness {
            tasks,
            timeout,
            probing: Mutex::new(HashSet::new()),
            replaced: AtomicU64::new(0),
        })
    }

    /// Connections replaced so far because they stopped answering.
    pub(super) fn replaced(&self) -> u64 {
        self.replaced.load(Ordering::Relaxed)
    }

    /// Called with the client a call just went to, and how it ended: a
    /// timeout makes the client's connection a suspect (see the module doc).
    pub(super) fn observe<T>(self: &Arc<Self>, client: &Client, result: &Result<T, Error>) {
        if matches!(result, Err(e) if *e.kind() == ErrorKind::Timeout) {
            self.suspect(client);
        }
    }

    /// Probes `client`'s connection unless a probe of it is under way. The
    /// task lives at most twice `timeout`: the PING is bounded, and so is
    /// the wait for the reconnect (which goes on in the client regardless).
    pub(super) fn suspect(self: &Arc<Self>, client: &Client) {
        if client.state() != ClientState::Connected {
            return;
        }
        let id = client.id().to_string();
        if !self.lock().insert(id.clone()) {
            return;
        }
        let this = self.clone();
        let client = client.clone();
        // Cut at `quit`: a probe writes nothing, and must not reconnect a
        // pool being closed.
        self.tasks.spawn_until_shutdown(async move {
            // Connected still: fred has not noticed anything itself.
            if !this.answers(&client).await && client.state() == ClientState::Connected {
                this.replaced.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    server = %describe(&client),
                    timeout_ms = this.timeout.as_millis() as u64,
                    "a Redis connection stopped answering: replacing it"
                );
                let _ = tokio::time::timeout(this.timeout, client.force_reconnection()).await;
            }
            this.lock().remove(&id);
        });
    }

    /// Whether a PING on `client`'s own connection is answered within the
    /// timeout. Only a timeout counts as dead: any other error means the
    /// connection is already down or being replaced.
    async fn answers(&self, client: &Client) -> bool {
        let options = Options {
            timeout: Some(self.timeout),
            // Not queued behind a reconnect: that would time out too.
            fail_fast: true,
            ..Default::default()
        };
        let pong: Result<Value, Error> = client.with_options(&options).ping(None).await;
        !matches!(pong, Err(e) if *e.kind() == ErrorKind::Timeout)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.probing.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The server a client talks to, for the log (never credentials).
fn describe(client: &Client) -> String {
    match &client.client_config().server {
        ServerConfig::Centralized { server } => server.to_string(),
        other => format!("{:?}", other.hosts()),
    }
}
