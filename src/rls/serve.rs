//! The gRPC server of the RLS: tonic's HTTP/2 bounds, each call through the
//! bearer check (`auth.rs`) into the service (`service.rs`), which answers
//! with `server.rs`. Apart from them, so that they import one way.

use std::future::Future;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;

use super::auth::RlsAuth;
use super::listener::{Ended, Incoming, Tracked};
use super::server::{MAX_REQUEST_BYTES, RlsService};
use super::service::{RlsServer, SHOULD_RATE_LIMIT};

/// Streams (calls) at once, per HTTP/2 connection.
const MAX_STREAMS: u32 = 100;
/// A call's deadline: a store call is bounded by `redis.timeout` anyway,
/// this ends what a stalled client or store would otherwise hold.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 pings find dead peers (a half-open connection holds its streams).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `service` on the `incoming` connections, each call through
/// `auth` first, until `stop` turns true; the server then drains (see
/// [`super::listener::serve`]) and ends. A future for the caller to spawn.
pub fn serve(
    incoming: Incoming,
    service: RlsService,
    auth: RlsAuth,
    stop: tokio::sync::watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let server = RlsServer::new(service, auth.metrics.clone());
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(MAX_STREAMS))
        // What HTTP/2 buffers of a connection's unread request data: with
        // the default (1 MiB a connection) a thousand slow connections
        // would hold a gigabyte.
        .initial_stream_window_size(Some(MAX_REQUEST_BYTES as u32))
        .initial_connection_window_size(Some(2 * MAX_REQUEST_BYTES as u32))
        .concurrency_limit_per_connection(MAX_STREAMS as usize)
        .timeout(CALL_TIMEOUT)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(InterceptedService::new(
            Tracked::new(server, SHOULD_RATE_LIMIT),
            auth,
        ));
    let serve_one = move |one, ended: Ended| {
        router
            .clone()
            .serve_with_incoming_shutdown(one, ended.wait())
    };
    super::listener::serve(incoming, serve_one, stop)
}
