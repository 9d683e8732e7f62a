#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    ratekeeper::cli::run(ratekeeper::cli::Cli::parse()).await
}
