//! Shared by the forward-auth tests: apps with or without 127.0.0.1 as a
//! trusted proxy, policies whose overrides reveal the key used, and
//! requests to `/v1/auth` read whole.
#![allow(dead_code)]

use ratekeeper::domain::forward::{ForwardAuth, KeySpec};
use ratekeeper::domain::{Algorithm, Policy};
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::policy_checks::{limit, policy};
use crate::support::{TestApp, settings};

/// Runs a scenario on a fresh embedded store and on a fresh Redis, with
/// 127.0.0.1 a trusted proxy or not.
#[macro_export]
macro_rules! on_both_stores {
    ($trusted:expr => $($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                let app = $crate::forward_auth_support::spawn(None, $trusted).await;
                super::$name(&app).await;
            }

            #[tokio::test]
            async fn redis() {
                let redis = $crate::support::RedisServer::start();
                let app = $crate::forward_auth_support::spawn(Some(&redis.url()), $trusted).await;
                super::$name(&app).await;
            }
        }
    )*};
}

pub async fn spawn(redis: Option<&str>, trusted: bool) -> TestApp {
    let mut config = settings(redis);
    if trusted {
        config.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    }
    TestApp::spawn(config).await
}

/// One limit `l` of `n` a day, keyed by `key_from`, with an override
/// of 1000 for each of `marked` (so `X-RateLimit-Limit` shows which key
/// was used). A day: the tests count across requests on the wall clock,
/// and the window's end is epoch-aligned.
pub fn keyed(name: &str, n: u64, key_from: &[&str], marked: &[&str]) -> Policy {
    let mut p = policy(
        name,
        vec![limit("l", Algorithm::FixedWindow, n, "1d", None)],
    );
    if !key_from.is_empty() {
        p.forward = ForwardAuth {
            key_from_text: key_from.iter().map(|s| s.to_string()).collect(),
            key_from: key_from
                .iter()
                .map(|s| KeySpec::parse(s).unwrap())
                .collect(),
            ..ForwardAuth::default()
        };
    }
    for key in marked {
        let big = vec![limit("l", Algorithm::FixedWindow, 1000, "1d", None)];
        p.overrides.insert(key.to_string(), big.into());
    }
    p
}

pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body))
    }
    pub fn limit(&self) -> u64 {
        self.header("x-ratelimit-limit").unwrap().parse().unwrap()
    }
    pub fn remaining(&self) -> u64 {
        self.header("x-ratelimit-remaining")
            .unwrap()
            .parse()
            .unwrap()
    }
}

pub async fn call(app: &TestApp, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = app.http.request(method.parse().unwrap(), app.url(path));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

pub async fn get(app: &TestApp, path: &str, headers: &[(&str, &str)]) -> Answer {
    call(app, "GET", path, headers).await
}

/// A documentation address (198.18.0.0/15) no other test uses.
pub fn unique_ip() -> String {
    // Consecutive addresses of 198.18.0.0/15 from a start that differs per
    // process: distinct within a test (a hash of unique keys once gave the
    // same address twice), and unlikely to meet another process's.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(2_654_435_761);
    let n = start.wrapping_add(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) % (1 << 17);
    // Skip .0 and .255 in the last octet.
    let n = n % (2 * 256 * 254);
    let (high, rest) = (n / (256 * 254), n % (256 * 254));
    format!("198.{}.{}.{}", 18 + high, rest / 254, rest % 254 + 1)
}
