//! The image and compose file under a real Docker Engine, and faults between hosts in containers: a partition, Sentinel and Cluster failover.
//!
//! One test binary (see docs/development.md): each module below was a test file of its own.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod container_cluster;
mod container_compose;
mod container_image;
mod container_partition;
mod container_sentinel;
