//! The invalidation channel: how every instance learns at once that a key's
//! state changed under its deny cache (a reset, a refund, a give-back).
//!
//! The reset or refund script itself PUBLISHes the client key on
//! `<key prefix>invalidate` (`lua/ops.lua`), right after the change; every instance keeps a subscriber connection
//! of its own on that channel and hands each message to its
//! [`InvalidationSink`] (the deny cache). A give-back publishes the client
//! key after [`FREED_PREFIX`], handed to [`InvalidationSink::freed`]: it
//! frees capacity as a refund does, but a holder of leased chunks of that
//! key must keep them, which a reset or refund ends. Redis pub/sub is fire and
//! forget: a message sent while a subscriber is not subscribed is lost for
//! it. So the listener tells the sink whenever it may be missing messages
//! (`subscribed(false)`: the cache is dropped and not used) and when it
//! receives them again (`subscribed(true)`, once a message published on
//! the channel after SUBSCRIBE came back: see `Listener::confirmed`).
//!
//! It counts the subscription as lost on:
//! - any connection error or reconnect of the subscriber client (a new
//!   connection is not subscribed until we say so; fred's own automatic
//!   resubscription is not used, because it does not tell us when it is
//!   done);
//! - a heartbeat PING on the subscriber connection that fails or times
//!   out (a frozen server, a silent network): then the subscriber client
//!   is replaced by a fresh one, which with Sentinel finds the current
//!   primary;
//! - messages dropped because the listener fell behind (the cache is then
//!   cleared, but stays in use: the subscription itself is fine).
//!
//! Topologies: the subscriber is built from the same URL as the store.
//! With Sentinel it follows the primary across failovers (fred asks a
//! sentinel on every reconnect). In a Cluster, classic PUBLISH is
//! broadcast to every node over the cluster bus, so subscribing on one
//! node suffices: fred sends SUBSCRIBE to the node owning the hash slot of
//! the client's id, and the heartbeat PING goes to the same slot.

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::EventInterface;
use fred::prelude::*;
use fred::types::{ClusterHash, Message};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{RedisStore, client_config, reconnect_policy, tcp_config};
use crate::store::{InvalidationSink, StoreError};

/// The longest message taken as a client key: the largest key
/// `limits.max_key_bytes` allows. Anything else (longer, or not UTF-8) is
/// no key of ours, yet says something changed: it clears the whole cache.
pub const MAX_MESSAGE_BYTES: usize = 65_536;

/// What a subscription check's token starts with (see
/// `Listener::confirmed`): every instance ignores such messages. A client
/// key of that shape only delays its own invalidation on other instances.
const CHECK_PREFIX: &str = "\0rk-subscription-check:";

/// What a give-back's message puts before its client key
/// (`OpKind::GiveBack`; `wire.rs` builds the message): such a message goes
/// to [`InvalidationSink::freed`] with the key after it, under the same
/// bound on its length as any key. Like `CHECK_PREFIX`, a client key of
/// that shape reset or refunded is taken for a give-back of the key after
/// the prefix: its own invalidation on other instances waits for its
/// denial's end, and the other key's cached denial ends early (the store
/// answers it again).
pub const FREED_PREFIX: &str = "\0rk-freed:";

/// The message a change to the runtime overrides, blocks and exemptions
/// publishes (`store/redis/tenants.rs`): every instance reloads them at
/// once, rather than at its next poll of their version. A client key of
/// that exact text reset on another instance only makes them reload.
pub const TENANTS_MESSAGE: &str = "\0rk-tenants";

/// Messages fred buffers for the listener before it counts as behind.
const MESSAGE_BUFFER: usize = 4_096;

/// The running listener.
pub struct InvalidationListener {
    pub task: JoinHandle<()>,
    subscribed: watch::Receiver<bool>,
}

impl InvalidationListener {
    /// Waits up to `limit` for the subscription; returns whether it is up.
    pub async fn wait_subscribed(&mut self, limit: Duration) -> bool {
        let wait = self.subscribed.wait_for(|up| *up);
        matches!(tokio::time::timeout(limit, wait).await, Ok(Ok(_)))
    }
}

impl RedisStore {
    /// The channel invalidations travel on.
    pub fn invalidation_channel(&self) -> String {
        format!("{}invalidate", self.inner.options.settings.key_prefix)
    }

