//! Fitting the listeners' connection caps under the open-files limit.
//!
//! Every connection holds a file descriptor. If the caps together exceed
//! the limit, a flood reaches EMFILE before any cap: then every accept
//! fails (the other listener's too, `/healthz` included), and so does
//! every open of a file, so a reload of the tokens or policies cannot take
//! effect. The caps are therefore lowered, in proportion, until they and a
//! reserve for everything else fit.

use tracing::warn;

/// File descriptors for everything but client connections and Redis: the
/// standard streams, the runtime's (epoll, wakers), the two listening
/// sockets, the file watchers, and the files a reload opens at once.
pub const BASE_RESERVE: usize = 64;

/// Raises the soft limit on open files to the hard limit, so that the caps
/// are not cut short by a low default soft limit (often 1024). Returns the
/// resulting soft limit.
pub fn raise_fd_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Some(hard),
        Err(error) => {
            warn!(%error, soft, hard, "cannot raise the open-files limit");
            Some(soft)
        }
    }
}

/// The listeners' connection caps; `grpc` is `None` without `grpc.listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub http: usize,
    pub grpc: Option<usize>,
}

impl Caps {
    fn total(self) -> u128 {
        self.http as u128 + self.grpc.unwrap_or(0) as u128
    }
}

/// The caps lowered, in proportion, so that they and `reserve` fit within
/// `limit`; unchanged when they already do. Each stays at least 1: a limit
/// below the reserve is reported, but the service still starts.
pub fn fit(limit: u64, caps: Caps, reserve: usize) -> Caps {
    let limit = u128::from(limit);
    let reserve = reserve as u128;
    if caps.total() + reserve <= limit {
        return caps;
    }
    let available = limit.saturating_sub(reserve);
    let share = |cap: usize| (available * cap as u128 / caps.total()).max(1) as usize;
    match caps.grpc {
        None => Caps {
            http: share(caps.http),
            grpc: None,
        },
        Some(grpc) => {
            let http = share(caps.http);
            // What the HTTP share left, so rounding loses nothing.
            let left = available.saturating_sub(http as u128) as usize;
            Caps {
                http,
                grpc: Some(left.min(grpc).max(1)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_that_fit_are_kept() {
        let caps = Caps {
            http: 10_000,
            grpc: Some(1_000),
        };
        assert_eq!(fit(20_000, caps, 100), caps);
        assert_eq!(fit(11_100, caps, 100), caps);
    }

    #[test]
    fn caps_that_do_not_fit_are_lowered_in_proportion() {
        let caps = Caps {
            http: 10_000,
            grpc: Some(1_000),
        };
        let fitted = fit(1_200, caps, 100);
        assert_eq!(fitted.http, 1_000);
        assert_eq!(fitted.grpc, Some(100));
        let alone = fit(
            1_100,
            Caps {
                http: 10_000,
                grpc: None,
            },
            100,
        );
        assert_eq!(alone.http, 1_000);
    }

    #[test]
    fn a_limit_below_the_reserve_leaves_one_each() {
        let caps = Caps {
            http: 10_000,
            grpc: Some(1_000),
        };
        assert_eq!(
            fit(50, caps, 100),
            Caps {
                http: 1,
                grpc: Some(1)
            }
        );
    }
}
