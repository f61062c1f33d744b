//! Opens for writing that race the name's inode being replaced, driven on the filesystem layer
//! without a mount, as the kernel sends them: a lookup, then an open of the inode it gave; on
//! ESTALE one more lookup and one more open, and a second ESTALE reaches the writer (the kernel
//! retries an open once). The two-mount model test (tests/clients/test_model_concurrency.py)
//! met these interleavings under churn; see `fs/inodes/caching.rs` and `Fs::open_replaced`.

mod common;

use std::sync::Arc;

use common::*;
use zarrfs::fs::{Fs, FsError};
use zarrfs::store::fault::{FaultPlan, FaultStore};
use zarrfs::store::memory::MemoryStore;
use zarrfs::zarr::sharding::IndexLocation;

/// A writable `Fs` over one sharded array at `a/` with every chunk stored, and the bytes of
/// the chunk file `a/c/0/0`.
fn setup() -> (Arc<MemoryStore>, Arc<Fs>, Vec<u8>) {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(IndexLocation::End, LE_CRC);
    let chunks = spec.full_chunks(3, 4, 9);
    let first = chunks[&vec![0, 0]].clone();
    let built = spec.build("a/", &chunks);
    let mem = memory_store(&built.files);
    mem.insert("zarr.json", group_json("root"));
    (mem.clone(), Arc::new(writable_fs(mem)), first)
}

async fn read_whole(fs: &Fs, ino: u64) -> Vec<u8> {
    let fh = fs.open(ino, false, false).await.unwrap();
    let bytes = fs.read(fh, 0, 4096).await.unwrap().to_vec();
    fs.release(fh).await;
    bytes
}

/// Write `data` through a handle and close it.
async fn write_close(fs: &Fs, fh: u64, data: &[u8]) {
    fs.write(fh, 0, data).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
}

/// Put a file with `data` at `a/c/0/<name>` by writing a temporary name and renaming it there.
async fn rename_onto(fs: &Fs, dir: u64, name: &str, data: &[u8]) {
    let (_, fh) = fs.create(dir, "t.partial", true).await.unwrap();
    write_close(fs, fh, data).await;
    fs.rename(dir, "t.partial", dir, name, false).await.unwrap();
}

#[tokio::test]
async fn a_writer_of_a_cached_inode_nobody_reads_is_answered_at_once() {
    let (_, fs, first) = setup();
    let attr = fs_resolve(&fs, "a/c/0/0").await.unwrap();
    // Read through the page cache and closed: the inode is cached, no cached handle is open.
    let reader = fs.open_file(attr.ino, false, false).await.unwrap();
    assert!(!reader.direct_io, "the reader is given the page cache");
    assert_eq!(fs.read(reader.fh, 0, 4096).await.unwrap().to_vec(), first);
    fs.release(reader.fh).await;
    // The kernel's inode is written through: no ESTALE, direct I/O.
    let writer = fs.open_file(attr.ino, true, true).await.unwrap();
    assert!(writer.direct_io);
    write_close(&fs, writer.fh, b"new bytes, another size").await;
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 23);
    assert_eq!(fs_resolve(&fs, "a/c/0/0").await.unwrap().ino, attr.ino);
    // Readers of it from now on are direct too (its size changed: no page may be read).
    let again = fs.open_file(attr.ino, false, false).await.unwrap();
    assert!(again.direct_io);
    assert_eq!(
        fs.read(again.fh, 0, 4096).await.unwrap().to_vec(),
        b"new bytes, another size"
    );
    fs.release(again.fh).await;
}

#[tokio::test]
async fn a_writer_of_a_cached_inode_being_read_is_sent_to_a_new_inode() {
    let (_, fs, first) = setup();
    let attr = fs_resolve(&fs, "a/c/0/0").await.unwrap();
    let reader = fs.open_file(attr.ino, false, false).await.unwrap();
    assert!(!reader.direct_io);
    // A cached handle is open: the inode must keep its size, the writer looks again.
    assert!(matches!(fs.open(attr.ino, true, true).await, Err(FsError::Replaced)));
    let new = fs_resolve(&fs, "a/c/0/0").await.unwrap();
    assert_ne!(new.ino, attr.ino);
    let fh = fs.open(new.ino, true, true).await.unwrap();
    write_close(&fs, fh, b"written").await;
    // The cached inode keeps the size its pages were read at.
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, first.len() as u64);
    fs.release(reader.fh).await;
    assert_eq!(read_whole(&fs, new.ino).await, b"written");
}

#[tokio::test]
async fn a_retried_open_that_meets_a_rename_again_is_not_estale() {
    // The model test's failure: the first open retires a cached inode (a reader has it open),
    // the kernel looks the name up again, and before its second open a rename replaces the
    // new inode too. The truncating open then gets the replaced file (ordered before the
    // rename: its write goes nowhere), never ESTALE.
    let (_, fs, _) = setup();
    let dir = fs_resolve(&fs, "a/c/0").await.unwrap().ino;
    let attr = fs_resolve(&fs, "a/c/0/0").await.unwrap();
    let reader = fs.open_file(attr.ino, false, false).await.unwrap();
    assert!(!reader.direct_io);
    assert!(matches!(fs.open(attr.ino, true, true).await, Err(FsError::Replaced)));
    let retry = fs.lookup(dir, "0").await.unwrap();
    rename_onto(&fs, dir, "0", b"renamed onto the name").await;
    let fh = fs.open(retry.ino, true, true).await.expect("the retried open");
    write_close(&fs, fh, b"ordered before the rename").await;
    assert_eq!(fs_read_path(&fs, "a/c/0/0").await.unwrap(), b"renamed onto the name");
    fs.release(reader.fh).await;
}

