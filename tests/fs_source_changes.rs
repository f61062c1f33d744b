//! A mount told of its source's changes (a watched local source): it trusts what it read until
//! a change, forgets what the change touched, and says which names the kernel must drop.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use zarrfs::fs::inodes::ROOT_INO;
use zarrfs::fs::{Fs, FsConfig, INDEFINITE_TTL};
use zarrfs::store::Store;
use zarrfs::view::{View, ViewOptions};

fn watched_fs(store: Arc<dyn Store>) -> Fs {
    let options = ViewOptions {
        metadata_ttl: INDEFINITE_TTL,
        ..ViewOptions::default()
    };
    let mut config = FsConfig::read_only(FS_UID, FS_GID, INDEFINITE_TTL);
    config.watched = true;
    config.kernel_listings = true;
    Fs::new(View::new(store, &options), config)
}

fn keys(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|k| k.to_string()).collect()
}

/// `(parent, name)` of a path.
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

#[tokio::test]
async fn a_replaced_shard_is_trusted_until_told_then_its_array_is_dropped() {
    let h = sample_hierarchy();
    let a = &h.arrays[0];
    let store = h.memory_store();
    let fs = watched_fs(store.clone());
    let dir = a.prefix.trim_end_matches('/');
    let path = format!("{dir}/c/0/0");
    let before = fs_read_path(&fs, &path).await.unwrap();
    assert_eq!(before, a.expected[&vec![0, 0]]);

    let shard_key = a.shard_key(&a.spec.shard_of(&[0, 0]));
    let mut chunks = a.expected.clone();
    let new = b"rewritten by another writer, longer than any chunk before".to_vec();
    chunks.insert(vec![0, 0], new.clone());
    let rebuilt = a.spec.build(&a.prefix, &chunks);
    store
        .set(&shard_key, rebuilt.files[&shard_key].clone().into())
        .await
        .unwrap();
    let in_flight = fs.ttl_ticket();
    assert_eq!(in_flight.ttl(), INDEFINITE_TTL);
    assert_eq!(
        fs_resolve(&fs, &path).await.unwrap().size,
        before.len() as u64,
        "trusted until told"
    );

    let chunk_dir_ino = fs_resolve(&fs, split(&path).0).await.unwrap().ino;
    let chunk_ino = fs_resolve(&fs, &path).await.unwrap().ino;
    let dropped = fs.source_changed(&keys(&[&shard_key]), false);
    let (parent, name) = split(dir);
    let parent_ino = fs_resolve(&fs, parent).await.unwrap().ino;
    let array_ino = fs_resolve(&fs, dir).await.unwrap().ino;
    // The one chunk file of the shard the kernel was shown goes by name, before its array.
    assert_eq!(
        dropped.entries,
        [(chunk_dir_ino, "0".to_string()), (parent_ino, name.to_string())]
    );
    let mut inodes = vec![parent_ino, array_ino, chunk_ino];
    inodes.sort_unstable();
    assert_eq!(dropped.inodes, inodes);
    assert_eq!(
        in_flight.ttl(),
        Duration::ZERO,
        "an answer begun before the change is not kept"
    );
    assert_eq!(fs.ttl_ticket().ttl(), INDEFINITE_TTL);
    assert_eq!(fs_read_path(&fs, &path).await.unwrap(), new);
}

#[tokio::test]
async fn new_arrays_and_changed_documents_show_once_told() {
    let h = sample_hierarchy();
    let store = h.memory_store();
    let fs = watched_fs(store.clone());
    assert!(fs_resolve(&fs, "late").await.is_err());
    assert!(!String::from_utf8_lossy(&fs_read_path(&fs, "zarr.json").await.unwrap()).contains("retitled"));

    // Another writer adds a group and changes the root's attributes.
    store.set("late/zarr.json", group_json("late").into()).await.unwrap();
    store.set("zarr.json", group_json("retitled").into()).await.unwrap();

    let dropped = fs.source_changed(&keys(&["late", "late/zarr.json", "zarr.json"]), false);
    assert!(dropped.entries.contains(&(ROOT_INO, "late".to_string())), "{dropped:?}");
    assert!(
        dropped.entries.contains(&(ROOT_INO, "zarr.json".to_string())),
        "{dropped:?}"
    );
    assert!(dropped.inodes.contains(&ROOT_INO));
    assert!(fs_resolve(&fs, "late").await.unwrap().kind == zarrfs::fs::FileKind::Dir);
    let now = fs_read_path(&fs, "zarr.json").await.unwrap();
    assert!(
        String::from_utf8_lossy(&now).contains("retitled"),
        "{}",
        String::from_utf8_lossy(&now)
    );
}

