//! Conditional writes racing foreign writers (hooks fire inside the protocol's windows).

use super::*;

#[tokio::test]
async fn stale_version_after_a_foreign_rename_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    let v1 = store.set_if("a/k", b(b"ours"), Precondition::Absent).await.unwrap();
    let foreign: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    foreign_replace(&dir.path().join("a/k"), &foreign);
    let r = store
        .set_if("a/k", b(b"lost?"), Precondition::Version(v1.clone()))
        .await;
    assert!(is_conflict(&r), "{r:?}");
    assert!(is_conflict(&store.erase_if("a/k", Precondition::Version(v1)).await));
    assert_eq!(fs::read(dir.path().join("a/k")).unwrap(), foreign);
    assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
}

/// A foreign rename lands after the check under the lock, before the exchange: the exchange
/// brings back a value of another version, which is put back byte for byte.
#[tokio::test]
async fn foreign_rename_inside_the_window_is_undone() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    let target = dir.path().join("a/k");
    let v1 = store.set_if("a/k", b(b"original"), Precondition::Absent).await.unwrap();
    let foreign: Vec<u8> = (0..=255u8).rev().cycle().take(4099).collect();
    let (t, f) = (target.clone(), foreign.clone());
    hook_once(Point::BeforeReplace, move || foreign_replace(&t, &f));
    let r = store
        .set_if("a/k", b(b"refused value"), Precondition::Version(v1.clone()))
        .await;
    hook::clear();
    assert!(is_conflict(&r), "{r:?}");
    assert_eq!(fs::read(&target).unwrap(), foreign, "the foreign value must survive");
    assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    // With the current version the write goes through.
    let current = version(&store, "a/k").await;
    assert_ne!(current, v1);
    store
        .set_if("a/k", b(b"next"), Precondition::Version(current))
        .await
        .unwrap();
    assert_eq!(value(&store, "a/k").await.unwrap(), b(b"next"));
}

/// Two foreign renames: one before our exchange, one replacing our value before we undo it.
/// The newest foreign value must end under the key.
#[tokio::test]
async fn foreign_renames_on_both_sides_of_the_exchange() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    let target = dir.path().join("k");
    let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
    let (t, mut step) = (target.clone(), 0);
    hook::set(move |p| {
        step += 1;
        match (step, p) {
            (1, Point::BeforeReplace) => foreign_replace(&t, b"foreign X"),
            (2, Point::BeforeRestore) => foreign_replace(&t, b"foreign Y, newest"),
            (3, Point::BeforeRestore) => {}
            other => panic!("unexpected hook {other:?}"),
        }
    });
    let r = store.set_if("k", b(b"refused"), Precondition::Version(v1)).await;
    hook::clear();
    assert!(is_conflict(&r), "{r:?}");
    assert_eq!(fs::read(&target).unwrap(), b"foreign Y, newest");
    assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn foreign_removal_inside_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    let target = dir.path().join("k");
    // Removed before our exchange.
    let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
    let t = target.clone();
    hook_once(Point::BeforeReplace, move || fs::remove_file(&t).unwrap());
    let r = store.set_if("k", b(b"refused"), Precondition::Version(v1)).await;
    hook::clear();
    assert!(is_conflict(&r), "{r:?}");
    assert!(!target.exists());
    // Replaced before our exchange, then (our value) removed before we undo it: the
    // removal is the newest write.
    let v2 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
    let (t, mut step) = (target.clone(), 0);
    hook::set(move |p| {
        step += 1;
        match (step, p) {
            (1, Point::BeforeReplace) => foreign_replace(&t, b"foreign X"),
            (2, Point::BeforeRestore) => fs::remove_file(&t).unwrap(),
            other => panic!("unexpected hook {other:?}"),
        }
    });
    let r = store.set_if("k", b(b"refused"), Precondition::Version(v2)).await;
    hook::clear();
    assert!(is_conflict(&r), "{r:?}");
    assert!(!target.exists());
    assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn foreign_creation_beats_absent() {
    // With renameat2 flags; without (then with a hard link, which fails as atomically).
    for no_flags in [false, true] {
        hook::set_no_rename_flags(no_flags);
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let t = dir.path().join("k");
        hook_once(Point::BeforeReplace, move || foreign_replace(&t, b"foreign first"));
        let r = store.set_if("k", b(b"refused"), Precondition::Absent).await;
        hook::clear();
        assert!(is_conflict(&r), "no_flags {no_flags}: {r:?}");
        assert_eq!(fs::read(dir.path().join("k")).unwrap(), b"foreign first");
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    }
}

#[tokio::test]
async fn foreign_rename_during_a_conditional_erase_is_put_back() {
    // With renameat2 flags; without (then the put-back is a hard link).
    for no_flags in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let target = dir.path().join("k");
        let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
        hook::set_no_rename_flags(no_flags);
        let t = target.clone();
        hook_once(Point::BeforeReplace, move || foreign_replace(&t, b"foreign"));
        let r = store.erase_if("k", Precondition::Version(v1)).await;
        hook::clear();
        assert!(is_conflict(&r), "no_flags {no_flags}: {r:?}");
        assert_eq!(fs::read(&target).unwrap(), b"foreign", "no_flags {no_flags}");
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());

        // And a value created while the moved one is out is newer: it stays.
        let v2 = version(&store, "k").await;
        hook::set_no_rename_flags(no_flags);
        let (t, mut step) = (target.clone(), 0);
        hook::set(move |p| {
            step += 1;
            match (step, p) {
                (1, Point::BeforeReplace) => foreign_replace(&t, b"foreign X"),
                (2, Point::BeforeRestore) => foreign_replace(&t, b"foreign Y, newest"),
                other => panic!("unexpected hook {other:?}"),
            }
        });
        let r = store.erase_if("k", Precondition::Version(v2)).await;
        hook::clear();
        assert!(is_conflict(&r), "no_flags {no_flags}: {r:?}");
        assert_eq!(fs::read(&target).unwrap(), b"foreign Y, newest", "no_flags {no_flags}");
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    }
}

/// Read-modify-write increments of one counter from many threads, spread over two stores on
/// one directory (as two mounts would be): not one increment may be lost.
#[tokio::test]
async fn restore_gives_up_after_bounded_exchanges() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    let target = dir.path().join("k");
    let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
    let (t, mut n) = (target.clone(), 0);
    hook::set(move |_| {
        n += 1;
        foreign_replace(&t, format!("foreign {n}").as_bytes());
    });
    let r = store.set_if("k", b(b"refused"), Precondition::Version(v1)).await;
    hook::clear();
    assert!(is_conflict(&r), "{r:?}");
    let last = format!("foreign {}", RESTORE_ATTEMPTS + 1);
    assert_eq!(fs::read_to_string(&target).unwrap(), last);
    assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
}
