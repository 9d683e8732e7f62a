//! The Lua script, compiled into the binary: one script for every call.
//! `lua/lib.lua` holds the shared helpers; each `lua/<algorithm>.lua`
//! defines one algorithm's function (and its refund); `lua/check.lua`
//! applies the limits of one check all or nothing, `lua/adjust.lua` resets,
//! refunds or settles them, and `lua/ops.lua` applies a list of such operations.
//! The numbers both sides must agree on are generated into it from
//! `store::redis::wire`, so every call, of one operation or of a batch, is
//! one self-contained EVALSHA.

use std::sync::LazyLock;

use super::redis::wire;

/// The helpers and the six algorithm functions, in definition order.
const FUNCTIONS: &str = concat!(
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
    include_str!("../../lua/concurrency.lua"),
    "\n",
);

/// The script: `KEYS`, `ARGV` and the reply are `store::redis::wire`'s.
pub static OPS: LazyLock<String> = LazyLock::new(|| {
    [
        wire::prelude().as_str(),
        FUNCTIONS,
        wire::tables().as_str(),
        include_str!("../../lua/check.lua"),
        include_str!("../../lua/adjust.lua"),
        include_str!("../../lua/ops.lua"),
    ]
    .join("\n")
});

#[cfg(test)]
mod tests {
    use crate::domain::algorithms::sliding_log::MAX_EXACT_ENTRIES;

    #[test]
    fn the_sliding_log_bound_is_the_same_in_lua_and_rust() {
        let line = format!("\nlocal MAX_EXACT_ENTRIES = {MAX_EXACT_ENTRIES}\n");
        assert!(super::OPS.contains(&line), "lua/sliding_log.lua: {line}");
    }
}
