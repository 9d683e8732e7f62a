//! Shared by the RLS tests: the example config, an app serving RLS on a
//! free port with a tonic client (the client side of envoy-types), and
//! requests built from (key, value) pairs.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratekeeper::app::Application;
use ratekeeper::config::Settings;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Every counted limit is per day (and the servers are fresh per test): a
/// unit's window is epoch-aligned, so a minute's (or an hour's) could turn
/// over in the middle of a test's sequence and give its spent budget back;
/// a day's hardly ever does.
pub const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: client
    rate_limit: { unit: day, requests_per_unit: 3 }
    descriptors:
      - key: path
        value: /login
        rate_limit: { unit: day, requests_per_unit: 2, name: login }
  - key: client
    value: vip
    rate_limit: { unlimited: true, name: vip, replaces: [{ name: global }] }
  - key: global
    rate_limit: { unit: day, requests_per_unit: 5, name: global }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: day, requests_per_unit: 1 }
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 100, algorithm: sliding_window }
"#;

pub struct Rls {
    pub client: RateLimitServiceClient<Channel>,
    channel: Channel,
    pub http: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

pub fn config_file(text: &str) -> PathBuf {
    let dir = crate::support::fresh_dir("rls");
    let path = dir.join("edge.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn rls_settings(redis: Option<&str>, config: PathBuf) -> Settings {
    let mut settings = crate::support::settings(redis);
    settings.grpc.listen = Some("127.0.0.1:0".parse().unwrap());
    settings.rls.config = Some(config);
    settings
}

pub async fn start(settings: Settings) -> Rls {
    let app = Application::build(settings).await.expect("app builds");
    let addr: SocketAddr = app.grpc_addr().expect("grpc listens");
    let http = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("grpc connects");
    Rls {
        client: RateLimitServiceClient::new(channel.clone()),
        channel,
        http,
        stop: Some(stop),
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

impl Rls {
    pub async fn ask(&self, req: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.ask_with(req, &[]).await
    }

    /// [`Rls::ask`] with these `authorization` metadata values, in order.
    pub async fn ask_with(
        &self,
        req: RateLimitRequest,
        authorization: &[&str],
    ) -> Result<RateLimitResponse, tonic::Status> {
        let mut req = tonic::Request::new(req);
        for value in authorization {
            let value: tonic::metadata::MetadataValue<_> = value.parse().unwrap();
            req.metadata_mut().append("authorization", value);
        }
        let answer = self.client.clone().should_rate_limit(req).await;
        answer.map(|r| r.into_inner())
    }

    /// The service's `/metrics` text, from its HTTP listener.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.http))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// `ShouldRateLimit` with `message` as its request, whatever its type
    /// ([`RawRequest`], or a message that is no `RateLimitRequest`).
    pub async fn ask_raw<M: prost::Message + Send + 'static>(
        &self,
        message: M,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.expect("ready");
        let codec = tonic_prost::ProstCodec::<M, RateLimitResponse>::default();
        let path = PathAndQuery::from_static(SHOULD_RATE_LIMIT);
        let answer = grpc.unary(tonic::Request::new(message), path, codec).await;
        answer.map(|r| r.into_inner())
    }

    pub async fn codes(&self, req: RateLimitRequest) -> (Code, Vec<Code>, Vec<u32>) {
        let r = self.ask(req).await.expect("answered");
        codes_of(&r)
    }

    /// [`Rls::codes`] of a request with raw entries.
    pub async fn codes_raw(&self, req: RawRequest) -> (Code, Vec<Code>, Vec<u32>) {
        codes_of(&self.ask_raw(req).await.expect("answered"))
    }
}

/// `RateLimitRequest` as Envoy may send it: the same fields and numbers as
/// the proto's, but the entries' `string`s written as `bytes` (the same on
/// the wire), so they can hold what Envoy copies from a client's header.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawRequest {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RawDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawDescriptor {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<RawEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawEntry {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// A request of one descriptor with these raw (key, value) entries.
pub fn raw_request(domain: &str, entries: &[(&[u8], &[u8])]) -> RawRequest {
    let entries = entries.iter().map(|(k, v)| RawEntry {
        key: k.to_vec(),
        value: v.to_vec(),
    });
    RawRequest {
        domain: domain.into(),
        descriptors: vec![RawDescriptor {
            entries: entries.collect(),
        }],
    }
}

fn codes_of(r: &RateLimitResponse) -> (Code, Vec<Code>, Vec<u32>) {
    (
        r.overall_code(),
        r.statuses.iter().map(|s| s.code()).collect(),
        r.statuses.iter().map(|s| s.limit_remaining).collect(),
    )
}
