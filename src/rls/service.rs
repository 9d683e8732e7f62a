//! The gRPC service tonic serves, written out rather than envoy-types'
//! generated `RateLimitServiceServer`: that one decodes with the generated
//! `string` fields and answers a failed decode itself, before any of our
//! code runs, with nothing logged or counted. Here the request is decoded
//! with [`super::wire`]'s types, and every call not decided as sent is
//! counted (`ratekeeper_rls_request_errors_total{reason}`) and logged, at
//! most one line per `LOG_EVERY`: Envoy, failing open by default, lets
//! such a call's request through unlimited, so it must not go unseen.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tonic::codegen::{Body, BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::{ClientStreamingService, Grpc, NamedService};
use tonic::{Code, Request, Response, Status, Streaming};

use super::server::{MAX_REQUEST_BYTES, RlsError, RlsService, over_limit};
use super::wire;
use crate::metrics::{Metrics, RlsAnswer, RlsRequestError};
use crate::telemetry::LogThrottle;
use crate::telemetry::otel::Server;
use tracing::Instrument;

/// At most one log line per this for calls not decided as sent.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Calls whose message may be read at once, over every connection. tonic
/// reserves a message's declared length (up to the size bound) as soon as
/// its 5-byte prefix arrives, so without this a client declaring 64 KiB
/// messages on every stream of every connection, and sending one byte of
/// each, would make the process hold gigabytes for a few KB sent. With it,
/// at most this × the size bound (16 MiB) is held for messages being read.
const READ_SLOTS: usize = 256;

/// A call's message must be read whole within this of the call's start,
/// read slot included: Envoy sends it with the call's headers, so only a
/// client holding a slot on purpose comes near it.
const READ_DEADLINE: Duration = Duration::from_secs(1);

/// The one method served.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService`, for tonic's router.
#[derive(Clone)]
pub struct RlsServer {
    inner: Arc<Shared>,
}

struct Shared {
    service: RlsService,
    metrics: Arc<Metrics>,
    log: LogThrottle,
    read_slots: tokio::sync::Semaphore,
}

impl RlsServer {
    pub fn new(service: RlsService, metrics: Arc<Metrics>) -> RlsServer {
        RlsServer {
            inner: Arc::new(Shared {
                service,
                metrics,
                log: LogThrottle::new(LOG_EVERY),
                read_slots: tokio::sync::Semaphore::new(READ_SLOTS),
            }),
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
        // Envoy passes the trace context in the call's metadata (its
        // headers), as it does on HTTP.
        let traced = crate::telemetry::otel::sample(request.headers())
            .map(|sampled| crate::telemetry::otel::server_span(sampled, Server::Rls));
        let call = async move {
            let codec =
                tonic_prost::ProstCodec::<RateLimitResponse, wire::RateLimitRequest>::default();
            let mut grpc = Grpc::new(codec).max_decoding_message_size(MAX_REQUEST_BYTES);
            // A unary call is one message each way; served as client
            // streaming so that a message that fails to decode (too large,
            // or not a RateLimitRequest) comes to us as an error to answer,
            // rather than being answered by tonic.
            Ok(grpc.client_streaming(method, request).await)
        };
        match traced {
            None => Box::pin(call),
            Some(traced) => Box::pin(async move {
                let response = call.instrument(traced.span().clone()).await;
                if let Ok(response) = &response {
                    let code = grpc_status(response);
                    traced.record_status("rpc.grpc.status_code", i64::from(code));
                }
                response
            }),
        }
    }
}

/// The call's gRPC status code: in the headers of an answer that is only
/// a status (an error); a message's answer carries it in the trailers, and
/// is OK (0) whenever its message was written.
fn grpc_status<B>(response: &http::Response<B>) -> u16 {
    response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

struct ShouldRateLimit(Arc<Shared>);

impl ClientStreamingService<wire::RateLimitRequest> for ShouldRateLimit {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: Request<Streaming<wire::RateLimitRequest>>) -> Self::Future {
        let shared = self.0.clone();
        Box::pin(async move {
            let peer = request.remote_addr();
            let message = shared.read(request.into_inner()).await;
            let answer = shared.decide(message, peer).await;
            shared.metrics.rls.record_request(rls_answer(&answer));
            answer.map(Response::new)
        })
    }
}

impl Shared {
    /// The call's message (the first: a unary client sends no more), read
    /// under a read slot within [`READ_DEADLINE`]; past it, a
    /// RESOURCE_EXHAUSTED status that [`decide`](Self::decide) answers.
    async fn read(
        &self,
        mut stream: Streaming<wire::RateLimitRequest>,
    ) -> Result<Option<wire::RateLimitRequest>, Status> {
        let read = async {
            let _slot = self.read_slots.acquire().await;
            stream.message().await
        };
        match tokio::time::timeout(READ_DEADLINE, read).await {
            Ok(message) => message,
            Err(_) => Err(Status::resource_exhausted(
                "the message was not read within 1 s (no read slot free, or sent too slowly)",
            )),
        }
    }

