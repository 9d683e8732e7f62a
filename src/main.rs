#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

// Profiling under load showed glibc malloc/free at ~13% of CPU: every request
// allocates its body, headers and response. mimalloc's thread-local free
// lists cut that; the bare-axum ceiling in bench/ uses it too, so the
// comparison stays fair.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = ratekeeper::cli::Cli::parse();
    // The runtime is built here rather than by `#[tokio::main]` so that
    // `server.worker_threads` can size it; without it, tokio's default.
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = ratekeeper::cli::worker_threads(&cli) {
        runtime.worker_threads(workers);
    }
    match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(ratekeeper::cli::run(cli)),
        Err(error) => {
            eprintln!("ratekeeper: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}