#[tokio::test]
async fn an_open_of_an_inode_removed_since_its_lookup() {
    let (_, fs, _) = setup();
    let dir = fs_resolve(&fs, "a/c/0").await.unwrap().ino;
    // Replaced by a rename: a truncating writer gets the replaced file, whose content is gone
    // for anything else (ESTALE: the kernel looks the name up again).
    let looked = fs.lookup(dir, "0").await.unwrap();
    rename_onto(&fs, dir, "0", b"the new file").await;
    assert_eq!(
        fs.open(looked.ino, true, false).await.unwrap_err().errno(),
        libc::ESTALE
    );
    let fh = fs.open(looked.ino, true, true).await.unwrap();
    write_close(&fs, fh, b"goes nowhere").await;
    assert_eq!(fs_read_path(&fs, "a/c/0/0").await.unwrap(), b"the new file");
    // Removed: the same, and the name stays absent.
    let looked = fs.lookup(dir, "1").await.unwrap();
    fs.unlink(dir, "1").await.unwrap();
    let fh = fs.open(looked.ino, true, true).await.unwrap();
    write_close(&fs, fh, b"goes nowhere").await;
    assert_eq!(fs.lookup(dir, "1").await.unwrap_err().errno(), libc::ENOENT);
}

#[tokio::test]
async fn a_writer_through_an_inode_its_name_left_for_another_size_looks_again() {
    // The two-mount fault workload's lost write: the kernel opens the inode its entry names
    // while a lookup (another thread's) finds another mount's rewrite of the file, of another
    // size, and gives the name a new inode (see `fs/inodes/sizes.rs`). Nothing removed or
    // replaced the old inode through this mount, so the open is not ordered before anything:
    // it must not write where no name leads (its close succeeding, the bytes gone). The
    // kernel is sent to look again (ESTALE) and writes through the name's inode.
    let (mem, fs, first) = setup();
    let dir = fs_resolve(&fs, "a/c/0").await.unwrap().ino;
    let old = fs.lookup(dir, "0").await.unwrap();
    assert_eq!(old.size, first.len() as u64);
    let other = writable_fs(mem.clone());
    let (_, fh) = fs_open_write(&other, "a/c/0/0", true).await.unwrap();
    write_close(&other, fh, b"another mount's bytes, another size").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await; // the metadata TTL
    let new = fs.lookup(dir, "0").await.unwrap();
    assert_ne!(new.ino, old.ino, "another size at the name is another inode");
    let fh = match fs.open(old.ino, true, true).await {
        Ok(fh) => fh,
        Err(FsError::Replaced) => fs
            .open(fs.lookup(dir, "0").await.unwrap().ino, true, true)
            .await
            .unwrap(),
        Err(e) => panic!("the open through the old inode: {e}"),
    };
    write_close(&fs, fh, b"written after").await;
    assert_eq!(fs_read_path(&fs, "a/c/0/0").await.unwrap(), b"written after");
    assert_eq!(
        fs_read_path(&writable_fs(mem), "a/c/0/0").await.unwrap(),
        b"written after"
    );
}

#[tokio::test]
async fn a_writer_through_the_name_a_failed_rename_kept_looks_again() {
    // A rename of a file open for writing moves it in the mount, then stores it; when storing
    // fails the kernel is told the rename failed and keeps leading the destination's name to
    // the inode the move replaced. A truncating open through that name raced nothing: it must
    // not write where no name leads.
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(IndexLocation::End, LE_CRC);
    let built = spec.build("a/", &spec.full_chunks(3, 4, 9));
    let mem = memory_store(&built.files);
    mem.insert("zarr.json", group_json("root"));
    let faults = Arc::new(FaultStore::new(mem.clone(), FaultPlan::default()));
    let fs = writable_fs(faults.clone());
    let dir = fs_resolve(&fs, "a/c/0").await.unwrap().ino;
    let kept = fs.lookup(dir, "0").await.unwrap(); // the kernel's entry for the destination
    let (_, moving) = fs_open_write(&fs, "a/c/0/1", true).await.unwrap();
    fs.write(moving, 0, b"moved").await.unwrap();
    faults.refuse_writes(true);
    assert!(fs.rename(dir, "1", dir, "0", false).await.is_err());
    faults.refuse_writes(false);
    fs.flush(moving).await.unwrap();
    fs.release(moving).await;
    let fh = match fs.open(kept.ino, true, true).await {
        Ok(fh) => fh,
        Err(FsError::Replaced) => fs
            .open(fs.lookup(dir, "0").await.unwrap().ino, true, true)
            .await
            .unwrap(),
        Err(e) => panic!("the open through the kept entry: {e}"),
    };
    write_close(&fs, fh, b"written after").await;
    assert_eq!(fs_read_path(&fs, "a/c/0/0").await.unwrap(), b"written after");
    assert_eq!(
        fs_read_path(&writable_fs(mem), "a/c/0/0").await.unwrap(),
        b"written after"
    );
}
