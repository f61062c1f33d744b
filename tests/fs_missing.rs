//! Lookups of missing names answered as misses the kernel may keep (`src/fs/missing.rs`): kept
//! for the entry TTL, dropped when a change to a watched source makes the name (or a directory
//! above it), never kept when the answer raced a change.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use zarrfs::fs::inodes::ROOT_INO;
use zarrfs::fs::missing::Looked;
use zarrfs::fs::{Fs, FsConfig, INDEFINITE_TTL};
use zarrfs::store::Store;
use zarrfs::view::{View, ViewOptions};

fn fs_with(store: Arc<dyn Store>, watched: bool, ttl: Duration) -> Fs {
    let options = ViewOptions {
        metadata_ttl: ttl,
        ..ViewOptions::default()
    };
    let mut config = FsConfig::read_only(FS_UID, FS_GID, ttl);
    config.watched = watched;
    Fs::new(View::new(store, &options), config)
}

fn keys(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|k| k.to_string()).collect()
}

/// The TTL a lookup's miss is answered with (panics on an entry).
async fn miss(fs: &Fs, dir: u64, name: &str) -> Duration {
    match fs.lookup_kept(dir, name, &fs.ttl_ticket()).await.unwrap() {
        Looked::Missing(ttl) => ttl,
        Looked::Found(attr, _) => panic!("{name} found: {attr:?}"),
    }
}

async fn found(fs: &Fs, dir: u64, name: &str) -> bool {
    matches!(
        fs.lookup_kept(dir, name, &fs.ttl_ticket()).await.unwrap(),
        Looked::Found(..)
    )
}

#[tokio::test]
async fn a_kept_miss_is_dropped_when_the_source_makes_the_name_or_a_directory_above_it() {
    let store = sample_hierarchy().memory_store();
    let fs = fs_with(store.clone(), true, INDEFINITE_TTL);
    let data = fs.lookup(ROOT_INO, "data").await.unwrap().ino;
    assert_eq!(miss(&fs, ROOT_INO, "later").await, INDEFINITE_TTL);
    assert_eq!(miss(&fs, data, "late").await, INDEFINITE_TTL);
    assert_eq!(miss(&fs, data, "unrelated").await, INDEFINITE_TTL);

    // Another writer makes `later/deep` (so `later` too) and `data/late`.
    store
        .set("later/deep/zarr.json", group_json("deep").into())
        .await
        .unwrap();
    store
        .set("data/late/zarr.json", group_json("late").into())
        .await
        .unwrap();
    let dropped = fs.source_changed(&keys(&["later/deep/zarr.json", "data/late/zarr.json"]), false);
    assert!(dropped.entries.contains(&(ROOT_INO, "later".into())), "{dropped:?}");
    assert!(dropped.entries.contains(&(data, "late".into())), "{dropped:?}");
    assert!(!dropped.entries.iter().any(|(_, n)| n == "unrelated"), "{dropped:?}");
    assert!(found(&fs, ROOT_INO, "later").await);
    assert!(found(&fs, data, "late").await);

    // What was dropped is no longer kept; the unrelated miss still is.
    let everything = fs.source_changed(&BTreeSet::new(), true);
    assert!(
        everything.entries.contains(&(data, "unrelated".into())),
        "{everything:?}"
    );
    assert!(!everything.entries.contains(&(data, "late".into())), "{everything:?}");
}

#[tokio::test]
async fn a_miss_answered_across_a_change_is_not_kept() {
    let store = sample_hierarchy().memory_store();
    let fs = fs_with(store.clone(), true, INDEFINITE_TTL);
    let arrived = fs.ttl_ticket();
    store.set("late/zarr.json", group_json("late").into()).await.unwrap();
    // The change is handled after the view found nothing but before the answer's TTL is taken.
    fs.source_changed(&keys(&["other/zarr.json"]), false);
    let looked = fs.lookup_kept(ROOT_INO, "nothing-here", &arrived).await.unwrap();
    assert!(matches!(looked, Looked::Missing(ttl) if ttl.is_zero()), "{looked:?}");
    // Not recorded either: nothing to drop when anything may have changed.
    let everything = fs.source_changed(&BTreeSet::new(), true);
    assert!(
        !everything.entries.iter().any(|(_, n)| n == "nothing-here"),
        "{everything:?}"
    );
}

#[tokio::test]
async fn a_directory_the_kernel_forgot_takes_its_misses_with_it() {
    let store = sample_hierarchy().memory_store();
    let fs = fs_with(store, true, INDEFINITE_TTL);
    let data = fs.lookup(ROOT_INO, "data").await.unwrap().ino;
    assert_eq!(miss(&fs, data, "gone-with-data").await, INDEFINITE_TTL);
    assert_eq!(miss(&fs, ROOT_INO, "kept").await, INDEFINITE_TTL);
    fs.forget(data, 1);
    let everything = fs.source_changed(&BTreeSet::new(), true);
    assert!(
        !everything.entries.iter().any(|(_, n)| n == "gone-with-data"),
        "{everything:?}"
    );
    assert!(
        everything.entries.contains(&(ROOT_INO, "kept".into())),
        "{everything:?}"
    );
}

#[tokio::test]
async fn without_a_watch_a_miss_is_kept_for_the_ttl_and_not_at_all_with_none() {
    let store = sample_hierarchy().memory_store();
    let fs = fs_with(store.clone(), false, Duration::from_secs(1));
    assert_eq!(miss(&fs, ROOT_INO, "late").await, Duration::from_secs(1));
    let fs = fs_with(store, false, Duration::ZERO);
    assert_eq!(miss(&fs, ROOT_INO, "late").await, Duration::ZERO);
    assert!(found(&fs, ROOT_INO, "data").await);
}

#[tokio::test]
async fn a_name_made_through_the_mount_leaves_the_record() {
    let store = sample_hierarchy().memory_store();
    let options = ViewOptions {
        metadata_ttl: INDEFINITE_TTL,
        ..ViewOptions::default()
    };
    let mut config = FsConfig::read_only(FS_UID, FS_GID, INDEFINITE_TTL);
    config.watched = true;
    config.writable = true;
    let fs = Fs::new(View::new(store, &options), config);
    for name in ["made-file", "made-dir", "renamed", "still-missing"] {
        assert_eq!(miss(&fs, ROOT_INO, name).await, INDEFINITE_TTL);
    }
    assert_eq!(fs.missing_kept(), 4);
    let (_, fh) = fs.create(ROOT_INO, "made-file", false).await.unwrap();
    fs.release(fh).await;
    fs.mkdir(ROOT_INO, "made-dir").await.unwrap();
    fs.rename(ROOT_INO, "made-file", ROOT_INO, "renamed", false)
        .await
        .unwrap();
    assert_eq!(fs.missing_kept(), 1);
    let everything = fs.source_changed(&BTreeSet::new(), true);
    assert!(
        everything.entries.contains(&(ROOT_INO, "still-missing".into())),
        "{everything:?}"
    );
    assert_eq!(fs.missing_kept(), 0);
}
