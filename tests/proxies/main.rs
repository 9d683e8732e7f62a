//! What sits in front: nginx, Traefik and Envoy (ext_authz and the rate limit service) run for real, the Envoy RLS gRPC server and its listener, and the client middlewares of examples/clients.
//!
//! One test binary (see docs/development.md): each module below was a test file of its own.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;
mod clients_support;
#[path = "../policy_checks/mod.rs"]
mod policy_checks;
#[path = "../rls_support/mod.rs"]
mod rls_support;
mod servers;

mod clients;
mod envoy_ext_authz;
mod envoy_grpc_idle;
mod envoy_otel;
mod envoy_ratelimit;
mod envoy_rls_input;
mod envoy_tls;
mod envoy_tokens;
mod grpc_listener;
mod listener_tls;
mod listener_tls_grpc;
mod llm_gateway;
mod nginx_auth;
mod nginx_tokens;
mod rls;
mod rls_auth;
mod rls_cluster;
mod rls_input;
mod rls_reload;
mod traefik_auth;
mod traefik_tokens;
