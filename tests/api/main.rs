//! The HTTP API, black box: the runtime overrides, blocks and exemptions, the check forms, batches of checks, reset and refund, forward-auth, bearer tokens, waiting, /v1/top, the OpenAPI document, metrics at startup, slow clients, and the policies file reloading.
//!
//! One test binary (see docs/development.md): each module below was a test file of its own.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;
#[path = "../policy_checks/mod.rs"]
mod policy_checks;
#[macro_use]
mod forward_auth_support;
mod batch_support;

mod auth_tokens;
mod batch;
mod batch_parity;
mod calendar;
mod draws;
mod forward_auth;
mod forward_auth_keys;
mod hierarchies;
mod http_adjust;
mod http_api;
mod leases;
mod levels;
mod metrics_startup;
mod openapi;
mod policies_api;
mod policies_api_errors;
mod policies_reload;
mod policies_reload_load;
mod policies_watch;
mod settle;
mod settle_abuse;
mod settle_refused;
mod slow_clients;
mod tenants;
mod tenants_store;
mod top;
mod wait;
mod wait_wake;
mod waiters_cap;
