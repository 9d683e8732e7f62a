//! The tokens file (`auth.tokens_file`) at the edge: reading it, judging it
//! with [`TokenSet::parse`]: the parser the tokens file's [`HotFile`] plugs
//! in, which swaps it in whole and is watched like the policies file
//! ([`crate::watch`]).
//!
//! No message, log line or metric here holds a token: parse errors name
//! the line only, the fingerprint that tells versions apart stays in
//! memory, and what is logged is counts per scope.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tracing::{error, info, warn};

use crate::domain::auth::{Scope, TokenFileError, TokenSet};
use crate::metrics::Metrics;
use crate::watch::hot::{HotFile, Parse};
use crate::watch::read::ReadError;
use crate::watch::source::{File, FileRead, Source};

/// The largest tokens file read: thousands of tokens fit; a wrong path (a
/// log file, say) is refused rather than read whole.
const MAX_FILE_BYTES: u64 = crate::watch::read::MAX_FILE_BYTES;

/// Why a tokens file was not loaded. The path is shown, never the content.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("cannot read the tokens file {path}: {source}")]
    Read { path: String, source: io::Error },
    /// The usual container mistake: a `chmod 600` file owned by the host's
    /// user, mounted into an image that runs as another uid.
    #[error(
        "cannot read the tokens file {path}: permission denied: ratekeeper runs as uid {uid}, \
         the file is owned by uid {owner} with mode {mode:03o}; make uid {uid} its owner \
         (chown {uid} {path}; the container image runs as 65532) and keep it chmod 600"
    )]
    Denied {
        path: String,
        uid: u32,
        owner: u32,
        mode: u32,
    },
    #[error("the tokens file {path} is {kind}; it must be a regular file")]
    NotAFile { path: String, kind: &'static str },
    #[error("the tokens file {path} is larger than {MAX_FILE_BYTES} bytes (1 MiB)")]
    TooLarge { path: String },
    #[error("the tokens file {path} is not UTF-8 text")]
    NotUtf8 { path: String },
    #[error("invalid tokens file {path}: {source}")]
    Invalid {
        path: String,
        source: TokenFileError,
    },
}

/// Who besides its owner could read or change the tokens file. Warned
/// about, not refused: a file others may read is as bad as one they may
/// write (either hands them the admin token), the first was only ever a
/// warning, and refusing at a reload would leave the old tokens in force
/// without fixing anything.
#[derive(Debug, Default, PartialEq, Eq)]
struct Exposure {
    /// `o+r`: every user of the host may read the tokens.
    readable_by_others: bool,
    /// `g+w` or `o+w`: its group or every user may add a token of their own.
    writable_by_others: bool,
    /// Directories on the way to it (the one named, and the real file's
    /// when it is a symlink) that every user may write and that are not
    /// sticky: anyone may rename another file over it.
    open_directories: Vec<PathBuf>,
}

