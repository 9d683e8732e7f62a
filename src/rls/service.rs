//! The gRPC service tonic serves, written out rather than envoy-types'
//! generated `RateLimitServiceServer`: that one decodes with the generated
//! `string` fields and answers a failed decode itself, before any of our
//! code runs. Here the request is decoded with [`super::wire`]'s types, and
//! what a failed decode answers is ours to decide.

use std::convert::Infallible;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tonic::codegen::{Body, BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::{ClientStreamingService, Grpc, NamedService};
use tonic::{Request, Response, Status, Streaming};

use super::server::{MAX_REQUEST_BYTES, RlsService};
use super::wire;

/// The one method served.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService`, for tonic's router.
#[derive(Clone)]
pub struct RlsServer {
    inner: Arc<RlsService>,
}

impl RlsServer {
    pub fn new(service: RlsService) -> RlsServer {
        RlsServer {
            inner: Arc::new(service),
        }
    }
}

impl NamedService for RlsServer {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

impl<B> Service<http::Request<B>> for RlsServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let method = ShouldRateLimit(self.inner.clone());
        Box::pin(async move {
            let codec =
                tonic_prost::ProstCodec::<RateLimitResponse, wire::RateLimitRequest>::default();
            let mut grpc = Grpc::new(codec).max_decoding_message_size(MAX_REQUEST_BYTES);
            // A unary call is one message each way; served as client
            // streaming so that a message that fails to decode (too large,
            // or not a RateLimitRequest) comes to us as an error to answer,
            // rather than being answered by tonic.
            Ok(grpc.client_streaming(method, request).await)
        })
    }
}

struct ShouldRateLimit(Arc<RlsService>);

impl ClientStreamingService<wire::RateLimitRequest> for ShouldRateLimit {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: Request<Streaming<wire::RateLimitRequest>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move {
            // The first message is the request; a unary client sends no more.
            let message = request.into_inner().message().await;
            let answer = service.should_rate_limit(message).await;
            answer.map(Response::new)
        })
    }
}
