//! What runs beside the listeners, each on the app's one [`Tasks`] so that
//! shutdown ends it or waits for it: the watch loops of the hot files, the
//! stores' background loops, the limiter's prober and lease sweeper.
//!
//! The files are loaded before anything is spawned: an invalid one stops
//! startup.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

use super::StartError;
use super::stores::{self, Stores};
use super::{Backend, tls};
use crate::config::Settings;
use crate::domain::PolicySet;
use crate::limiter::Limiter;
use crate::metrics::{Metrics, ReloadMetrics};
use crate::store::redis::RedisStore;
use crate::tasks::Tasks;
use crate::tenants::Tenants;
use crate::tokens::Tokens;
use crate::watch::{self, Reload};

/// The hot files as loaded at startup.
pub(super) struct Files {
    /// The policies in force (empty without a policies file).
    pub(super) policies: Arc<ArcSwap<PolicySet>>,
    policies_file: Option<Arc<crate::policies::Reloader>>,
    /// The bearer tokens in force, if any.
    pub(super) auth: Tokens,
}

/// Loads the policies file and the tokens file (when set): any problem
/// fails startup. `listen` is the HTTP listener's address, for the
/// warning about a service open to other hosts.
pub(super) fn load_files(
    settings: &Settings,
    listen: SocketAddr,
    metrics: &Arc<Metrics>,
) -> Result<Files, StartError> {
    let policies = Arc::new(ArcSwap::from_pointee(PolicySet::empty()));
    let policies_file = match &settings.policies.file {
        Some(path) => {
            let reloader = crate::policies::reloader(
                path.clone(),
                settings.limits.bounds,
                policies.clone(),
                metrics.clone(),
            );
            reloader.load_initial()?;
            Some(Arc::new(reloader))
        }
        None => None,
    };
    let auth = crate::tokens::start(settings.auth.tokens_file.as_deref(), listen, metrics)?;
    Ok(Files {
        policies,
        policies_file,
        auth,
    })
}

/// Watches the hot files (and the TLS files) until shutdown.
/// SIGHUP is caught either way: its default action would end the process.
pub(super) fn watch_files(
    tasks: &Tasks,
    settings: &Settings,
    files: &Files,
    metrics: &Arc<Metrics>,
) {
    match &files.policies_file {
        Some(reloader) => watch_file(tasks, settings, reloader.clone()),
        None => {
            tasks.spawn_until_shutdown(watch::without_file("policies file"));
        }
    }
    if let Some(reloader) = &files.auth.reloader {
        watch_file(tasks, settings, reloader.clone());
    }
    let reloads = &metrics.reloads;
    let mut sets: Vec<(Arc<dyn tls::TlsSet>, tls::Named, &ReloadMetrics)> = Vec::new();
    if let Some(client) = settings.redis.as_ref().and_then(|r| r.tls.as_ref()) {
        sets.push((client.clone(), tls::REDIS, &reloads.tls));
    }
    for (server, files) in [
        (&settings.server.tls, &reloads.server_tls),
        (&settings.grpc.tls, &reloads.grpc_tls),
    ] {
        if let Some(server) = server {
            let named = tls::listener(server.listener());
            sets.push((server.clone(), named, files));
        }
    }
    for (set, named, files) in sets {
        for reloader in tls::reloaders(set, named, files) {
            watch_file(tasks, settings, reloader);
        }
    }
}

/// Watches what `reloader` reloads until shutdown, polling it every
/// `policies.poll_interval` besides.
pub(super) fn watch_file<R: Reload>(tasks: &Tasks, settings: &Settings, reloader: Arc<R>) {
    let poll = settings.policies.poll_interval;
    tasks.spawn_until_shutdown(watch::watch(reloader, poll));
}

/// The stores and the limiter over them, with their loops running: the
/// embedded stores' sweepers, the invalidation listener, the prober, the
/// lease sweeper. Returns the limiter, and the Redis handle shutdown
/// closes last.
pub(super) async fn start_limiter(
    tasks: &Tasks,
    backend: Backend,
    settings: &Settings,
    probe_interval: Duration,
    metrics: &Arc<Metrics>,
    policies: &Arc<ArcSwap<PolicySet>>,
) -> Result<(Arc<Limiter>, Option<RedisStore>, Arc<Tenants>), StartError> {
    let Stores {
        store,
        redis,
        redis_connected,
        local,
        sweepers,
    } = stores::open_stores(backend, settings).await;
    sweepers.into_iter().for_each(|s| adopt(tasks, s));
    let tenants = Tenants::open(
        &settings.tenants,
        redis.clone(),
        policies.clone(),
        settings.limits.bounds,
        metrics.clone(),
    )
    .await?;
    tenants.spawn(tasks);
    let limiter = stores::build_limiter(store, local, settings, probe_interval, metrics);
    let limiter = Arc::new(
        limiter
            .with_tasks(tasks.clone())
            .with_tenants(tenants.clone()),
    );
    if let Some(redis) = &redis {
        let task =
            stores::listen_for_invalidations(redis, &limiter, redis_connected, probe_interval);
        if let Some(task) = task.await? {
            adopt(tasks, task);
        }
    }
    // One probe before serving: a healthy Redis is ready from the first
    // request; an unreachable one is logged once and retried by the prober.
    limiter.probe().await;
    limiter.spawn_prober(probe_interval);
    limiter.spawn_lease_sweeper(policies.clone());
    Ok((limiter, redis, tenants))
}

/// Ties a loop spawned elsewhere (by a store, which knows no [`Tasks`]) to
/// shutdown: ended when the loops are, and joined. These loops write
/// nothing to the store that a shutdown must wait for.
fn adopt(tasks: &Tasks, mut task: JoinHandle<()>) {
    let stop = tasks.clone();
    tasks.spawn(async move {
        tokio::select! {
            _ = &mut task => {}
            () = stop.cancelled() => {
                task.abort();
                let _ = task.await;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_adopted_loop_ends_at_shutdown_and_is_joined() {
        let tasks = Tasks::new();
        let (alive, gone) = tokio::sync::oneshot::channel::<()>();
        let looping = tokio::spawn(async move {
            let _alive = alive;
            std::future::pending::<()>().await
        });
        adopt(&tasks, looping);
        assert!(tasks.shutdown(Duration::from_secs(5)).await);
        // Joined before shutdown returned: the loop, and its sender, are gone.
        assert!(gone.await.is_err());
        assert!(tasks.is_empty());
    }
}
