//! The HTTP ceiling for `bench/run.sh`: a bare axum handler that parses the
//! same JSON as `POST /v1/check` and returns a fixed body, with no limiter,
//! store, metrics or headers. What ratekeeper adds is measured against it.
//!
//!     cargo run --release --example bare_axum -- 127.0.0.1:9000

use axum::Json;
use axum::routing::post;
use serde::Deserialize;

#[derive(Deserialize)]
#[allow(dead_code)] // parsed, like ratekeeper does, then dropped
struct CheckRequest {
    key: String,
    limit: u64,
    window: serde_json::Value,
    algorithm: Option<String>,
    cost: Option<u64>,
    burst: Option<u64>,
}

// The same allocator as ratekeeper, so the ceiling compares like with like.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BODY: &str = r#"{"allowed":true,"limit":100,"remaining":99,"retry_after_ms":0,"reset_after_ms":60000,"degraded":false}"#;

async fn check(
    Json(_request): Json<CheckRequest>,
) -> ([(&'static str, &'static str); 1], &'static str) {
    ([("content-type", "application/json")], BODY)
}

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    let app = axum::Router::new().route("/v1/check", post(check));
    axum::serve(listener, app).await.expect("serve");
}
