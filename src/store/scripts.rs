//! The Lua scripts, compiled into the binary. Each is `lua/lib.lua` (the
//! shared calling convention and helpers) followed by the algorithm's file,
//! whose header states its KEYS, ARGV and reply.

use crate::domain::Algorithm;

macro_rules! script {
    ($file:literal) => {
        concat!(
            include_str!("../../lua/lib.lua"),
            "\n",
            include_str!(concat!("../../lua/", $file))
        )
    };
}

pub const FIXED_WINDOW: &str = script!("fixed_window.lua");
pub const SLIDING_WINDOW: &str = script!("sliding_window.lua");
pub const SLIDING_LOG: &str = script!("sliding_log.lua");
pub const TOKEN_BUCKET: &str = script!("token_bucket.lua");
pub const GCRA: &str = script!("gcra.lua");

/// The full source of `algorithm`'s script.
pub fn source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => FIXED_WINDOW,
        Algorithm::SlidingWindow => SLIDING_WINDOW,
        Algorithm::SlidingLog => SLIDING_LOG,
        Algorithm::TokenBucket => TOKEN_BUCKET,
        Algorithm::Gcra => GCRA,
    }
}
