//! The Lua script, compiled into the binary: one script for every call.
//! `lua/lib.lua` holds the shared helpers; each `lua/<algorithm>.lua`
//! defines one algorithm's function (and its refund); `lua/check.lua`
//! applies the limits of one check all or nothing, `lua/adjust.lua` resets,
//! refunds or settles them, and `lua/ops.lua` applies a list of such operations.
//! The numbers both sides must agree on are generated into it from
//! `store::redis::wire`, so every call, of one operation or of a batch, is
//! one self-contained FCALL of the same code loaded as a function library
//! ([`LIBRARY`]), or EVALSHA of the script ([`OPS`]) where functions
//! cannot be used.

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

/// Everything before the entry point: constants, tables and functions.
fn definitions() -> String {
    [
        wire::prelude().as_str(),
        FUNCTIONS,
        wire::tables().as_str(),
        include_str!("../../lua/check.lua"),
        ADJUST,
    ]
    .join("\n")
}

/// The operations other than a check, and their dispatch table.
const ADJUST: &str = include_str!("../../lua/adjust.lua");

/// The entry point: applies the call's operations and returns the reply.
const ENTRY: &str = include_str!("../../lua/ops.lua");

/// The script: `KEYS`, `ARGV` and the reply are `store::redis::wire`'s.
pub static OPS: LazyLock<String> = LazyLock::new(|| [definitions().as_str(), ENTRY].join("\n"));

/// The same code as a Redis function library (Redis 7), and the name of
/// both the library and its one function: `ratekeeper_` and the first 16
/// hex digits of the script's SHA-1, so instances of two versions (a
/// rolling upgrade) load two libraries rather than replace each other's.
///
/// Why a library as well as the script: EVAL runs the whole script on
/// every call, and defining its ~36 functions again took about 3 µs of a
/// lone check's 13 inside Redis; a library's body runs once, when it is
/// loaded, and FCALL runs only the entry point (`store::redis::function`).
/// `KEYS` and `ARGV` are the library's locals, set on each call: a
/// function gets them as arguments, not as globals, and the code between
/// reads them the same way in both forms.
pub static LIBRARY: LazyLock<(String, String)> = LazyLock::new(|| {
    let sha = fred::util::sha1_hash(&OPS);
    let name = format!("ratekeeper_{}", &sha[..16]);
    let code = format!(
        "#!lua name={name}\n\
         local KEYS, ARGV\n\
         {}\n\
         redis.register_function('{name}', function(keys, args)\n\
         KEYS, ARGV = keys, args\n\
         {ENTRY}\n\
         end)\n",
        definitions(),
    );
    (name, code)
});

#[cfg(test)]
mod tests {
    use crate::domain::algorithms::sliding_log::MAX_EXACT_ENTRIES;
    use crate::store::OpKind;

    /// The script knows an operation by its generated name only: each
    /// `OP_<NAME>` is defined once from [`OpKind`], every one is
    /// dispatched (a check by `ops.lua`, the rest by `adjust.lua`'s
    /// `ADJUST` table), and no comparison of `op` names a bare number.
    #[test]
    fn the_script_dispatches_every_operation_by_its_generated_name() {
        for kind in OpKind::ALL {
            let name = format!("OP_{}", kind.name().to_uppercase());
            let line = format!("\nlocal {name} = {}\n", kind.code());
            assert_eq!(super::OPS.matches(&line).count(), 1, "{line}");
            let dispatched = match kind {
                OpKind::Check => super::ENTRY.contains(&format!("op == {name} ")),
                _ => super::ADJUST.contains(&format!("\n  [{name}] = function(")),
            };
            assert!(dispatched, "{name}");
        }
        for (at, _) in super::OPS
            .match_indices("op ==")
            .chain(super::OPS.match_indices("op ~="))
        {
            let operand = super::OPS[at + 5..].trim_start();
            assert!(operand.starts_with("OP_"), "{}", &super::OPS[at..at + 20]);
        }
    }

    #[test]
    fn the_sliding_log_bound_is_the_same_in_lua_and_rust() {
        let line = format!("\nlocal MAX_EXACT_ENTRIES = {MAX_EXACT_ENTRIES}\n");
        assert!(super::OPS.contains(&line), "lua/sliding_log.lua: {line}");
    }
}
