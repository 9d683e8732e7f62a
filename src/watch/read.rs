//! The one reader of every watched config file (the policies file, the
//! tokens file, each file of `rls.config`): a regular file only, opened
//! non-blocking, read up to a cap.
//!
//! Each rule closes a way a single path could stop reloads for good or
//! exhaust memory. A FIFO blocks `open` (and then `read`) until a writer
//! comes, which freezes the reload task, SIGHUP and the drain at SIGTERM
//! with it. A device (`/dev/zero` behind a symlink) reports size 0 and
//! never ends. A file that grows while it is read (a log file named by
//! mistake) is cut at the cap rather than followed.

use std::fs::Metadata;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The cap of each watched file: thousands of policies, tokens or RLS
/// descriptors fit in it; a wrong path (a log file, say) is refused rather
/// than read whole.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Why a file was not read. The path is the caller's to show, with what
/// the file is for.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("is {0}; it must be a regular file")]
    NotAFile(&'static str),
    #[error("is larger than {0} bytes; is it the right file?")]
    TooLarge(u64),
}

/// The bytes of the regular file at `path` (symlinks followed, so a
/// Kubernetes ConfigMap's `..data` swap is seen), at most `cap` of them.
///
/// The type is checked before the open, so nothing but a regular file is
/// ever opened, and again on the open file: the open is non-blocking, so a
/// FIFO swapped in between the two cannot block it, and the second check
/// refuses it.
pub fn read_regular(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    read_with_metadata(path, cap).map(|(bytes, _)| bytes)
}

/// [`read_regular`], with the metadata of the file that was read (its
/// mode, say), not of whatever the path names a moment later.
pub fn read_with_metadata(path: &Path, cap: u64) -> Result<(Vec<u8>, Metadata), ReadError> {
    refuse_irregular(&std::fs::metadata(path)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    let meta = file.metadata()?;
    refuse_irregular(&meta)?;
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge(cap));
    }
    Ok((bytes, meta))
}

fn refuse_irregular(meta: &Metadata) -> Result<(), ReadError> {
    if meta.is_file() {
        return Ok(());
    }
    let t = meta.file_type();
    Err(ReadError::NotAFile(if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    fn fresh(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rk-read-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Runs `read_regular` on a thread and fails if it does not return
    /// within 2 s: a blocked open must fail the test, not hang it.
    fn read_within(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(read_regular(&path, cap));
        });
        rx.recv_timeout(Duration::from_secs(2))
            .expect("read_regular blocked")
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = fresh("fifo");
        let fifo = dir.join("evil.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = read_within(&fifo, MAX_FILE_BYTES).unwrap_err();
        assert_eq!(err.to_string(), "is a FIFO; it must be a regular file");
        // Behind a symlink too.
        symlink(&fifo, dir.join("link.yaml")).unwrap();
        let err = read_within(&dir.join("link.yaml"), MAX_FILE_BYTES).unwrap_err();
        assert!(matches!(err, ReadError::NotAFile("a FIFO")), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symlink_to_dev_zero_is_refused_not_read() {
        let dir = fresh("zero");
        let link = dir.join("policies.toml");
        symlink("/dev/zero", &link).unwrap();
        let started = Instant::now();
        let err = read_within(&link, MAX_FILE_BYTES).unwrap_err();
        assert!(matches!(err, ReadError::NotAFile("a device")), "{err}");
        // Nothing was read: a device is refused before it is opened.
        assert!(started.elapsed() < Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = fresh("dir");
        let err = read_within(&dir, MAX_FILE_BYTES).unwrap_err();
        assert!(matches!(err, ReadError::NotAFile("a directory")), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_regular_file_is_read_up_to_the_cap_and_refused_past_it() {
        let dir = fresh("cap");
        let file = dir.join("f");
        std::fs::write(&file, vec![b'x'; 100]).unwrap();
        assert_eq!(read_within(&file, 100).unwrap().len(), 100);
        let err = read_within(&file, 99).unwrap_err();
        assert!(matches!(err, ReadError::TooLarge(99)), "{err}");
        assert_eq!(
            err.to_string(),
            "is larger than 99 bytes; is it the right file?"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A regular file that reports a size of 0 and yet has content (what
    /// /proc files do) is still read only up to the cap.
    #[test]
    fn a_file_reporting_no_size_is_still_capped() {
        let self_status = Path::new("/proc/self/status");
        assert_eq!(std::fs::metadata(self_status).unwrap().len(), 0);
        let err = read_within(self_status, 16).unwrap_err();
        assert!(matches!(err, ReadError::TooLarge(16)), "{err}");
    }
}