    /// The answer to a call whose message decoded to `message` (`Ok(None)`:
    /// the call ended without one).
    async fn decide(
        &self,
        message: Result<Option<wire::RateLimitRequest>, Status>,
        peer: Option<SocketAddr>,
    ) -> Result<RateLimitResponse, Status> {
        let request = match message {
            Ok(Some(request)) => request,
            Ok(None) => {
                let status = Status::internal("no RateLimitRequest message");
                self.note(RlsRequestError::Malformed, status.message(), peer);
                return Err(status);
            }
            // Over the size bound (tonic's only OUT_OF_RANGE): denied, not
            // an error. Envoy sends one when a client's headers are large
            // (its header limit raised, a header copied into several
            // descriptors); an error would let that request through.
            Err(status) if status.code() == Code::OutOfRange => {
                self.note(RlsRequestError::TooLarge, status.message(), peer);
                return Ok(over_limit());
            }
            // Not read in time: denied too. An error would let the request
            // through, and a flood of slow calls must not switch limiting
            // off for the calls queued behind it.
            Err(status) if status.code() == Code::ResourceExhausted => {
                self.note(RlsRequestError::Overloaded, status.message(), peer);
                return Ok(over_limit());
            }
            // The client gave up (Envoy's own timeout): it reads no answer,
            // and its request was not refused, so no warning.
            Err(status) if status.code() == Code::Cancelled => {
                self.metrics.rls.record_error(RlsRequestError::Cancelled);
                return Err(status);
            }
            Err(status) => {
                self.note(RlsRequestError::Malformed, status.message(), peer);
                return Err(status);
            }
        };
        self.service.answer(request).await.map_err(|error| {
            if let RlsError::Invalid(why) = &error {
                self.note(RlsRequestError::Invalid, &why.0, peer);
            }
            error.into()
        })
    }

    /// Counts a call not decided as sent, and logs it unless one was
    /// logged less than [`LOG_EVERY`] ago. `why` names what was wrong,
    /// never a value (prost's and tonic's messages hold none).
    fn note(&self, reason: RlsRequestError, why: &str, peer: Option<SocketAddr>) {
        self.metrics.rls.record_error(reason);
        if let Some(unlogged) = self.log.admit() {
            let peer = peer.map(|p| p.to_string()).unwrap_or_default();
            // Behind Envoy's default failure_mode_deny: false, an error
            // status lets the call's request through unlimited.
            let answer = match reason {
                RlsRequestError::TooLarge | RlsRequestError::Overloaded => "OVER_LIMIT",
                _ => "an error status",
            };
            tracing::warn!(
                reason = reason.as_str(),
                answer,
                %peer,
                error = why,
                unlogged,
                "an Envoy RLS call was not decided as sent ({answer}); \
                 unlogged: such calls since the previous line"
            );
        }
    }
}

/// What a call was answered, as `ratekeeper_rls_requests_total` counts it:
/// the response's overall code, or an error status.
fn rls_answer(answer: &Result<RateLimitResponse, Status>) -> RlsAnswer {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as Overall;
    match answer {
        Ok(response) if response.overall_code == Overall::OverLimit as i32 => RlsAnswer::OverLimit,
        Ok(_) => RlsAnswer::Ok,
        Err(_) => RlsAnswer::Error,
    }
}
