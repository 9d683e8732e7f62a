//! What each kind of file-system event makes the watch do.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use notify::event::{
    AccessKind, AccessMode, CreateKind, DataChange, Flag, ModifyKind, RemoveKind, RenameMode,
};
use notify::{Event, EventKind};

use super::{Events, Filter};

fn filter() -> Filter {
    Filter {
        dirs: vec![PathBuf::from("/etc/rk"), PathBuf::from("/data/real")],
        names: Some(vec![
            "policies.toml".into(),
            "..data".into(),
            "real.toml".into(),
        ]),
        what: "policies file",
    }
}

fn event(kind: EventKind, path: &str) -> notify::Result<Event> {
    Ok(Event::new(kind).add_path(PathBuf::from(path)))
}

/// Whether the reload task was woken (consumes the wake-up).
async fn woken(events: &Events) -> bool {
    tokio::time::timeout(Duration::ZERO, events.changed.notified())
        .await
        .is_ok()
}

#[tokio::test]
async fn errors_and_rescans_count_as_changes() {
    let (f, events) = (filter(), Events::default());
    f.on_event(&events, Err(notify::Error::generic("queue gone")));
    assert!(woken(&events).await);
    assert!(
        events.lost.load(Ordering::Acquire),
        "an error re-arms the watch"
    );
    assert!(events.warned.load(Ordering::Acquire));

    let (f, events) = (filter(), Events::default());
    let overflow = Event::new(EventKind::Other).set_flag(Flag::Rescan);
    f.on_event(&events, Ok(overflow));
    assert!(woken(&events).await, "an overflow may hide a change");
    assert!(!events.lost.load(Ordering::Acquire));
}

#[tokio::test]
async fn a_watched_directory_going_away_is_a_lost_watch() {
    let (f, events) = (filter(), Events::default());
    f.on_event(
        &events,
        event(EventKind::Remove(RemoveKind::Folder), "/data/real"),
    );
    assert!(woken(&events).await);
    assert!(events.lost.swap(false, Ordering::AcqRel));
    let moved = EventKind::Modify(ModifyKind::Name(RenameMode::From));
    f.on_event(&events, event(moved, "/etc/rk"));
    assert!(events.lost.load(Ordering::Acquire));
}

#[tokio::test]
async fn writes_hold_the_reload_until_the_close() {
    let (f, events) = (filter(), Events::default());
    let data = EventKind::Modify(ModifyKind::Data(DataChange::Any));
    f.on_event(&events, event(data, "/etc/rk/policies.toml"));
    assert!(woken(&events).await);
    assert!(events.writing.load(Ordering::Acquire));
    let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
    f.on_event(&events, event(close, "/data/real/real.toml"));
    assert!(woken(&events).await);
    assert!(!events.writing.load(Ordering::Acquire));
    // A new file being written is a write too.
    f.on_event(
        &events,
        event(EventKind::Create(CreateKind::File), "/etc/rk/policies.toml"),
    );
    assert!(events.writing.load(Ordering::Acquire));
}

#[tokio::test]
async fn reads_and_other_files_are_ignored() {
    let (f, events) = (filter(), Events::default());
    let open = EventKind::Access(AccessKind::Open(AccessMode::Read));
    f.on_event(&events, event(open, "/etc/rk/policies.toml"));
    let data = EventKind::Modify(ModifyKind::Data(DataChange::Any));
    f.on_event(&events, event(data, "/etc/rk/other.toml"));
    assert!(!woken(&events).await);
    assert!(!events.writing.load(Ordering::Acquire));
    // The ConfigMap swap: a rename onto ..data.
    let renamed = EventKind::Modify(ModifyKind::Name(RenameMode::To));
    f.on_event(&events, event(renamed, "/etc/rk/..data"));
    assert!(woken(&events).await);
}

#[tokio::test]
async fn in_a_directory_of_files_every_entry_counts_but_reads() {
    let f = Filter {
        dirs: vec![PathBuf::from("/etc/rls")],
        names: None,
        what: "rls.config",
    };
    let events = Events::default();
    let open = EventKind::Access(AccessKind::Open(AccessMode::Read));
    f.on_event(&events, event(open, "/etc/rls/edge.yaml"));
    assert!(!woken(&events).await, "reading the files is no change");
    f.on_event(
        &events,
        event(EventKind::Create(CreateKind::File), "/etc/rls/new.yaml"),
    );
    assert!(woken(&events).await, "a file added");
    assert!(events.writing.load(Ordering::Acquire));
    let renamed = EventKind::Modify(ModifyKind::Name(RenameMode::To));
    f.on_event(&events, event(renamed, "/etc/rls/..data"));
    assert!(woken(&events).await, "a ConfigMap swap");
    f.on_event(
        &events,
        event(EventKind::Remove(RemoveKind::File), "/etc/rls/old.yaml"),
    );
    assert!(woken(&events).await, "a file removed");
    assert!(!events.lost.load(Ordering::Acquire));
}
