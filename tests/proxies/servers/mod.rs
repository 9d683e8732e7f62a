//! Real proxies in front of ratekeeper, started on free loopback ports from
//! the shipped examples, and the small upstream they protect.
#![allow(dead_code)] // each test binary uses one proxy

pub mod envoy;
pub mod nginx;
pub mod traefik;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;

/// An upstream that answers 200 `hello` and keeps the headers of each
/// request that reaches it (what a proxy added, such as Traefik's
/// authResponseHeaders, is checked there).
#[derive(Clone)]
pub struct Upstream {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<HeaderMap>>>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let record = requests.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap| {
            record.lock().unwrap().push(headers);
            async { "hello" }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Upstream { addr, requests }
    }

    /// How many requests reached the upstream.
    pub fn seen(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    /// The header `name` of the last request that reached the upstream.
    pub fn last_header(&self, name: &str) -> Option<String> {
        let requests = self.requests.lock().unwrap();
        let value = requests.last()?.get(name)?;
        Some(value.to_str().unwrap().to_string())
    }
}

/// `text` with each `(from, to)` replaced; panics if one is not there, so
/// an edited example fails loudly instead of running with its own ports.
pub fn substitute(text: &str, pairs: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (from, to) in pairs {
        assert!(
            out.contains(from),
            "the example no longer has `{from}`; update this test"
        );
        out = out.replace(from, to);
    }
    out
}
