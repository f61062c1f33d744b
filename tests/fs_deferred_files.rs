//! With the journal (remote sources by default), a closed file outside sharded arrays — an
//! unsharded array's chunk, any file passed through as it is — waits in the journal as a
//! chunk does: `close()` returns once it is durable on local disk, and write-back stores it.
//! A `cp -r` of an unsharded tree into an S3 mount no longer waits for a PUT per file.
//! JSON files (metadata documents) are still stored when closed.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use zarrfs::fs::journal::Journal;
use zarrfs::fs::{Fs, FsConfig};
use zarrfs::store::counting::CountingStore;
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{GetOptions, Store};
use zarrfs::view::{View, ViewOptions};

/// A journaled write-back mount over `store`, its journal in `dir`, and what it replays.
fn journaled_fs(store: Arc<dyn Store>, dir: &std::path::Path) -> (Fs, zarrfs::fs::journal::Replay) {
    let mut config = FsConfig::read_only(FS_UID, FS_GID, Duration::from_secs(1));
    config.writable = true;
    config.write_back_delay = Some(Duration::from_secs(3600));
    let fs = Fs::new(View::new(store, &ViewOptions::default()), config);
    let (journal, replay) = Journal::open(dir, "mem", 1 << 20).unwrap();
    (fs.with_journal(Arc::new(journal)), replay)
}

async fn stored(mem: &MemoryStore, key: &str) -> Option<Vec<u8>> {
    mem.get(key, GetOptions::default())
        .await
        .unwrap()
        .map(|g| g.bytes.to_vec())
}

/// An unsharded array `plain` with chunk c/0/0 stored.
fn source() -> (Arc<MemoryStore>, Arc<CountingStore>) {
    let mem = Arc::new(MemoryStore::new());
    mem.insert("zarr.json", group_json("root"));
    mem.insert("plain/zarr.json", serde_json::to_vec(&plain_array_json()).unwrap());
    mem.insert("plain/c/0/0", b"old chunk".to_vec());
    let counts = Arc::new(CountingStore::new(mem.clone()));
    (mem, counts)
}

#[tokio::test]
async fn a_closed_file_passed_through_waits_in_the_journal_until_written_back() {
    let (mem, counts) = source();
    let dir = tempfile::tempdir().unwrap();
    let (fs, _) = journaled_fs(counts.clone(), dir.path());
    counts.reset();
    fs_write_file(&fs, "plain/c/1/0", b"new chunk").await.unwrap();
    fs_write_file(&fs, "plain/c/0/0", b"rewritten").await.unwrap();
    fs_write_file(&fs, "plain/notes.json", b"{}").await.unwrap();
    assert_eq!(counts.counts().set, 1, "only the JSON file was stored at its close");
    assert_eq!(stored(&mem, "plain/notes.json").await.as_deref(), Some(&b"{}"[..]));
    assert_eq!(fs.journal().unwrap().pending().1, 2, "the chunks wait in the journal");
    // The mount shows them: lookups, listings, reads.
    assert_eq!(fs_read_path(&fs, "plain/c/1/0").await.unwrap(), b"new chunk");
    assert_eq!(fs_read_path(&fs, "plain/c/0/0").await.unwrap(), b"rewritten");
    let c = fs_resolve(&fs, "plain/c").await.unwrap().ino;
    let names: Vec<String> = fs_list(&fs, c)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.to_string())
        .collect();
    assert_eq!(names, ["0", "1"]);
    assert_eq!(stored(&mem, "plain/c/1/0").await, None);
    assert_eq!(stored(&mem, "plain/c/0/0").await.as_deref(), Some(&b"old chunk"[..]));
    // `sync DIR` stores them, and the journal is done with them.
    fs.fsyncdir().await.unwrap();
    assert_eq!(stored(&mem, "plain/c/1/0").await.as_deref(), Some(&b"new chunk"[..]));
    assert_eq!(stored(&mem, "plain/c/0/0").await.as_deref(), Some(&b"rewritten"[..]));
    assert_eq!(fs.journal().unwrap().pending().1, 0);
    assert_eq!(counts.counts().set, 3);
}

#[tokio::test]
async fn a_pending_file_renamed_or_removed_is_stored_where_it_ends_or_not_at_all() {
    let (mem, counts) = source();
    let dir = tempfile::tempdir().unwrap();
    let (fs, _) = journaled_fs(counts.clone(), dir.path());
    // Written, renamed: stored under its new name only.
    fs_write_file(&fs, "plain/c/2/0", b"moved").await.unwrap();
    let c2 = fs_resolve(&fs, "plain/c/2").await.unwrap().ino;
    fs.rename(c2, "0", c2, "1", false).await.unwrap();
    // Written and removed before it was stored: no request at all.
    counts.reset();
    fs_write_file(&fs, "plain/c/3/0", b"gone").await.unwrap();
    let c3 = fs_resolve(&fs, "plain/c/3").await.unwrap().ino;
    fs.unlink(c3, "0").await.unwrap();
    assert_eq!((counts.counts().set, counts.counts().erase), (0, 0));
    // A stored file rewritten, then removed while its new bytes wait: the stored one goes.
    fs_write_file(&fs, "plain/c/0/0", b"rewritten").await.unwrap();
    let c0 = fs_resolve(&fs, "plain/c/0").await.unwrap().ino;
    fs.unlink(c0, "0").await.unwrap();
    fs.fsyncdir().await.unwrap();
    assert_eq!(stored(&mem, "plain/c/2/1").await.as_deref(), Some(&b"moved"[..]));
    for gone in ["plain/c/2/0", "plain/c/3/0", "plain/c/0/0"] {
        assert_eq!(stored(&mem, gone).await, None, "{gone}");
    }
    assert_eq!(fs.journal().unwrap().pending().1, 0);
}

