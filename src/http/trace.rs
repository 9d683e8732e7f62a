//! Traces of the HTTP API (`[otel]`): a span per request to a route, a
//! child of the caller's `traceparent`, named by its method and route
//! template (never by its path, which may hold a key). Added to the router
//! only when traces are on; then a request the sampler does not take costs
//! a header lookup and builds no span.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use futures_util::future::{BoxFuture, Either};
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;

use crate::telemetry::otel::{self, Server};

#[derive(Clone, Copy)]
pub(super) struct TraceLayer;

impl<S> Layer<S> for TraceLayer {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Traced<S> {
        Traced { inner }
    }
}

#[derive(Clone)]
pub(super) struct Traced<S> {
    inner: S,
}

impl<S> Service<Request> for Traced<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or("", |path| path.as_str());
        let server = Server::Http {
            method: request.method().as_str(),
            route,
        };
        let traced = otel::server_span(request.headers(), server);
        let Some(traced) = traced else {
            return Either::Left(self.inner.call(request));
        };
        let answer = self.inner.call(request).instrument(traced.span().clone());
        Either::Right(Box::pin(async move {
            let response = answer.await?;
            traced.record_status(
                "http.response.status_code",
                &i64::from(response.status().as_u16()),
            );
            Ok(response)
        }))
    }
}
