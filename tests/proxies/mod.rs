// Each test binary runs one of these proxies and leaves the others unused.
#![allow(dead_code)]

pub mod nginx;
pub mod traefik;