#[tokio::test]
async fn when_anything_may_have_changed_every_name_of_the_root_goes() {
    let (h, store, fs) = {
        let h = sample_hierarchy();
        let store = h.memory_store();
        let fs = watched_fs(store.clone());
        (h, store, fs)
    };
    let tree = fs_walk(&fs).await;
    assert!(!tree.0.is_empty());
    let top: BTreeSet<String> = h
        .files
        .keys()
        .map(|p| p.split('/').next().unwrap().to_string())
        .collect();
    let dropped = fs.source_changed(&BTreeSet::new(), true);
    let names: BTreeSet<String> = dropped
        .entries
        .iter()
        .filter(|(dir, _)| *dir == ROOT_INO)
        .map(|(_, n)| n.clone())
        .collect();
    assert_eq!(names, top);
    // And what was kept is read again: a shard replaced meanwhile shows.
    let a = &h.arrays[0];
    let shard_key = a.shard_key(&a.spec.shard_of(&[0, 0]));
    store.erase(&shard_key).await.unwrap();
    fs.source_changed(&BTreeSet::new(), true);
    let path = format!("{}/c/0/0", a.prefix.trim_end_matches('/'));
    assert!(
        fs_resolve(&fs, &path).await.is_err(),
        "the erased shard's chunk is gone"
    );
}

/// A chunk file being read when its shard changes keeps the kernel's entry through the drop of
/// its array's directory, and the kernel gives it back with the directory's next lookup: the
/// chunk files of a changed shard are dropped by name, every one the kernel was shown and no
/// other (an edge shard's chunks outside the grid are not files).
#[tokio::test]
async fn the_chunk_files_of_a_changed_shard_are_dropped_by_name() {
    let h = sample_hierarchy();
    let a = &h.arrays[0];
    let fs = watched_fs(h.memory_store());
    let (shown, _) = fs_walk(&fs).await;
    let dir = a.prefix.trim_end_matches('/');
    let changed = [vec![0, 0], vec![2, 0], vec![0, 1]];
    let shard_keys: Vec<String> = changed.iter().map(|s| a.shard_key(s)).collect();
    let mut want = BTreeSet::new();
    for path in shown.keys() {
        let Some(coords) = path.strip_prefix(&format!("{dir}/c/")) else {
            continue;
        };
        let coords: Vec<u64> = coords.split('/').map(|c| c.parse().unwrap()).collect();
        if changed.contains(&a.spec.shard_of(&coords)) {
            let (parent, name) = split(path);
            want.insert((fs_resolve(&fs, parent).await.unwrap().ino, name.to_string()));
        }
    }
    assert!(
        want.len() >= 4,
        "the fixture shows chunks of the changed shards: {want:?}"
    );
    let chunk_dirs = {
        let mut dirs = BTreeSet::new();
        for path in shown.keys().filter(|p| p.starts_with(&format!("{dir}/c/"))) {
            dirs.insert(fs_resolve(&fs, split(path).0).await.unwrap().ino);
        }
        dirs
    };
    let keys: BTreeSet<String> = shard_keys.into_iter().collect();
    let dropped = fs.source_changed(&keys, false);
    let by_name: BTreeSet<(u64, String)> = dropped
        .entries
        .iter()
        .filter(|(dir_ino, _)| chunk_dirs.contains(dir_ino))
        .cloned()
        .collect();
    assert_eq!(by_name, want);
    // Each goes before its array's directory, and its inode (attributes, pages) with it.
    let (parent, name) = split(dir);
    let parent_ino = fs_resolve(&fs, parent).await.unwrap().ino;
    assert_eq!(dropped.entries.last(), Some(&(parent_ino, name.to_string())));
    for (dir_ino, name) in &want {
        let ino = fs.lookup(*dir_ino, name).await.unwrap().ino;
        assert!(dropped.inodes.contains(&ino), "{name}: {dropped:?}");
    }
}
