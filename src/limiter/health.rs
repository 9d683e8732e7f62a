//! Readiness and the prober.
//!
//! The prober pings the store on a timer. Its result is readiness
//! (`/readyz`, `ratekeeper_store_up`), not a breaker input: one slow ping
//! must not switch limiting off any more than one slow check may. It does
//! two things for the breakers: it notices an idle outage (no check sent,
//! so no breaker could), and when the store answers again after a failed
//! ping it moves open breakers to half-open at once, so recovery does not
//! wait out `breaker.open_for`. A check the store answers marks the store
//! up, so readiness follows a recovery without waiting for the next tick;
//! but it moves no breaker other than its own domain's (through
//! [`Breakers::record`](super::domains::Breakers::record)): in a cluster it
//! proves only that its own node answers. The prober also forgets the
//! breakers of domains that no check has reached for a while.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tracing::{error, info, warn};

use super::Limiter;
use super::domains::AUTH_HINT;
use crate::store::StoreError;

pub(super) const UNKNOWN: u8 = 0;
pub(super) const UP: u8 = 1;
pub(super) const DOWN: u8 = 2;

/// A failing check updates the reason readiness gives at most this often
/// while the kind of error stays the same: during an outage every check
/// fails, and each would otherwise lock and format a message.
const NOTE_EVERY_US: u64 = 1_000_000;
const KINDS: [&str; 5] = ["timeout", "unavailable", "auth", "backend", "tls"];

/// What the limiter knows of the store's health.
pub(super) struct Health {
    /// What the prober last saw: one of [`UNKNOWN`], [`UP`], [`DOWN`].
    pub probed: AtomicU8,
    /// Why the store was last seen failing, for `/readyz`.
    last_failure: std::sync::Mutex<Option<NotReady>>,
    /// When a failed check last wrote `last_failure`, and its error kind
    /// (see `remember_check_failure`).
    noted: Noted,
}

impl Default for Health {
    /// Unknown (not ready) until the first probe.
    fn default() -> Health {
        Health {
            probed: AtomicU8::new(UNKNOWN),
            last_failure: std::sync::Mutex::new(None),
            noted: Noted::default(),
        }
    }
}

/// When a failed check last wrote the reason, and the error's kind.
struct Noted {
    at_us: AtomicU64,
    kind: AtomicU8,
}

impl Default for Noted {
    fn default() -> Noted {
        Noted {
            at_us: AtomicU64::new(u64::MAX),
            kind: AtomicU8::new(u8::MAX),
        }
    }
}

/// Why the instance is not ready: the error kind and a short message
/// (never a credential: an auth failure gets a fixed hint, not the reply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct NotReady {
    /// `timeout`, `unavailable`, `auth`, `tls`, or `unknown` before the first probe.
    #[schema(example = "timeout")]
    pub kind: &'static str,
    #[schema(example = "store timed out: Request timed out.")]
    pub message: String,
}

impl NotReady {
    fn from_error(error: &StoreError) -> NotReady {
        let message = match error {
            StoreError::Auth(_) => AUTH_HINT.to_string(),
            other => {
                let mut text = other.to_string();
                if text.len() > 200 {
                    let cut = (0..=200).rev().find(|&i| text.is_char_boundary(i));
                    text.truncate(cut.unwrap_or(0));
                }
                text
            }
        };
        NotReady {
            kind: error.kind(),
            message,
        }
    }
}

impl Limiter {
    /// Whether checks reach the store: the last ping answered and at least
    /// one failure domain's breaker is not open (half-open counts: it is
    /// trying real checks). With one Redis node that is "its breaker is not
    /// open". A cluster with one dead primary stays ready: the other
    /// primaries answer, and taking every instance out of service would turn
    /// a partial outage into a total one.
    pub fn is_ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// [`is_ready`](Self::is_ready), with the reason when not.
    pub fn readiness(&self) -> Result<(), NotReady> {
        let probed = self.health.probed.load(Ordering::Acquire);
        let [closed, _, half_open] = self.breakers.counts();
        if probed == UP && closed + half_open > 0 {
            return Ok(());
        }
        let last = self
            .health
            .last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Err(last.unwrap_or(NotReady {
            kind: "unknown",
            message: "the store has not answered a ping yet".into(),
        }))
    }