impl Exposure {
    fn of(path: &Path, mode: u32) -> Exposure {
        let named = path.parent().filter(|p| !p.as_os_str().is_empty());
        let named = named.unwrap_or(Path::new(".")).to_path_buf();
        let real = std::fs::canonicalize(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        let mut open_directories = Vec::new();
        for dir in std::iter::once(named).chain(real) {
            let Ok(meta) = std::fs::metadata(&dir) else {
                continue;
            };
            let dir_mode = meta.permissions().mode();
            // The sticky bit (/tmp) lets only a file's owner rename it away.
            let open = dir_mode & 0o002 != 0 && dir_mode & 0o1000 == 0;
            let seen = open_directories.iter().any(|d: &PathBuf| same_dir(d, &dir));
            if open && !seen {
                open_directories.push(dir);
            }
        }
        Exposure {
            readable_by_others: mode & 0o004 != 0,
            writable_by_others: mode & 0o022 != 0,
            open_directories,
        }
    }

    fn warn(&self, file: &Path) {
        let file = file.display();
        if self.readable_by_others {
            warn!(
                %file,
                "the tokens file is readable by every user of this host; \
                 chmod 600 it (in Kubernetes, give the Secret volume defaultMode: 0400)"
            );
        }
        if self.writable_by_others {
            warn!(
                %file,
                "the tokens file is writable by its group or by every user of this host, \
                 who may add an admin token of their own; chmod 600 it"
            );
        }
        for dir in &self.open_directories {
            warn!(
                %file,
                directory = %dir.display(),
                "the tokens file's directory {} is writable by every user and not sticky: \
                 anyone may replace the file; chmod o-w it",
                dir.display()
            );
        }
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The error a read of `path` gave, as a [`TokensError`].
fn read_error(path: &Path, e: ReadError) -> TokensError {
    let shown = || path.display().to_string();
    match e {
        ReadError::Io(source) if source.kind() == io::ErrorKind::PermissionDenied => denied(path)
            .unwrap_or(TokensError::Read {
                path: shown(),
                source,
            }),
        ReadError::Io(source) => TokensError::Read {
            path: shown(),
            source,
        },
        ReadError::NotAFile(kind) => TokensError::NotAFile {
            path: shown(),
            kind,
        },
        ReadError::TooLarge(_) => TokensError::TooLarge { path: shown() },
    }
}

/// Who owns the unreadable file at `path`, and who we are.
fn denied(path: &Path) -> Option<TokensError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(TokensError::Denied {
        path: path.display().to_string(),
        uid: nix::unistd::geteuid().as_raw(),
        owner: meta.uid(),
        mode: meta.mode() & 0o7777,
    })
}

/// Judges the bytes read from `path`.
fn parse(path: &Path, bytes: &[u8]) -> Result<TokenSet, TokensError> {
    let shown = || path.display().to_string();
    let text = std::str::from_utf8(bytes).map_err(|_| TokensError::NotUtf8 { path: shown() })?;
    TokenSet::parse(text).map_err(|source| TokensError::Invalid {
        path: shown(),
        source,
    })
}

/// Reads and judges the file at `path` (the startup load). Read by the
/// reader of every watched file (following symlinks, so a Kubernetes
/// Secret's `..data` swap is seen): a FIFO or a device at the path is
/// refused, never waited on.
pub fn load(path: &Path) -> Result<TokenSet, TokensError> {
    let read = File.read(path).map_err(|e| read_error(path, e))?;
    parse(path, &read.bytes)
}

/// The tokens file as a hot file: a [`HotFile`] of [`TokensFile`].
pub type Reloader = HotFile<TokensFile>;

/// How the tokens file is judged, and who besides its owner may read or
/// change it (warned about at each load).
pub struct TokensFile {
    metrics: Arc<Metrics>,
}

impl Parse for TokensFile {
    type Source = File;
    type Value = TokenSet;
    type Error = TokensError;
    const WHAT: &'static str = "tokens file";
    const SOURCE: File = File;
    /// SIGHUP re-judges a rejected version only: the tokens in force are
    /// neither swapped nor logged again.
    const SIGHUP_RELOADS_UNCHANGED: bool = false;

    fn unreadable(&self, path: &Path, error: ReadError) -> TokensError {
        read_error(path, error)
    }

    fn parse(&self, path: &Path, read: &FileRead) -> Result<TokenSet, TokensError> {
        parse(path, &read.bytes)
    }

    fn count(set: &TokenSet) -> usize {
        set.len()
    }

    fn installed(&self, path: &Path, set: &TokenSet, read: &FileRead) {
        let n = set.len();
        let (check, admin) = (set.count(Scope::Check), set.count(Scope::Admin));
        self.metrics.auth.set_tokens(check, admin);
        info!(
            file = %path.display(),
            check,
            admin,
            "loaded {n} bearer tokens ({check} check, {admin} admin)"
        );
        Exposure::of(path, read.meta.permissions().mode()).warn(path);
    }

    fn rejected(&self, path: &Path, e: &TokensError) {
        error!(
            file = %path.display(),
            "tokens file rejected; the tokens in force stay: {e}"
        );
    }
}

/// Authentication as configured: the tokens in force (`None`: off) and
/// what reloads them.
pub struct Tokens {
    pub tokens: Option<Arc<ArcSwap<TokenSet>>>,
    pub reloader: Option<Arc<Reloader>>,
}

/// Loads `auth.tokens_file` if set (any problem fails startup). Without
/// one, warns once when `listen` is reachable from other hosts.
pub fn start(
    file: Option<&Path>,
    listen: std::net::SocketAddr,
    metrics: &Arc<Metrics>,
) -> Result<Tokens, TokensError> {
    let Some(path) = file else {
        if !listen.ip().is_loopback() {
            warn!(
                %listen,
                "no auth.tokens_file: anyone who reaches {listen} may call every endpoint; \
                 set auth.tokens_file, or listen on a loopback address"
            );
        }
        return Ok(Tokens {
            tokens: None,
            reloader: None,
        });
    };
    let tokens = Arc::new(ArcSwap::from_pointee(TokenSet::default()));
    let parser = TokensFile {
        metrics: metrics.clone(),
    };
    let counted = metrics.reloads.tokens.clone();
    let reloader = HotFile::new(path.to_path_buf(), parser, tokens.clone(), counted);
    reloader.load_initial()?;
    Ok(Tokens {
        tokens: Some(tokens),
        reloader: Some(Arc::new(reloader)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tokens file goes through the shared reader: a FIFO and a link
    /// to a device are refused, with what they are, and never read.
    #[test]
    fn a_fifo_or_a_device_is_refused() {
        let dir = std::env::temp_dir().join(format!("rk-tokens-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let zero = dir.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (path, kind) in [(fifo, "a FIFO"), (zero, "a device")] {
            let err = load(&path).unwrap_err();
            assert!(
                matches!(err, TokensError::NotAFile { kind: k, .. } if k == kind),
                "{err}"
            );
            assert!(err.to_string().ends_with("; it must be a regular file"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
