//! The loop every instance runs: catch up a change made through another
//! instance (with Redis: at once when its message arrives on the
//! invalidation channel, and as the backstop for a message lost, one GET
//! of the version per `poll_interval`, a reload when it moved), rebuild
//! the view when the policies file was reloaded, and remove expired
//! entries.

use std::sync::Arc;

use tracing::warn;

use super::{Tenants, TenantsError, now_ms};
use crate::tasks::Tasks;

/// The name the audit trail gives the sweep that removes expired entries.
const EXPIRY: &str = "expiry";

impl Tenants {
    /// Runs [`sync`](Self::sync) every `poll_interval` until shutdown.
    pub fn spawn(self: &Arc<Self>, tasks: &Tasks) {
        let tenants = self.clone();
        tasks.spawn_until_shutdown(async move {
            let mut tick = tokio::time::interval(tenants.poll_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = tenants.changed.notified() => {}
                }
                if let Err(e) = tenants.sync().await {
                    tenants.metrics.tenants.sync_errors.inc();
                    warn!("cannot catch up the runtime overrides ({e}); the ones in force stay");
                }
            }
        });
    }

    /// One round of the loop.
    pub async fn sync(&self) -> Result<(), TenantsError> {
        if let Some(redis) = &self.redis {
            // Under the lock: a change of this instance's cannot fall
            // between the read of the version and the reload.
            let mut held = self.held.lock().await;
            // Any other version, lower too: Redis lost its data (a restart
            // without persistence), and what it holds now is what counts.
            if redis.tenants_version().await? != held.version {
                self.reload_locked(&mut held).await?;
            }
        }
        {
            let mut held = self.held.lock().await;
            let current = self.policies.load();
            let same = held
                .policies
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(p, &current));
            if !same {
                self.rebuild(&mut held);
            }
        }
        self.sweep().await;
        Ok(())
    }

    /// Removes the entries that expired, each only if it is still the one
    /// seen (a PUT may have renewed it meanwhile); with Redis the first
    /// instance to sweep one records it, the others find it gone.
    async fn sweep(&self) {
        let now = now_ms();
        let expired: Vec<_> = {
            let held = self.held.lock().await;
            held.entries
                .iter()
                .filter(|(_, e)| e.expired(now))
                .take(100)
                .map(|(id, e)| (id.clone(), e.clone()))
                .collect()
        };
        for (id, entry) in expired {
            let action = format!("{}.expire", entry.kind.as_str());
            let expire = super::Write {
                id: &id,
                after: None,
                action: &action,
                token: EXPIRY,
                expected: Some(&entry),
            };
            match self.write(expire).await {
                Ok(_) | Err(TenantsError::NotFound(_)) => {}
                Err(e) => warn!("cannot remove an expired {} ({e})", entry.kind.as_str()),
            }
        }
    }
}
