//! Where a hot file's versions come from: one regular file ([`File`]: the
//! policies file, the tokens file), or a file or directory of files
//! ([`Files`]: `rls.config`). Each file is read by the one bounded reader
//! ([`super::read`]), so a FIFO or a device at the path is refused, never
//! waited on.

use std::fmt::Display;
use std::fs::Metadata;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::read::{MAX_FILE_BYTES, ReadError, read_regular, read_with_metadata};

/// A kind of path a [`super::hot::HotFile`] watches, and how to read it.
pub trait Source: Send + Sync + 'static {
    /// What one read gives, for the parser.
    type Read: Send;
    type Error: Display;
    /// Reads what the path holds now. Blocking IO.
    fn read(&self, path: &Path) -> Result<Self::Read, Self::Error>;
    /// What tells versions apart: equal for equal content (and names).
    /// Kept in memory only: of a file holding one short token, a digest
    /// is no thing to log either.
    fn fingerprint(read: &Self::Read) -> [u8; 32];
}

/// One regular file, at most [`MAX_FILE_BYTES`].
pub struct File;

/// What [`File`] read: the bytes, and the metadata of the file they came
/// from (its mode, say), not of whatever the path names a moment later.
pub struct FileRead {
    pub bytes: Vec<u8>,
    pub meta: Metadata,
}

impl Source for File {
    type Read = FileRead;
    type Error = ReadError;

    fn read(&self, path: &Path) -> Result<FileRead, ReadError> {
        let (bytes, meta) = read_with_metadata(path, MAX_FILE_BYTES)?;
        Ok(FileRead { bytes, meta })
    }

    fn fingerprint(read: &FileRead) -> [u8; 32] {
        Sha256::digest(&read.bytes).into()
    }
}

/// A file, or the files of a directory whose names end with one of
/// `extensions` (sorted; hidden ones skipped: a Kubernetes ConfigMap's
/// `..data` links), each at most [`MAX_FILE_BYTES`]. The bounds keep what
/// one reload reads and parses bounded whatever the directory holds.
pub struct Files {
    pub extensions: &'static [&'static str],
    /// The most files a directory may hold ...
    pub max_files: usize,
    /// ... and the most bytes they may hold together.
    pub max_total_bytes: u64,
}

/// Every file's path and bytes, as they are now.
pub type Snapshot = Vec<(PathBuf, Vec<u8>)>;

/// Why [`Files`] read nothing: `path` is the directory, or the one file
/// that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct FilesError {
    pub path: PathBuf,
    pub reason: FilesReason,
}

#[derive(Debug, thiserror::Error)]
pub enum FilesReason {
    #[error("{0}")]
    List(io::Error),
    #[error("{0}")]
    Read(ReadError),
    #[error("more than {max} {patterns} files")]
    TooMany { max: usize, patterns: String },
    #[error("its files hold more than {0} bytes together")]
    TooLarge(u64),
}

impl Source for Files {
    type Read = Snapshot;
    type Error = FilesError;

    fn read(&self, path: &Path) -> Result<Snapshot, FilesError> {
        let mut total = 0;
        let mut files = Vec::new();
        for file in self.files_of(path)? {
            let bytes = read_regular(&file, MAX_FILE_BYTES).map_err(|e| FilesError {
                path: file.clone(),
                reason: FilesReason::Read(e),
            })?;
            total += bytes.len() as u64;
            if total > self.max_total_bytes {
                let reason = FilesReason::TooLarge(self.max_total_bytes);
                return Err(error(path, reason));
            }
            files.push((file, bytes));
        }
        Ok(files)
    }

    fn fingerprint(files: &Snapshot) -> [u8; 32] {
        let mut hash = Sha256::new();
        for (path, bytes) in files {
            let name = path.to_string_lossy();
            hash.update((name.len() as u64).to_le_bytes());
            hash.update(name.as_bytes());
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        }
        hash.finalize().into()
    }
}

fn error(path: &Path, reason: FilesReason) -> FilesError {
    FilesError {
        path: path.to_path_buf(),
        reason,
    }
}

impl Files {
    /// The files `path` names: itself, or a directory's files.
    fn files_of(&self, path: &Path) -> Result<Vec<PathBuf>, FilesError> {
        let list = |e| error(path, FilesReason::List(e));
        if !std::fs::metadata(path).map_err(list)?.is_dir() {
            return Ok(vec![path.to_path_buf()]);
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(list)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| self.wanted(p))
            .take(self.max_files + 1)
            .collect();
        if files.len() > self.max_files {
            let patterns: Vec<String> = self.extensions.iter().map(|e| format!("*.{e}")).collect();
            let reason = FilesReason::TooMany {
                max: self.max_files,
                patterns: patterns.join("/"),
            };
            return Err(error(path, reason));
        }
        files.sort();
        Ok(files)
    }

    fn wanted(&self, path: &Path) -> bool {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        !name.starts_with('.')
            && self
                .extensions
                .iter()
                .any(|e| name.strip_suffix(e).is_some_and(|n| n.ends_with('.')))
    }
}
