//! Every task the service spawns, in one place, so that shutdown can wait
//! for them. A spawned task whose handle is dropped cannot be waited for:
//! a release or a refund still on its way to Redis would be cut off when
//! the client closes, or worse, run against a half-closed pool. So tasks
//! are spawned through [`Tasks`], which tracks them, and shutdown:
//! 1. cancels the background loops ([`Tasks::cancelled`]: sweepers,
//!    probers, watchers, listeners), which end at their next await;
//! 2. waits, up to a bound, for the tasks that write to the store
//!    (a lease's release, a waiter's refund) to finish;
//! 3. only then closes the store.
//!
//! Tasks that outlive the bound are logged and cut off on purpose when the
//! runtime stops: each is bounded by the store's own timeouts, so this is
//! only reached when the store does not answer at all.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The service's tracked tasks and the signal that ends its loops.
/// Cloning shares them.
#[derive(Clone, Default)]
pub struct Tasks {
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl Tasks {
    pub fn new() -> Tasks {
        Tasks::default()
    }

    /// Spawns `task`, tracked: shutdown waits for it to finish.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Spawns `task` if a runtime is running (a `Drop` may run outside
    /// one, in a test's teardown): false if it could not.
    pub fn spawn_from_drop<F>(&self, task: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.tracker.spawn_on(task, &runtime);
                true
            }
            Err(_) => false,
        }
    }

    /// Spawns a loop that runs until shutdown: `task` is dropped at its
    /// next await once [`Tasks::shutdown`] begins.
    pub fn spawn_until_shutdown<F>(&self, task: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = self.stop.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                biased;
                () = stop.cancelled() => {}
                () = task => {}
            }
        })
    }

    /// Resolves once shutdown has begun.
    pub fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.stop.cancelled()
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Tasks still running.
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }

    /// Ends the loops and waits up to `limit` for every task to finish;
    /// false if some were still running (they are cut off when the
    /// runtime stops). New tasks may still be spawned (a release from a
    /// dropped guard) and are waited for too.
    pub async fn shutdown(&self, limit: Duration) -> bool {
        self.stop.cancel();
        self.tracker.close();
        let done = tokio::time::timeout(limit, self.tracker.wait())
            .await
            .is_ok();
        if !done {
            tracing::warn!(
                running = self.tracker.len(),
                "tasks still running at shutdown are cut off"
            );
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_waits_for_tasks_and_ends_loops() {
        let tasks = Tasks::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tasks.spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(()).unwrap();
        });
        tasks.spawn_until_shutdown(std::future::pending());
        assert!(tasks.shutdown(Duration::from_secs(5)).await);
        rx.await
            .expect("the task ran to its end before shutdown returned");
        assert!(tasks.is_empty());
    }

    #[tokio::test]
    async fn shutdown_gives_up_after_its_bound() {
        let tasks = Tasks::new();
        tasks.spawn(std::future::pending::<()>());
        assert!(!tasks.shutdown(Duration::from_millis(20)).await);
        assert_eq!(tasks.len(), 1);
    }
}
