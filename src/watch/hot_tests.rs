//! The hot file alone, over a parser of lines: what it swaps in, what it
//! skips, what it counts; and its two sources.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::{CountLoads, HotFile, Parse, ReloadOutcome};
use crate::watch::source::{File, FileRead, Files, Source};

/// Loads counted: good, rejected.
#[derive(Clone, Default)]
struct Counts(Arc<(AtomicU64, AtomicU64)>);

impl CountLoads for Counts {
    fn loaded(&self, _: SystemTime) {
        self.0.0.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self) {
        self.0.1.fetch_add(1, Ordering::Relaxed);
    }
}

/// One item per line; a line "bad" makes the version invalid. With
/// `AGAIN`, SIGHUP installs the version in force again.
struct Lines<const AGAIN: bool>;

impl<const AGAIN: bool> Parse for Lines<AGAIN> {
    type Source = File;
    type Value = Vec<String>;
    type Error = String;
    const WHAT: &'static str = "lines file";
    const SOURCE: File = File;
    const SIGHUP_RELOADS_UNCHANGED: bool = AGAIN;

    fn unreadable(&self, path: &Path, error: crate::watch::read::ReadError) -> String {
        format!("{}: {error}", path.display())
    }

    fn parse(&self, _: &Path, read: &FileRead) -> Result<Vec<String>, String> {
        let text = String::from_utf8(read.bytes.clone()).map_err(|e| e.to_string())?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        match lines.iter().any(|l| l == "bad") {
            true => Err("a bad line".into()),
            false => Ok(lines),
        }
    }

    fn count(value: &Vec<String>) -> usize {
        value.len()
    }

    fn would_empty(&self, _: &Path, in_force: usize) -> Option<String> {
        Some(format!("empty while {in_force} are in force"))
    }

    fn installed(&self, _: &Path, _: &Vec<String>, _: &FileRead) {}

    fn rejected(&self, _: &Path, _: &String) {}
}