    pub(super) fn remember_failure(&self, error: &StoreError) {
        *self
            .health
            .last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(NotReady::from_error(error));
    }

    /// [`remember_failure`](Self::remember_failure) for a failed check:
    /// only when the kind of error changed or [`NOTE_EVERY_US`] passed.
    pub(super) fn remember_check_failure(&self, error: &StoreError) {
        let now = self.breakers.now_us();
        let kind = KINDS
            .iter()
            .position(|&k| k == error.kind())
            .unwrap_or(KINDS.len()) as u8;
        let noted = &self.health.noted;
        let at = noted.at_us.load(Ordering::Relaxed);
        if noted.kind.load(Ordering::Relaxed) == kind
            && at != u64::MAX
            && now.saturating_sub(at) < NOTE_EVERY_US
        {
            return;
        }
        noted.kind.store(kind, Ordering::Relaxed);
        noted.at_us.store(now, Ordering::Relaxed);
        self.remember_failure(error);
    }

    /// Marks the store up; whether it was down (a ping had failed).
    fn mark_up(&self) -> bool {
        let was_down = self.health.probed.swap(UP, Ordering::AcqRel) == DOWN;
        if was_down {
            let store = self.store.name();
            info!(store, "{store} back: it answers again");
        }
        was_down
    }

    /// A check was answered: the store is up. Its own domain's breaker
    /// already took the result; the others are left alone, since in a
    /// cluster this proves nothing about the other nodes.
    pub(super) fn check_answered(&self) {
        self.mark_up();
    }

    /// Pings the store and records whether it answers. Logs transitions only.
    pub async fn probe(&self) {
        let store = self.store.name();
        self.breakers.forget_idle();
        match self.store.ping().await {
            // After a failed ping, open breakers try a real check at once,
            // instead of waiting out `open_for`. In a cluster a ping
            // reaches one node, so this may half-open the breaker of a
            // node still dead: its trial fails and re-opens it, one wasted
            // check, which is the price of a quick recovery after a full
            // outage.
            Ok(()) => {
                let was_down = self.mark_up();
                self.breakers.store_recovered(was_down);
            }
            Err(error) => {
                self.metrics.store.record_error(&error);
                self.remember_failure(&error);
                if self.health.probed.swap(DOWN, Ordering::AcqRel) != DOWN {
                    match &error {
                        StoreError::Auth(_) => error!(store, %error, "{AUTH_HINT}"),
                        // The message says what to fix ([redis.tls], the
                        // server's certificate, the port).
                        StoreError::Tls(_) => {
                            error!(store, %error, "TLS to {store} failed: not ready")
                        }
                        _ => warn!(
                            store,
                            %error,
                            "{store} unreachable: not ready; checks it cannot answer get failing {}",
                            self.fallback.policy.mode.as_str()
                        ),
                    }
                }
            }
        }
        self.metrics.store.up.set(self.is_ready() as i64);
    }

    /// Probes every `interval` while anything is unhealthy (and every 4
    /// intervals otherwise, so readiness notices an idle outage).
    pub fn spawn_prober(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let limiter = Arc::downgrade(self);
        self.tasks.spawn_until_shutdown(async move {
            let mut idle_rounds = 0u32;
            loop {
                tokio::time::sleep(interval).await;
                let Some(limiter) = limiter.upgrade() else {
                    return;
                };
                idle_rounds += 1;
                let [_, open, half_open] = limiter.breakers.counts();
                let healthy = limiter.is_ready() && open + half_open == 0;
                if !healthy || idle_rounds >= 4 {
                    idle_rounds = 0;
                    limiter.probe().await;
                }
            }
        })
    }
}
