//! Real proxies in front of ratekeeper, started on free loopback ports from
//! the shipped examples, and the small upstream they protect.
#![allow(dead_code)] // each test binary uses one proxy

pub mod envoy;
pub mod nginx;
pub mod traefik;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An upstream that answers 200 `hello` and counts what reaches it.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<AtomicUsize>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let app = axum::Router::new().fallback(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                "hello"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Upstream { addr, seen }
    }

    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
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
