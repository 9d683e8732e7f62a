//! ratekeeper: a rate-limit decision service. Callers POST "may this key
//! spend this much now?" and get allowed / remaining / retry-after back.
//!
//! The user documentation is `README.md` (the front page) and `docs/`, one
//! page per topic: the API, the algorithms, policies, proxies, the Envoy
//! rate limit service, operations, configuration, failure modes,
//! deployment, observability, benchmarks. `docs/development.md` has this
//! map down to every file, what each test checks, and how to add an
//! algorithm. Each module's doc says why it is built the way it is; the
//! user docs state the behaviour and link here.
//!
//! # Layout
//! Requests flow one way, transport → limiter → store, and answers return
//! the same way.
//!
//! - [`cli`]: the command line (`serve`, `openapi`, `policies check`, ...);
//!   `main` only calls it.
//! - [`config`]: layered settings, one struct per section of the file,
//!   each key named once by its reader; validated all at once.
//! - [`app`]: builds the listener, store, limiter and router; runs until a signal.
//! - [`telemetry`]: logging setup.
//! - [`metrics`]: every Prometheus metric, one struct per concern, each
//!   registering its own families; labels from the domain's enums.
//! - [`policies`]: the policies file: reading, validating, swapping it in
//!   whole.
//! - [`watch`]: reloading a config path (the policies file, `rls.config`)
//!   on file events, SIGHUP and a slow poll; [`watch::hot::HotFile`], the
//!   one hot-file type those files plug a parser into; [`watch::read`], the
//!   one bounded reader of every watched file.
//! - [`tasks`]: every spawned task, tracked, so shutdown can wait for them.
//! - [`tokens`]: the bearer tokens file (`auth.tokens_file`): reading it,
//!   swapping it in whole, reloading it like the policies file.
//! - [`rls`]: the Envoy RLS v3 gRPC server, its bearer-token check (the
//!   same tokens as HTTP) and its `rls.config` files.
//! - [`http`]: the axum transport: routes, request/response types, errors, OpenAPI;
//!   [`http::server`] is the accept loop with connection timeouts and limits.
//! - [`listener`]: what the HTTP and gRPC listeners share: the accept
//!   back-off, connection caps, read and write deadlines, and fitting the
//!   caps under the open-files limit.
//! - [`limiter`]: one pipeline ([`limiter::Limiter::run`]) decides every
//!   request, a single check as a list of one: deny cache, leasing, breaker,
//!   store call, degraded answer, waiting, invalidation, observation; resets,
//!   refunds and settles are never answered by the failure policy. The
//!   circuit breakers, the local fallback, and [`limiter::deny_cache`], which answers repeated denials
//!   locally, exactly, without a store call; [`limiter::wait`], checks that
//!   wait for their `retry_after` (`wait_ms`), in a line per key.
//! - [`store`]: the [`store::Store`] trait (a list of operations in, each
//!   named by [`store::OpKind`]), the Redis store (Lua scripts) and the
//!   embedded in-memory store.
//! - [`domain`]: rules, decisions, the failure policy and the six
//!   algorithms (five rate limits and concurrency leases) as pure
//!   functions; no HTTP, Redis or async here.
#![forbid(unsafe_code)]

// The unit tests share the integration tests' helpers, which name the
// crate by its name.
#[cfg(test)]
extern crate self as ratekeeper;

pub mod app;
pub mod cli;
pub mod config;
pub mod domain;
pub mod http;
pub mod limiter;
pub mod listener;
pub mod metrics;
pub mod policies;
pub mod rls;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod tenants;
pub mod tls;
pub mod tokens;
pub mod watch;

/// The deny cache lives in the limiter; this path is kept for callers.
pub use limiter::deny_cache;
