//! The binary as an operator meets it, and what ships beside it: the CLI, startup and config readers, the docs against the code, schemathesis and a generated client against the OpenAPI document, Prometheus rules and a live Prometheus with the dashboard, Kubernetes manifests.
//!
//! One test binary (see docs/development.md): each module below was a test file of its own.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;
mod kubernetes_support;
mod prometheus_support;
#[path = "../rls_support/mod.rs"]
mod rls_support;

mod auth_binary;
mod auth_startup;
mod cli;
mod cli_client;
mod config_readers;
mod generated_client;
mod house;
mod kubernetes;
mod kubernetes_pod;
mod otel;
mod otel_export;
mod policies_cli;
mod prometheus_live;
mod prometheus_rules;
mod prometheus_tls;
mod readme_errors;
mod readme_examples;
mod schemathesis;
mod tls_config;
