//! The load client of `bench/run.sh`'s RLS rows (ghz is on none of the
//! registries this project can reach): `ShouldRateLimit` calls, a fixed
//! number in flight at all times over a few HTTP/2 connections, for a fixed
//! duration. One descriptor per call, `{KEY: s<n % KEYS>}`, like the spread
//! scenario of `bench/scenario.lua`. Prints one line in the format of that
//! script's `done`, so run.sh reads both tools alike:
//!
//!     RESULT requests=.. rps=.. p50_us=.. p99_us=.. p999_us=.. errors=.. over_limit=..
//!
//!     cargo run --release --example rls_load -- ADDR DOMAIN KEY STREAMS CONNECTIONS SECONDS [KEYS]

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

struct Args {
    addr: String,
    domain: String,
    key: String,
    streams: usize,
    connections: usize,
    duration: Duration,
    keys: u64,
}

fn args() -> Args {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 6 {
        eprintln!("usage: rls_load ADDR DOMAIN KEY STREAMS CONNECTIONS SECONDS [KEYS]");
        std::process::exit(2);
    }
    let num = |i: usize| a[i].parse::<u64>().expect("a number");
    Args {
        addr: a[0].clone(),
        domain: a[1].clone(),
        key: a[2].clone(),
        streams: num(3) as usize,
        connections: num(4).max(1) as usize,
        duration: Duration::from_secs(num(5)),
        keys: a.get(6).map_or(100_000, |k| k.parse().expect("a number")),
    }
}

/// What one stream saw: latencies in µs, failed calls, OVER_LIMIT answers.
#[derive(Default)]
struct Tally {
    latencies: Vec<u32>,
    errors: u64,
    over_limit: u64,
}

fn request(args: &Args, n: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: args.domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: args.key.clone(),
                value: format!("s{}", n % args.keys),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

async fn stream(
    args: &Args,
    mut client: RateLimitServiceClient<Channel>,
    id: u64,
    until: Instant,
) -> Tally {
    let mut tally = Tally::default();
    // Streams start at different keys, like wrk's connections do.
    let mut n = id * 7919;
    while Instant::now() < until {
        n += 1;
        let started = Instant::now();
        match client.should_rate_limit(request(args, n)).await {
            Ok(r) if r.get_ref().overall_code() == Code::Ok => {}
            Ok(_) => tally.over_limit += 1,
            Err(_) => tally.errors += 1,
        }
        tally
            .latencies
            .push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }
    tally
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

// One load thread, like `wrk -t1` in the HTTP rows, so both rows' clients
// take the same share of the machine's 2 cores.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: &'static Args = Box::leak(Box::new(args()));
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        let channel = Endpoint::from_shared(format!("http://{}", args.addr))
            .expect("an address")
            .connect()
            .await
            .expect("grpc connects");
        channels.push(channel);
    }
    let started = Instant::now();
    let until = started + args.duration;
    let tasks: Vec<_> = (0..args.streams)
        .map(|i| {
            let client = RateLimitServiceClient::new(channels[i % channels.len()].clone());
            tokio::spawn(stream(args, client, i as u64, until))
        })
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await.expect("stream task");
        all.latencies.extend(t.latencies);
        all.errors += t.errors;
        all.over_limit += t.over_limit;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.latencies.sort_unstable();
    let n = all.latencies.len();
    println!(
        "RESULT requests={n} rps={:.0} p50_us={} p99_us={} p999_us={} errors={} over_limit={}",
        n as f64 / elapsed,
        percentile(&all.latencies, 50.0),
        percentile(&all.latencies, 99.0),
        percentile(&all.latencies, 99.9),
        all.errors,
        all.over_limit
    );
}