fn fresh(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rk-hot-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn hot<const AGAIN: bool>(path: &Path) -> (HotFile<Lines<AGAIN>>, Counts) {
    let counts = Counts::default();
    let value = Arc::new(ArcSwap::from_pointee(Vec::new()));
    let file = HotFile::new(path.to_path_buf(), Lines, value, counts.clone());
    (file, counts)
}

fn counts(c: &Counts) -> (u64, u64) {
    (c.0.0.load(Ordering::Relaxed), c.0.1.load(Ordering::Relaxed))
}

#[test]
fn an_unchanged_version_is_skipped_and_a_bad_one_judged_once() {
    let dir = fresh("judged");
    let path = dir.join("f");
    std::fs::write(&path, "a\nb\n").unwrap();
    let (f, m) = hot::<true>(&path);
    assert_eq!(f.load_initial(), Ok(2));
    assert_eq!(counts(&m), (1, 0), "the startup load counts");
    assert_eq!(f.reload(false), ReloadOutcome::Unchanged);

    std::fs::write(&path, "a\nbad\n").unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Rejected);
    assert_eq!(f.value().load().len(), 2, "the last good value stays");
    assert_eq!(f.reload(false), ReloadOutcome::Unchanged, "judged once");
    assert_eq!(counts(&m), (1, 1));
    assert_eq!(f.reload(true), ReloadOutcome::Rejected, "SIGHUP re-judges");
    assert_eq!(counts(&m), (1, 2));

    // Undone: back to the version in force, which is not swapped again;
    // the same bad edit made anew is judged anew.
    std::fs::write(&path, "a\nb\n").unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Unchanged);
    std::fs::write(&path, "a\nbad\n").unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Rejected);
    assert_eq!(counts(&m), (1, 3));

    std::fs::write(&path, "a\nb\nc\n").unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Loaded(3));
    assert_eq!(**f.value().load(), ["a", "b", "c"]);
    assert_eq!(counts(&m), (2, 3));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_keeps_the_value_and_is_counted_once() {
    let dir = fresh("missing");
    let path = dir.join("f");
    std::fs::write(&path, "a\n").unwrap();
    let (f, m) = hot::<true>(&path);
    f.load_initial().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Rejected);
    assert_eq!(f.reload(false), ReloadOutcome::Unchanged);
    assert_eq!(f.value().load().len(), 1);
    assert_eq!(counts(&m), (1, 1));
    std::fs::write(&path, "a\n").unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Unchanged, "as in force");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_file_at_startup_is_returned_and_counted() {
    let dir = fresh("startup");
    let path = dir.join("f");
    std::fs::write(&path, "bad\n").unwrap();
    let (f, m) = hot::<true>(&path);
    assert_eq!(f.load_initial(), Err("a bad line".to_string()));
    assert_eq!(counts(&m), (0, 1));
    assert!(f.value().load().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_emptied_file_is_refused_unless_forced() {
    let dir = fresh("emptied");
    let path = dir.join("f");
    std::fs::write(&path, "a\n").unwrap();
    let (f, m) = hot::<true>(&path);
    f.load_initial().unwrap();
    std::fs::write(&path, "").unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Rejected);
    assert_eq!(f.value().load().len(), 1);
    assert_eq!(
        f.reload(true),
        ReloadOutcome::Loaded(0),
        "SIGHUP installs it"
    );
    assert_eq!(counts(&m), (2, 1));
    // Nothing in force: an empty version is no loss.
    std::fs::write(&path, "\n").unwrap();
    assert_eq!(f.reload(false), ReloadOutcome::Loaded(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_installs_the_version_in_force_again_when_the_parser_says_so() {
    let dir = fresh("again");
    let path = dir.join("f");
    std::fs::write(&path, "a\n").unwrap();
    let (again, m) = hot::<true>(&path);
    again.load_initial().unwrap();
    assert_eq!(again.reload(true), ReloadOutcome::Loaded(1));
    assert_eq!(counts(&m), (2, 0));
    let (once, m) = hot::<false>(&path);
    once.load_initial().unwrap();
    assert_eq!(once.reload(true), ReloadOutcome::Unchanged);
    assert_eq!(counts(&m), (1, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `f` on a thread and fails if it does not return within 2 s: a
/// reader that blocks must fail the test, not hang it.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(2))
        .expect("the read blocked")
}

#[test]
fn a_fifo_swapped_in_is_refused_without_blocking() {
    let dir = fresh("fifo");
    let path = dir.join("f");
    std::fs::write(&path, "a\n").unwrap();
    let (f, m) = hot::<true>(&path);
    f.load_initial().unwrap();
    std::fs::remove_file(&path).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let f = Arc::new(f);
    let reload = |forced| {
        let f = f.clone();
        within(move || f.reload(forced))
    };
    assert_eq!(reload(false), ReloadOutcome::Rejected);
    assert_eq!(reload(true), ReloadOutcome::Rejected);
    assert_eq!(counts(&m), (1, 2));
    assert_eq!(f.value().load().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

const YAML: Files = Files {
    extensions: &["yaml", "yml"],
    max_files: 3,
    max_total_bytes: 10,
};

#[test]
fn a_directory_source_reads_its_files_by_name_and_within_bounds() {
    let dir = fresh("files");
    for (name, text) in [
        ("b.yml", "b"),
        ("a.yaml", "a"),
        (".h.yaml", "h"),
        ("c.txt", "c"),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let read = YAML.read(&dir).unwrap();
    let names: Vec<_> = read.iter().map(|(p, _)| p.file_name().unwrap()).collect();
    assert_eq!(
        names,
        ["a.yaml", "b.yml"],
        "sorted; hidden and others skipped"
    );
    let before = Files::fingerprint(&read);
    assert_eq!(Files::fingerprint(&YAML.read(&dir).unwrap()), before);
    std::fs::rename(dir.join("b.yml"), dir.join("d.yml")).unwrap();
    let renamed = YAML.read(&dir).unwrap();
    assert_ne!(Files::fingerprint(&renamed), before, "names count");
    // A file names itself.
    assert_eq!(YAML.read(&dir.join("c.txt")).unwrap().len(), 1);

    std::fs::write(dir.join("e.yaml"), "0123456789").unwrap();
    let err = YAML.read(&dir).unwrap_err();
    assert_eq!(err.path, dir);
    assert!(
        err.to_string().ends_with("more than 10 bytes together"),
        "{err}"
    );
    std::fs::write(dir.join("f.yaml"), "").unwrap();
    let err = YAML.read(&dir).unwrap_err().to_string();
    assert!(err.ends_with("more than 3 *.yaml/*.yml files"), "{err}");

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_in_a_directory_source_is_refused_without_blocking() {
    let dir = fresh("files-fifo");
    std::fs::write(dir.join("a.yaml"), "a").unwrap();
    nix::unistd::mkfifo(&dir.join("evil.yaml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let path = dir.clone();
    let err = within(move || YAML.read(&path).unwrap_err());
    assert_eq!(err.path, dir.join("evil.yaml"), "names the file");
    let err = err.to_string();
    assert!(
        err.ends_with("is a FIFO; it must be a regular file"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
