//! Levels checks (`domain::level`) under load: 400 concurrent callers,
//! from 40 users in 4 teams of one organisation, every level tight. No
//! level ever admits more than its limit, and a denial at one level spends
//! nothing at the others: after the burst each level's own counter (a
//! look at that level alone) holds exactly what the allowed checks spent.
//! On the embedded store, and with two instances on a single Redis and on
//! a 3-primary Cluster (where a hierarchy's keys fall in several slots and
//! are decided in two phases, `store/redis/levels.rs`).

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use support::{RedisCluster, RedisServer, TestApp, settings, unique_key};

const CALLERS: usize = 400;
const USERS: usize = 40;
const TEAMS: usize = 4;
/// Each user has 10 callers, each team 100: every level binds.
const USER_LIMIT: u64 = 5;
const TEAM_LIMIT: u64 = 40;
const ORG_LIMIT: u64 = 120;

/// The keys of one run.
struct Hierarchy {
    org: String,
    teams: Vec<String>,
    users: Vec<String>,
}

impl Hierarchy {
    fn new() -> Hierarchy {
        let run = unique_key("h");
        Hierarchy {
            org: format!("org:{run}"),
            teams: (0..TEAMS).map(|t| format!("team:{run}:{t}")).collect(),
            users: (0..USERS).map(|u| format!("user:{run}:{u}")).collect(),
        }
    }

    /// Each level alone, as a check form. A day's windows (epoch-aligned
    /// ends hardly ever fall inside a test); a gcra user level, so the
    /// buckets' give-back is tested too.
    fn org(&self) -> Value {
        json!({"key": self.org, "limit": ORG_LIMIT, "window": "1d", "algorithm": "fixed_window"})
    }

    fn team(&self, user: usize) -> Value {
        json!({"key": self.teams[user % TEAMS], "limit": TEAM_LIMIT, "window": "1d", "algorithm": "sliding_window"})
    }

    fn user(&self, user: usize) -> Value {
        json!({"key": self.users[user], "limit": USER_LIMIT, "window": "1d", "algorithm": "gcra"})
    }

    fn body(&self, user: usize) -> Value {
        json!({"levels": [self.org(), self.team(user), self.user(user)], "cost": 1})
    }
}

/// What a look at one level alone says it has left.
async fn remaining(app: &TestApp, mut level: Value) -> u64 {
    level["cost"] = json!(0);
    let (status, body) = app.check(level).await;
    assert_eq!(status, 200, "{body}");
    body["remaining"].as_u64().unwrap()
}

/// The burst over `apps` on `hierarchy`'s keys. Asserts
/// `exact`: the organisation's limit reached exactly (one atomic step
/// decides; two phases may deny a check a single step would have allowed).
async fn burst(apps: &[Arc<TestApp>], hierarchy: Hierarchy, exact: bool) {
    let hierarchy = Arc::new(hierarchy);
    let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let app = apps[i % apps.len()].clone();
            let hierarchy = hierarchy.clone();
            let barrier = barrier.clone();
            let user = i % USERS;
            tokio::spawn(async move {
                barrier.wait().await;
                let (status, body) = app.check(hierarchy.body(user)).await;
                assert_eq!(status, 200, "{body}");
                assert_eq!(body["degraded"], false, "{body}");
                let levels = body["levels"].as_array().unwrap();
                assert_eq!(levels.len(), 3, "{body}");
                let all = levels.iter().all(|l| l["allowed"] == true);
                assert_eq!(body["allowed"], all, "{body}");
                (user, all)
            })
        })
        .collect();
    let mut per_user: HashMap<usize, u64> = HashMap::new();
    for task in tasks {
        let (user, allowed) = task.await.unwrap();
        *per_user.entry(user).or_default() += u64::from(allowed);
    }
    let total: u64 = per_user.values().sum();
    let team_of = |t: usize| -> u64 {
        (0..USERS)
            .filter(|u| u % TEAMS == t)
            .map(|u| per_user.get(&u).copied().unwrap_or(0))
            .sum()
    };
    eprintln!("LEVELS {CALLERS} callers: {total} admitted of the organisation's {ORG_LIMIT}");
    assert!(total <= ORG_LIMIT, "the organisation admitted {total}");
    if exact {
        assert_eq!(
            total, ORG_LIMIT,
            "every level binds, so the organisation fills"
        );
    } else {
        assert!(total > 0, "nothing admitted");
    }
    let app = &apps[0];
    // Each level's own counter holds exactly what the allowed checks spent.
    assert_eq!(remaining(app, hierarchy.org()).await, ORG_LIMIT - total);
    for t in 0..TEAMS {
        let admitted = team_of(t);
        assert!(admitted <= TEAM_LIMIT, "team {t} admitted {admitted}");
        assert_eq!(
            remaining(app, hierarchy.team(t)).await,
            TEAM_LIMIT - admitted,
            "team {t}"
        );
    }
    for u in 0..USERS {
        let admitted = per_user.get(&u).copied().unwrap_or(0);
        assert!(admitted <= USER_LIMIT, "user {u} admitted {admitted}");
        assert_eq!(
            remaining(app, hierarchy.user(u)).await,
            USER_LIMIT - admitted,
            "user {u}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hierarchy_under_load_on_the_embedded_store() {
    let apps = [Arc::new(TestApp::spawn(settings(None)).await)];
    burst(&apps, Hierarchy::new(), true).await;
}

/// Two instances on `url`, every check to the store.
async fn two_instances(url: &str) -> [Arc<TestApp>; 2] {
    let mut config = settings(Some(url));
    let redis = config.redis.as_mut().unwrap();
    // Generous: this test is about counting, not latency, on a busy 2-core box.
    redis.timeout = Duration::from_secs(5);
    config.deny_cache.capacity = 0;
    [
        Arc::new(TestApp::spawn(config.clone()).await),
        Arc::new(TestApp::spawn(config).await),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hierarchy_under_load_on_two_instances_sharing_redis() {
    let redis = RedisServer::start();
    burst(&two_instances(&redis.url()).await, Hierarchy::new(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hierarchy_under_load_on_two_instances_sharing_a_cluster() {
    let cluster = RedisCluster::start(3);
    let apps = two_instances(&cluster.url()).await;
    // Keys whose organisation and teams are not all on one primary, so
    // that two phases decide (most random keys are).
    let node = |key: &str| cluster.owner_of(fred::util::redis_keyslot(key.as_bytes()));
    let hierarchy = std::iter::repeat_with(Hierarchy::new)
        .find(|h| h.teams.iter().any(|t| node(t) != node(&h.org)))
        .unwrap();
    burst(&apps, hierarchy, false).await;
}
