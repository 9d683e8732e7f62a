//! The stores and their parity: every scenario on the embedded store and on a real Redis (single, Cluster, Sentinel), the Lua scripts against the Rust functions, exact admission under concurrency, and the invalidation channel.
//!
//! One test binary (see docs/development.md): each module below was a test file of its own.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod calendar;
mod cluster;
mod cluster_domains;
mod concurrency;
mod concurrency_leases;
mod functions;
mod give_back;
mod hot_keys;
mod invalidation;
mod invalidation_cluster;
mod invalidation_sentinel;
mod legacy_keys;
mod levels;
mod levels_parity;
mod multi_parity;
mod parity;
mod policy_concurrency;
mod redis_adjust;
mod redis_batch_errors;
mod redis_store;
mod sentinel;
mod settle;
mod stores;
mod stores_adjust;
mod stores_multi;
mod tls;
