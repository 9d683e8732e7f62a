//! The Lua scripts, compiled into the binary. `lua/lib.lua` holds the shared
//! helpers and documents the calling convention; each `lua/<algorithm>.lua`
//! defines one function (and its refund) and `lua/check.lua` applies the
//! limits of one check all or nothing; `lua/adjust.lua` resets or refunds
//! them. A script is all of these and an entry point, so each check (or
//! batch, reset, refund) is one self-contained EVALSHA.

/// The five algorithm functions and `check_all`, after the helpers.
macro_rules! functions {
    () => {
        concat!(
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
            include_str!("../../lua/check.lua"),
        )
    };
}

/// One check of one or more limits: `KEYS` = the limits' keys, `ARGV` =
/// now|'', ttl_pad_ms, cost, then per limit tag, limit, window_us, burst
/// (see `lua/lib.lua`).
pub const CHECK: &str = concat!(
    functions!(),
    "\nreturn check_all(0, 3, #KEYS, clock(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[2]), {})\n"
);

/// Deletes the state of one check's limits, then answers like a check of
/// cost 0: the same `KEYS` and `ARGV` as [`CHECK`] (see `lua/adjust.lua`).
pub const RESET: &str = concat!(
    functions!(),
    "\n",
    include_str!("../../lua/adjust.lua"),
    "\nreturn reset_all(clock(ARGV[1]), tonumber(ARGV[2]))\n"
);

/// Gives back up to `cost` (`ARGV[3]`) on each of one check's limits, then
/// answers like a check of cost 0: the same `KEYS` and `ARGV` as [`CHECK`].
pub const REFUND: &str = concat!(
    functions!(),
    "\n",
    include_str!("../../lua/adjust.lua"),
    "\nreturn refund_all(clock(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[2]))\n"
);

/// Many checks in order: see `lua/batch.lua`.
pub const BATCH: &str = concat!(functions!(), "\n", include_str!("../../lua/batch.lua"));

/// The script named `name` (`check`, `batch`, `reset` or `refund`), for
/// `ratekeeper script`.
pub fn named(name: &str) -> Option<&'static str> {
    match name {
        "check" => Some(CHECK),
        "batch" => Some(BATCH),
        "reset" => Some(RESET),
        "refund" => Some(REFUND),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::algorithms::sliding_log::MAX_EXACT_ENTRIES;

    #[test]
    fn the_sliding_log_bound_is_the_same_in_lua_and_rust() {
        let line = format!("\nlocal MAX_EXACT_ENTRIES = {MAX_EXACT_ENTRIES}\n");
        assert!(super::CHECK.contains(&line), "lua/sliding_log.lua: {line}");
    }
}
