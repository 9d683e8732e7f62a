//! The embedded store's file of runtime entries (`tenants.file`): the
//! whole state as one JSON document, replaced atomically at every change
//! (written beside, synced, renamed over), so a crash leaves the old file
//! or the new one, never half of either. Read once, at startup.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::domain::tenants::Entry;
use crate::watch::read::{ReadError, read_regular};

/// The largest file read: 10 000 entries and the audit list are about
/// 5 MiB; a wrong path is refused rather than read whole.
const MAX_FILE_BYTES: u64 = 64 << 20;
/// The document's format, so a later one can be told apart.
const FORMAT: u32 = 1;

/// What the file holds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Saved {
    pub format: u32,
    pub version: u64,
    pub entries: Vec<Entry>,
    /// Audit records, newest first, each a JSON object's text.
    pub audit: Vec<String>,
}

/// Why the file was not read or written. The path is named; the content,
/// which holds nothing secret but may be large, is not quoted.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read the tenants file {path}: {source}")]
    Read { path: String, source: ReadError },
    #[error(
        "the tenants file {path} is not a valid document ({source}); it was not loaded, and \
         nothing is written over it: fix it, or move it away to start with no entries"
    )]
    Corrupt {
        path: String,
        source: serde_json::Error,
    },
    #[error("the tenants file {path} has format {found}; this build reads format {FORMAT}")]
    Format { path: String, found: u32 },
    #[error("cannot write the tenants file {path}: {source}")]
    Write { path: String, source: io::Error },
}

/// The file's state; `None` when there is no file yet.
pub(super) fn load(path: &Path) -> Result<Option<Saved>, FileError> {
    let shown = || path.display().to_string();
    let bytes = match read_regular(path, MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FileError::Read {
                path: shown(),
                source,
            });
        }
    };
    let saved: Saved = serde_json::from_slice(&bytes).map_err(|source| FileError::Corrupt {
        path: shown(),
        source,
    })?;
    if saved.format != FORMAT {
        return Err(FileError::Format {
            path: shown(),
            found: saved.format,
        });
    }
    Ok(Some(saved))
}

/// What is written: [`Saved`] by reference.
#[derive(Serialize)]
struct ToSave<E, A> {
    format: u32,
    version: u64,
    entries: E,
    audit: A,
}

/// Replaces the file with the state given, atomically. The whole document
/// is written at every change: a change costs time in proportion to the
/// entries held (about 5 ms at 10 000).
pub(super) fn save<'a>(
    path: &Path,
    version: u64,
    entries: impl Iterator<Item = &'a Entry> + Clone,
    audit: impl Iterator<Item = &'a String> + Clone,
) -> Result<(), FileError> {
    let failed = |source| FileError::Write {
        path: path.display().to_string(),
        source,
    };
    let document = ToSave {
        format: FORMAT,
        version,
        entries: Seq(entries),
        audit: Seq(audit),
    };
    let bytes = serde_json::to_vec(&document)
        .map_err(io::Error::other)
        .map_err(failed)?;
    let beside = beside(path);
    let written = (|| {
        let mut file = std::fs::File::create(&beside)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&beside, path)?;
        // The rename itself is durable once the directory is synced.
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        std::fs::File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&beside);
    }
    written.map_err(failed)
}

/// The temporary file a new version is written to, in the same directory
/// (a rename across file systems is not atomic).
fn beside(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// An iterator serialized as a JSON array, without collecting it.
struct Seq<I>(I);

impl<I> Serialize for Seq<I>
where
    I: Iterator + Clone,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}