    /// Starts the subscriber (see the module doc). `sink` is told at once
    /// that nothing is subscribed yet. `heartbeat` is how often the
    /// subscriber connection is pinged.
    pub fn spawn_invalidation_listener(
        &self,
        sink: Arc<dyn InvalidationSink>,
        heartbeat: Duration,
    ) -> Result<InvalidationListener, StoreError> {
        sink.subscribed(false);
        let options = &self.inner.options.settings;
        // Generous: a PING that misses a short command timeout on a busy
        // machine would drop the whole cache for nothing.
        let timeout = options.timeout.max(Duration::from_millis(500));
        let max_delay = options
            .reconnect_max_delay
            .as_millis()
            .min(u32::MAX as u128) as u32;
        let mut builder = Builder::from_config(client_config(options)?);
        builder
            .with_performance_config(|p| {
                p.default_command_timeout = timeout;
                p.broadcast_channel_capacity = MESSAGE_BUFFER;
            })
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
                c.tcp = tcp_config(options);
            })
            .set_policy(reconnect_policy(max_delay));
        let client = builder
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let (up, subscribed) = watch::channel(false);
        let listener = Listener {
            channel: self.invalidation_channel(),
            // Subscribed before connecting, so no event is missed.
            messages: client.message_rx(),
            errors: client.error_rx(),
            reconnects: client.reconnect_rx(),
            client,
            builder,
            store: self.inner.clone(),
            checks: 0,
            sink,
            heartbeat: heartbeat.max(Duration::from_millis(10)),
            up,
        };
        let task = tokio::spawn(listener.run());
        Ok(InvalidationListener { task, subscribed })
    }
}

struct Listener {
    client: Client,
    /// What built `client`, to build a fresh one (see `renew`).
    builder: Builder,
    /// The store, whose clients publish the subscription check.
    store: Arc<super::Inner>,
    /// Subscription checks sent, for a fresh token each.
    checks: u64,
    channel: String,
    messages: tokio::sync::broadcast::Receiver<Message>,
    errors: tokio::sync::broadcast::Receiver<(Error, Option<fred::types::config::Server>)>,
    reconnects: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
    sink: Arc<dyn InvalidationSink>,
    heartbeat: Duration,
    up: watch::Sender<bool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Closes the connection when the task is aborted or ends.
        quit_later(self.client.clone());
    }
}

impl Listener {
    async fn run(mut self) {
        let _connection = self.client.connect();
        loop {
            self.subscribe().await;
            self.sink.subscribed(true);
            self.up.send_replace(true);
            self.serve().await;
            self.up.send_replace(false);
            self.sink.subscribed(false);
        }
    }

    /// Retries SUBSCRIBE until it is answered. The events that came before
    /// each attempt are dropped; those during it are kept, so a connection
    /// lost right after the answer still counts (one more round at worst).
    async fn subscribe(&mut self) {
        let mut pause = Duration::from_millis(10);
        let mut first = true;
        loop {
            // Past the connection's own events (fred broadcasts the
            // reconnect before it counts as connected), so they do not
            // end the subscription at once. Bounded: while Redis is down,
            // SUBSCRIBE below fails and we retry.
            let _ = tokio::time::timeout(self.heartbeat, self.client.wait_for_connect()).await;
            self.errors = self.errors.resubscribe();
            self.reconnects = self.reconnects.resubscribe();
            let subscribed = match self.client.subscribe(self.channel.as_str()).await {
                Ok(()) => self.confirmed().await,
                Err(error) => Err(error.to_string()),
            };
            if subscribed.is_err() && self.client.is_connected() {
                // The SUBSCRIBE may have gone down a connection that died
                // silently (in a cluster, to another node than the one the
                // heartbeat pinged): written, never answered.
                self.renew();
            }
            match subscribed {
                Ok(()) => return,
                // Once per outage; NOPERM here means the ACL user lacks the
                // channel (Redis 7 users get none by default).
                Err(error) if first => {
                    tracing::warn!(%error, channel = %self.channel, "cannot subscribe to the invalidation channel: deny cache off until it can");
                    first = false;
                }
                Err(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(self.heartbeat);
        }
    }

    /// Replaces the subscriber client with a fresh one: new connections to
    /// every node (with Sentinel, the primary asked anew). fred's
    /// `force_reconnection` of a cluster client did not replace the
    /// connection a SUBSCRIBE went down after a silent cut
    /// (`tests/faults/dead_connection.rs`). The old client is quit.
    fn renew(&mut self) {
        let Ok(fresh) = self.builder.build() else {
            return;
        };
        let old = std::mem::replace(&mut self.client, fresh);
        quit_later(old);
        self.messages = self.client.message_rx();
        self.errors = self.client.error_rx();
        self.reconnects = self.client.reconnect_rx();
        drop(self.client.connect());
    }

    /// Whether the subscription really receives: fred completes SUBSCRIBE
    /// once it is written, not when Redis confirms it, so a SUBSCRIBE that
    /// Redis refused (an ACL user without the channel: NOPERM) looked
    /// subscribed, and the deny cache kept denials that other instances'
    /// resets could no longer end. A token is published on the channel
    /// through the store's own clients and must come back here within the
    /// heartbeat's timeout. Every instance ignores such tokens otherwise.
    async fn confirmed(&mut self) -> Result<(), String> {
        self.checks += 1;
        let token = format!("{CHECK_PREFIX}{}:{}", self.client.id(), self.checks);
        let sent = self.store.publish(&self.channel, &token).await;
        sent.map_err(|e| format!("cannot publish the subscription check: {e}"))?;
        let wait = self.heartbeat.max(Duration::from_millis(500));
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let message = tokio::time::timeout_at(deadline, self.messages.recv()).await;
            match message {
                Ok(Ok(m))
                    if m.channel == self.channel
                        && m.value.as_str().as_deref() == Some(token.as_str()) =>
                {
                    return Ok(());
                }
                // Invalidations meanwhile: the cache is off, nothing to do.
                Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) => return Err("the client closed".into()),
                Err(_) => {
                    return Err(format!(
                        "SUBSCRIBE {} sent, but a message published on it did not arrive within \
                         {wait:?} (an ACL user without the channel?)",
                        self.channel
                    ));
                }
            }
        }
    }

