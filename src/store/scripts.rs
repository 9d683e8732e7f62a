//! The Lua scripts, compiled into the binary. `lua/lib.lua` holds the shared
//! helpers and documents the calling convention; each `lua/<algorithm>.lua`
//! defines one function; a script is the helpers, the function(s) and an
//! entry point, so each check (or batch) is one self-contained EVALSHA.

use crate::domain::Algorithm;

/// One check: `KEYS[1]`, `ARGV` = now|'', limit, window_us, cost, burst, ttl_pad_ms.
macro_rules! single {
    ($file:literal, $function:literal) => {
        concat!(
            include_str!("../../lua/lib.lua"),
            "\n",
            include_str!(concat!("../../lua/", $file)),
            "\nreturn ",
            $function,
            "(KEYS[1], clock(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ",
            "tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))\n"
        )
    };
}

pub const FIXED_WINDOW: &str = single!("fixed_window.lua", "fixed_window");
pub const SLIDING_WINDOW: &str = single!("sliding_window.lua", "sliding_window");
pub const SLIDING_LOG: &str = single!("sliding_log.lua", "sliding_log");
pub const TOKEN_BUCKET: &str = single!("token_bucket.lua", "token_bucket");
pub const GCRA: &str = single!("gcra.lua", "gcra");

/// Many checks in order: see `lua/batch.lua`.
pub const BATCH: &str = concat!(
    include_str!("../../lua/lib.lua"),
    "\n",
    include_str!("../../lua/fixed_window.lua"),
    "\n",
    include_str!("../../lua/sliding_window.lua"),
    "\n",
    include_str!("../../lua/sliding_log.lua"),
    "\n",
    include_str!("../../lua/token_bucket.lua"),
    "\n",
    include_str!("../../lua/gcra.lua"),
    "\n",
    include_str!("../../lua/batch.lua"),
);

/// The full source of `algorithm`'s single-check script.
pub fn source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => FIXED_WINDOW,
        Algorithm::SlidingWindow => SLIDING_WINDOW,
        Algorithm::SlidingLog => SLIDING_LOG,
        Algorithm::TokenBucket => TOKEN_BUCKET,
        Algorithm::Gcra => GCRA,
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::algorithms::sliding_log::MAX_EXACT_ENTRIES;

    #[test]
    fn the_sliding_log_bound_is_the_same_in_lua_and_rust() {
        let line = format!("\nlocal MAX_EXACT_ENTRIES = {MAX_EXACT_ENTRIES}\n");
        assert!(
            super::SLIDING_LOG.contains(&line),
            "lua/sliding_log.lua: {line}"
        );
    }
}
