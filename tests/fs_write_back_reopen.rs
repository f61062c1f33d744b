//! Write-back (`--write-back-delay`) and a pending chunk file opened for writing again.
//!
//! A closed chunk file waits in the overlay until it is written back. When it is opened again
//! with O_TRUNC, its content is empty until the new bytes arrive; a write-back pass in that
//! window (the flusher, or an fsync of any other file) used to commit the empty content, so a
//! crash before the next commit left a 0-byte inner chunk in its shard, a chunk no reader can
//! decode (scripts/dev/crash_loop.py found it: kill -9 during a write-back workload). A file open
//! for writing is being written, not pending: it is committed when it is closed again, or
//! fsynced, or at unmount.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use zarrfs::fs::{Fs, FsConfig};
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::Store;
use zarrfs::view::{View, ViewOptions};
use zarrfs::zarr::sharding::IndexLocation;

/// One shard of 16 inner chunks of [2, 2] (4 bytes each in `bytes`), chunk c/0/0 stored.
fn setup() -> (Built, Arc<MemoryStore>) {
    let spec = ArraySpec::new(&[8, 8], &[8, 8], &[2, 2]).index(IndexLocation::End, LE_CRC);
    let mut chunks = Chunks::new();
    chunks.insert(vec![0, 0], b"old!".to_vec());
    let built = spec.build("", &chunks);
    let mem = memory_store(&built.files);
    (built, mem)
}

fn write_back_fs(store: Arc<dyn Store>, delay: Duration) -> Fs {
    let mut config = FsConfig::read_only(FS_UID, FS_GID, Duration::from_secs(1));
    config.writable = true;
    config.write_back_delay = Some(delay);
    Fs::new(View::new(store, &ViewOptions::default()), config)
}

/// The bytes of chunk c/0/0 as stored (read through a fresh mount).
async fn stored(mem: &Arc<MemoryStore>) -> Vec<u8> {
    fs_read_path(&writable_fs(mem.clone()), "c/0/0").await.unwrap()
}

/// `echo v1 > c/0/0` (closed: pending), then opened again with O_TRUNC and not yet written.
async fn reopened_truncated(fs: &Fs) -> u64 {
    fs_write_file(fs, "c/0/0", b"v1v1").await.unwrap();
    let ino = fs_resolve(fs, "c/0/0").await.unwrap().ino;
    fs.open(ino, true, true).await.unwrap()
}

#[tokio::test]
async fn an_fsync_of_another_file_does_not_commit_a_file_being_rewritten() {
    let (_built, mem) = setup();
    let fs = write_back_fs(mem.clone(), Duration::from_secs(3600));
    let fh = reopened_truncated(&fs).await;
    // Another chunk written and fsynced: everything pending is committed, but not c/0/0,
    // which is open and empty (O_TRUNC) right now.
    fs_write_file(&fs, "c/1/1", b"side").await.unwrap();
    let other = fs
        .open(fs_resolve(&fs, "c/1/1").await.unwrap().ino, true, false)
        .await
        .unwrap();
    fs.fsync(other).await.unwrap();
    fs.release(other).await;
    assert_eq!(fs_read_path(&writable_fs(mem.clone()), "c/1/1").await.unwrap(), b"side");
    let now = stored(&mem).await;
    assert!(now == b"old!" || now == b"v1v1", "c/0/0 stored half-written: {now:?}");
    // Written and closed: pending again, and committed by the next pass.
    fs.write(fh, 0, b"v2v2").await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
    fs.write_back(true).await.unwrap();
    assert_eq!(stored(&mem).await, b"v2v2");
}

#[tokio::test]
async fn the_flusher_does_not_commit_a_file_being_rewritten() {
    let (_built, mem) = setup();
    let fs = write_back_fs(mem.clone(), Duration::ZERO); // everything pending is due at once
    let fh = reopened_truncated(&fs).await;
    fs.write_back(false).await.unwrap();
    let now = stored(&mem).await;
    assert!(now == b"old!" || now == b"v1v1", "c/0/0 stored half-written: {now:?}");
    fs.write(fh, 0, b"v2").await.unwrap();
    fs.write_back(false).await.unwrap();
    let now = stored(&mem).await;
    assert!(now == b"old!" || now == b"v1v1", "c/0/0 stored half-written: {now:?}");
    fs.write(fh, 2, b"v2").await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
    fs.write_back(false).await.unwrap();
    assert_eq!(stored(&mem).await, b"v2v2");
}

