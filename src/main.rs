#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

// Profiling under load showed glibc malloc/free at ~13% of CPU: every request
// allocates its body, headers and response. mimalloc's thread-local free
// lists cut that; the bare-axum ceiling in bench/ uses it too, so the
// comparison stays fair.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    ratekeeper::cli::run(ratekeeper::cli::Cli::parse()).await
}