    /// Hands messages to the sink until the subscription may be lost.
    async fn serve(&mut self) {
        let mut heartbeat = tokio::time::interval(self.heartbeat);
        heartbeat.tick().await; // the first tick is immediate
        loop {
            tokio::select! {
                message = self.messages.recv() => match message {
                    Ok(message) => self.deliver(&message),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "invalidation listener fell behind: clearing the deny cache");
                        self.sink.invalidated_all();
                    }
                    Err(RecvError::Closed) => return,
                },
                error = self.errors.recv() => {
                    if let Ok((error, _)) = &error {
                        tracing::warn!(%error, "invalidation subscription lost");
                    }
                    return;
                }
                _ = self.reconnects.recv() => return,
                _ = heartbeat.tick() => if !self.ping().await {
                    tracing::warn!("invalidation subscription not answering: reconnecting");
                    // A fresh client, not a reconnect of this one: serve()
                    // returns at once, so the cache is suspended meanwhile.
                    self.renew();
                    return;
                },
            }
        }
    }

    fn deliver(&self, message: &Message) {
        if message.channel != self.channel {
            return;
        }
        deliver(&*self.sink, message.value.as_bytes());
    }

    /// PING on the subscriber's own connection (in a cluster: the node
    /// that took SUBSCRIBE, by the same hash slot).
    async fn ping(&self) -> bool {
        let options = Options {
            cluster_hash: Some(ClusterHash::Custom(fred::util::redis_keyslot(
                self.client.id().as_bytes(),
            ))),
            ..Default::default()
        };
        let pong: Result<Value, _> = self.client.with_options(&options).ping(None).await;
        pong.is_ok()
    }
}

/// Hands one message of the channel to `sink`: a subscription check is
/// nobody's, a give-back's goes to `freed`, a change of the runtime
/// entries to `tenants_changed`, a client key to `invalidated`;
/// anything else (too long, not UTF-8) says only that something changed.
fn deliver(sink: &dyn InvalidationSink, message: Option<&[u8]>) {
    match message.map(std::str::from_utf8) {
        Some(Ok(check)) if check.starts_with(CHECK_PREFIX) => {}
        Some(Ok(TENANTS_MESSAGE)) => sink.tenants_changed(),
        Some(Ok(text)) => match text.strip_prefix(FREED_PREFIX) {
            Some(key) if key.len() <= MAX_MESSAGE_BYTES => sink.freed(key),
            None if text.len() <= MAX_MESSAGE_BYTES => sink.invalidated(text),
            _ => sink.invalidated_all(),
        },
        _ => sink.invalidated_all(),
    }
}

/// Quits `client` in the background (from a `Drop`, which cannot wait).
fn quit_later(client: Client) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = client.quit().await;
        });
    }
}

#[cfg(test)]
#[path = "invalidation_tests.rs"]
mod tests;
