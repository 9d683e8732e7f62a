//! Failures: Redis killed, frozen, restarted or silently cut; the circuit breakers; the local fallback.
//!
//! One test binary (see docs/development.md): each module below was a test file of its own.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;
mod domains_store;

mod breaker;
mod breaker_bench;
mod breaker_lifecycle;
mod breaker_states;
mod dead_connection;
mod failure;
mod lease_outage;
mod local_fallback;
mod overload;
mod restart;