#[tokio::test]
async fn an_fsync_of_the_rewritten_file_commits_it() {
    let (_built, mem) = setup();
    let fs = write_back_fs(mem.clone(), Duration::from_secs(3600));
    let fh = reopened_truncated(&fs).await;
    fs.write(fh, 0, b"v3v3").await.unwrap();
    fs.fsync(fh).await.unwrap();
    assert_eq!(stored(&mem).await, b"v3v3", "fsync commits the file it is given");
    fs.release(fh).await;
    // Opened again without O_TRUNC and closed unchanged: nothing new, nothing lost.
    let ino = fs_resolve(&fs, "c/0/0").await.unwrap().ino;
    let fh = fs.open(ino, true, false).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
    fs.write_back(true).await.unwrap();
    assert_eq!(stored(&mem).await, b"v3v3");
}

#[tokio::test]
async fn a_pending_file_reopened_and_closed_unchanged_is_still_committed() {
    let (_built, mem) = setup();
    let fs = write_back_fs(mem.clone(), Duration::from_secs(3600));
    fs_write_file(&fs, "c/0/0", b"v4v4").await.unwrap();
    let ino = fs_resolve(&fs, "c/0/0").await.unwrap().ino;
    let fh = fs.open(ino, true, false).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
    fs.write_back(true).await.unwrap();
    assert_eq!(stored(&mem).await, b"v4v4");
}

/// close() of one handle, then open(O_TRUNC) again before the kernel's (asynchronous) release
/// of the first handle reaches the daemon: that late release must not store the truncated file.
async fn late_release(fs: &Fs) -> u64 {
    let parent = fs_mkdir_p(fs, "c/0").await.unwrap();
    let (attr, first) = fs.create(parent, "0", true).await.unwrap();
    fs.write(first, 0, b"v5v5").await.unwrap();
    fs.flush(first).await.unwrap(); // close() returned
    let second = fs.open(attr.ino, true, true).await.unwrap();
    fs.release(first).await; // the first handle's release arrives late
    second
}

#[tokio::test]
async fn a_late_release_does_not_commit_the_next_writers_truncation() {
    let (_built, mem) = setup();
    let fs = writable_fs(mem.clone());
    let second = late_release(&fs).await;
    assert_eq!(
        stored(&mem).await,
        b"v5v5",
        "the release stored the reopened, truncated file"
    );
    fs.write(second, 0, b"v6v6").await.unwrap();
    fs.flush(second).await.unwrap();
    fs.release(second).await;
    assert_eq!(stored(&mem).await, b"v6v6");
}

#[tokio::test]
async fn a_late_release_does_not_make_a_file_being_rewritten_pending() {
    let (_built, mem) = setup();
    let fs = write_back_fs(mem.clone(), Duration::ZERO);
    let second = late_release(&fs).await;
    fs.write_back(false).await.unwrap();
    let now = stored(&mem).await;
    assert!(now == b"old!" || now == b"v5v5", "c/0/0 stored half-written: {now:?}");
    fs.write(second, 0, b"v6v6").await.unwrap();
    fs.flush(second).await.unwrap();
    fs.release(second).await;
    fs.write_back(false).await.unwrap();
    assert_eq!(stored(&mem).await, b"v6v6");
}

/// No counters of the layers below the view: the stats hold the filesystem's own.
#[derive(Debug)]
struct NoCounters;

impl zarrfs::fs::Counters for NoCounters {
    fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
}

fn oldest_pending_ms(fs: &Fs) -> Option<u64> {
    let stats: serde_json::Value = serde_json::from_slice(&fs.stats_json().unwrap()).unwrap();
    stats.get("write_back_oldest_pending_ms").map(|v| v.as_u64().unwrap())
}

#[tokio::test]
async fn the_stats_say_how_long_the_oldest_closed_file_has_waited_for_write_back() {
    // What `zarrfs_write_back_oldest_pending_seconds` serves: without a journal, the only
    // age of writes a mount holds.
    let (_built, mem) = setup();
    let fs = write_back_fs(mem.clone(), Duration::from_secs(3600)).with_counters(Arc::new(NoCounters));
    assert_eq!(oldest_pending_ms(&fs), Some(0), "nothing pending");
    fs_write_file(&fs, "c/0/0", b"v1v1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    fs_write_file(&fs, "c/1/1", b"side").await.unwrap();
    let age = oldest_pending_ms(&fs).unwrap();
    assert!((120..60_000).contains(&age), "the first file's age: {age} ms");
    fs.write_back(true).await.unwrap();
    assert_eq!(oldest_pending_ms(&fs), Some(0), "committed");
    assert_eq!(stored(&mem).await, b"v1v1");
    let plain = writable_fs(mem);
    assert!(plain.stats_json().is_err() || oldest_pending_ms(&plain).is_none());
}