#[tokio::test]
async fn a_mount_that_dies_before_writing_back_leaves_its_files_to_the_next_one() {
    let (mem, _) = source();
    let dir = tempfile::tempdir().unwrap();
    let (fs, _) = journaled_fs(mem.clone(), dir.path());
    fs_write_file(&fs, "plain/c/1/1", b"durable").await.unwrap();
    fs_write_file(&fs, "plain/c/1/2", b"removed").await.unwrap();
    let c1 = fs_resolve(&fs, "plain/c/1").await.unwrap().ino;
    fs.unlink(c1, "2").await.unwrap();
    drop(fs); // no write-back, no unmount: a crash
    assert_eq!(stored(&mem, "plain/c/1/1").await, None);
    let (fs, replay) = journaled_fs(mem.clone(), dir.path());
    let done = fs.replay_journal(replay).await.unwrap();
    assert_eq!((done.files, done.already_stored), (1, 0), "{done:?}");
    assert_eq!(stored(&mem, "plain/c/1/1").await.as_deref(), Some(&b"durable"[..]));
    assert_eq!(stored(&mem, "plain/c/1/2").await, None, "a removal is never undone");
}

/// The parent inode and name of `path`, its directories made first.
async fn place(fs: &Fs, path: &str) -> (u64, String) {
    let (dir, name) = path.rsplit_once('/').unwrap();
    (fs_mkdir_p(fs, dir).await.unwrap(), name.to_string())
}

/// Random writes, renames (zarr-python's temporary files among them), removals, `sync DIR`
/// and crashes on the files of an unsharded array, against a map of what each name holds:
/// the mount always shows the map; after a `sync DIR`, and after a crash once the next mount
/// replayed its journal, the store holds exactly the map.
#[tokio::test]
async fn pending_files_follow_a_random_workload_through_syncs_and_crashes() {
    const NAMES: [&str; 5] = [
        "plain/c/0/0",
        "plain/c/0/1",
        "plain/c/1/0",
        "plain/c/1/1",
        "plain/notes.bin",
    ];
    const TEMP: &str = "plain/c/1/1.0123456789abcdef0123456789abcdef.partial";
    for seed in 1..=30u64 {
        let (mem, _) = source();
        let dir = tempfile::tempdir().unwrap();
        let (mut fs, _) = journaled_fs(mem.clone(), dir.path());
        let mut model: std::collections::BTreeMap<&str, Vec<u8>> = [("plain/c/0/0", b"old chunk".to_vec())].into();
        let mut rng = seed;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for step in 0..60 {
            let name = NAMES[next(NAMES.len() as u64) as usize];
            match next(10) {
                0..=3 => {
                    let data = format!("{seed}:{step}").into_bytes();
                    fs_write_file(&fs, name, &data).await.unwrap();
                    model.insert(name, data);
                }
                4 => {
                    // zarr-python: a temporary file, then renamed onto the name.
                    let data = format!("{seed}:{step}:partial").into_bytes();
                    fs_write_file(&fs, TEMP, &data).await.unwrap();
                    let (from_dir, from) = place(&fs, TEMP).await;
                    let (to_dir, to) = place(&fs, name).await;
                    fs.rename(from_dir, &from, to_dir, &to, false).await.unwrap();
                    model.insert(name, data);
                }
                5 if model.contains_key(name) => {
                    let to = NAMES[next(NAMES.len() as u64) as usize];
                    let (from_dir, from) = place(&fs, name).await;
                    let (to_dir, to_name) = place(&fs, to).await;
                    fs.rename(from_dir, &from, to_dir, &to_name, false).await.unwrap();
                    let data = model.remove(name).unwrap();
                    model.insert(to, data);
                }
                6 if model.contains_key(name) => {
                    let (parent, file) = place(&fs, name).await;
                    fs.unlink(parent, &file).await.unwrap();
                    model.remove(name);
                }
                7 => {
                    fs.fsyncdir().await.unwrap();
                    for n in NAMES {
                        assert_eq!(
                            stored(&mem, n).await.as_ref(),
                            model.get(n),
                            "seed {seed} step {step}: {n} stored"
                        );
                    }
                }
                8 => {
                    drop(fs); // a crash: nothing written back
                    let (again, replay) = journaled_fs(mem.clone(), dir.path());
                    again.replay_journal(replay).await.unwrap();
                    for n in NAMES {
                        assert_eq!(
                            stored(&mem, n).await.as_ref(),
                            model.get(n),
                            "seed {seed} step {step}: {n} replayed"
                        );
                    }
                    fs = again;
                }
                _ => {}
            }
            for n in NAMES {
                let shown = fs_read_path(&fs, n).await.ok();
                assert_eq!(shown.as_ref(), model.get(n), "seed {seed} step {step}: {n} shown");
            }
        }
    }
}
