//! What clients' own test suites ask of a filesystem beyond reads and writes, driven on the
//! filesystem layer without a mount (`fs/link.rs`, `fs/unlinked.rs`, `fs/dirs.rs`):
//! - `link(existing, new)` makes `new` a file of its own with the content, exclusively
//!   (EEXIST when `new` exists, also when another mount of the store made it), packed into its
//!   shard when `new` is a chunk key — zarr-python's `LocalStore` creates keys that way;
//! - a file unlinked, or replaced by a rename, while open stays readable, writable and
//!   `fstat`-able through its handles (with no link), and its later writes go nowhere;
//! - a removed directory's name is free at once, for a directory or a file.

mod common;

use std::sync::Arc;

use common::*;
use serde_json::json;
use zarrfs::fs::{Fs, FsError};
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{GetOptions, Store};
use zarrfs::zarr::sharding::IndexLocation;

fn errno<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Ok(v) => panic!("succeeded: {v:?}"),
        Err(e) => e.errno(),
    }
}

async fn stored(store: &dyn Store, key: &str) -> Option<Vec<u8>> {
    store
        .get(key, GetOptions::default())
        .await
        .unwrap()
        .map(|g| g.bytes.to_vec())
}

/// A writable `Fs` over a store holding one sharded array at `a/` (shape [8, 8], shards
/// [4, 4], inner chunks [2, 2]) with every chunk stored, under a root group.
fn setup() -> (Arc<MemoryStore>, Arc<Fs>, Built) {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(IndexLocation::End, LE_CRC);
    let built = spec.build("a/", &spec.full_chunks(3, 4, 9));
    let mem = memory_store(&built.files);
    mem.insert("zarr.json", group_json("root"));
    let fs = Arc::new(writable_fs(mem.clone()));
    (mem, fs, built)
}

async fn write_file(fs: &Fs, parent: u64, name: &str, data: &[u8]) {
    let (_, fh) = fs.create(parent, name, true).await.unwrap();
    fs.write(fh, 0, data).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
}

#[tokio::test]
async fn link_then_unlink_creates_a_group_document_exclusively() {
    // zarr-python's `set_if_not_exists`: write `zarr.<hex>.partial`, link it to `zarr.json`,
    // unlink the temporary name; a second creator gets EEXIST and leaves the first one's.
    let (mem, fs, _) = setup();
    let g = fs_mkdir_p(&fs, "x/y").await.unwrap();
    let doc = serde_json::to_vec(&json!({"zarr_format": 3, "node_type": "group", "attributes": {"n": 1}})).unwrap();
    write_file(&fs, g, "zarr.1a2b.partial", &doc).await;
    let tmp = fs.lookup(g, "zarr.1a2b.partial").await.unwrap();
    let linked = fs.link(tmp.ino, g, "zarr.json").await.unwrap();
    assert_ne!(linked.ino, tmp.ino, "a copy: an inode of its own");
    assert_eq!((linked.size, linked.nlink), (doc.len() as u64, 1));
    fs.unlink(g, "zarr.1a2b.partial").await.unwrap();
    assert_eq!(stored(mem.as_ref(), "x/y/zarr.json").await, Some(doc.clone()));
    assert_eq!(stored(mem.as_ref(), "x/y/zarr.1a2b.partial").await, None);
    assert_eq!(fs_read_path(&fs, "x/y/zarr.json").await.unwrap(), doc);

    let other = b"{\"zarr_format\": 3, \"node_type\": \"group\"}";
    write_file(&fs, g, "zarr.3c4d.partial", other).await;
    let tmp = fs.lookup(g, "zarr.3c4d.partial").await.unwrap();
    assert_eq!(errno(fs.link(tmp.ino, g, "zarr.json").await), libc::EEXIST);
    // Made by another mount of the store since this one looked: the store refuses it.
    let fresh = writable_fs(mem.clone());
    let g2 = fs_mkdir_p(&fresh, "x/z").await.unwrap();
    write_file(&fresh, g2, "zarr.5e6f.partial", other).await;
    let tmp2 = fresh.lookup(g2, "zarr.5e6f.partial").await.unwrap();
    mem.insert("x/z/zarr.json", doc.clone());
    assert_eq!(errno(fresh.link(tmp2.ino, g2, "zarr.json").await), libc::EEXIST);
    assert_eq!(
        stored(mem.as_ref(), "x/z/zarr.json").await,
        Some(doc.clone()),
        "the first one's"
    );
    // Directories are not linked.
    let dir = fs.lookup(zarrfs::fs::inodes::ROOT_INO, "x").await.unwrap();
    assert_eq!(errno(fs.link(dir.ino, g, "dir-link").await), libc::EPERM);
}

#[tokio::test]
async fn linking_a_staged_file_onto_a_chunk_key_packs_it_only_if_the_chunk_is_absent() {
    let (mem, fs, built) = setup();
    let parent = fs_mkdir_p(&fs, "a/c/1").await.unwrap();
    // Present: EEXIST, and the stored chunk is untouched.
    let before = fs_read_path(&fs, "a/c/1/2").await.unwrap();
    write_file(&fs, parent, "2.abcd.partial", b"not this").await;
    let tmp = fs.lookup(parent, "2.abcd.partial").await.unwrap();
    assert_eq!(errno(fs.link(tmp.ino, parent, "2").await), libc::EEXIST);
    assert_eq!(fs_read_path(&fs, "a/c/1/2").await.unwrap(), before);
    // Removed (its entry emptied): the link packs the staged bytes into the shard.
    fs.unlink(parent, "2").await.unwrap();
    let linked = fs.link(tmp.ino, parent, "2").await.unwrap();
    assert_eq!(linked.size, 8);
    fs.unlink(parent, "2.abcd.partial").await.unwrap();
    let fresh = writable_fs(mem.clone());
    assert_eq!(fs_read_path(&fresh, "a/c/1/2").await.unwrap(), b"not this");
    assert_eq!(errno(fs_resolve(&fresh, "a/c/1/2.abcd.partial").await), libc::ENOENT);
    // Another mount filled the entry since: the shard's conditional rewrite says so.
    let parent2 = fs_mkdir_p(&fresh, "a/c/3").await.unwrap();
    fresh.unlink(parent2, "3").await.unwrap();
    write_file(&fresh, parent2, "3.tmp", b"second").await;
    write_file(&fs, fs_mkdir_p(&fs, "a/c/3").await.unwrap(), "3", b"first").await;
    let tmp = fresh.lookup(parent2, "3.tmp").await.unwrap();
    assert_eq!(errno(fresh.link(tmp.ino, parent2, "3").await), libc::EEXIST);
    assert_eq!(
        fs_read_path(&writable_fs(mem.clone()), "a/c/3/3").await.unwrap(),
        b"first"
    );
    // A chunk linked to a temporary name of its array: a staged copy; the chunk stays.
    let chunk = fs.lookup(parent, "0").await.unwrap();
    let copy = fs.link(chunk.ino, parent, "0.copy").await.unwrap();
    assert_eq!(copy.size, chunk.size);
    assert_eq!(
        fs_read_path(&fs, "a/c/1/0.copy").await.unwrap(),
        fs_read_path(&fs, "a/c/1/0").await.unwrap()
    );
    assert_eq!(errno(fs.link(chunk.ino, parent, "0.copy").await), libc::EEXIST);
    let _ = built;
}

#[tokio::test]
async fn a_file_unlinked_while_open_stays_readable_writable_and_statable() {
    let (mem, fs, _) = setup();
    let root = zarrfs::fs::inodes::ROOT_INO;
    // A file being written (a temporary file made and removed at once).
    let (attr, fh) = fs.create(root, "tmpfile", false).await.unwrap();
    fs.unlink(root, "tmpfile").await.unwrap();
    fs.write(fh, 0, b"hello there").await.unwrap();
    let st = fs.getattr(attr.ino).await.unwrap();
    assert_eq!((st.size, st.nlink), (11, 0));
    assert_eq!(&fs.read(fh, 6, 100).await.unwrap()[..], b"there");
    let st = fs.truncate(attr.ino, 5, Some(fh)).await.unwrap();
    assert_eq!(st.size, 5);
    fs.flush(fh).await.unwrap();
    // A new file at the name is another inode, unaffected by the old one's handle.
    write_file(&fs, root, "tmpfile", b"new").await;
    let new = fs.lookup(root, "tmpfile").await.unwrap();
    assert_ne!(new.ino, attr.ino);
    fs.write(fh, 0, b"late write").await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
    assert_eq!(stored(mem.as_ref(), "tmpfile").await.as_deref(), Some(&b"new"[..]));
    assert_eq!(errno(fs.getattr(attr.ino).await), libc::ESTALE, "closed: gone");

    // Readers of a stored file and of a chunk, opened before the unlink, never read before it.
    write_file(&fs, root, "plain.txt", b"stored bytes").await;
    let plain = fs.lookup(root, "plain.txt").await.unwrap();
    let rp = fs.open(plain.ino, false, false).await.unwrap();
    let chunk_path = "a/c/0/1";
    let want = fs_read_path(&fs, chunk_path).await.unwrap();
    let chunk = fs_resolve(&fs, chunk_path).await.unwrap();
    let rc = fs.open(chunk.ino, false, false).await.unwrap();
    fs.unlink(root, "plain.txt").await.unwrap();
    let c0 = fs_resolve(&fs, "a/c/0").await.unwrap();
    fs.unlink(c0.ino, "1").await.unwrap();
    assert_eq!(&fs.read(rp, 0, 100).await.unwrap()[..], b"stored bytes");
    assert_eq!(fs.read(rc, 0, 100).await.unwrap().to_vec(), want);
    assert_eq!(fs.getattr(plain.ino).await.unwrap().size, 12);
    assert_eq!(fs.getattr(chunk.ino).await.unwrap().size, want.len() as u64);
    assert_eq!(errno(fs.lookup(root, "plain.txt").await), libc::ENOENT);
    fs.release(rp).await;
    fs.release(rc).await;
}

#[tokio::test]
async fn a_file_replaced_by_a_rename_while_open_is_still_the_old_file() {
    let (_, fs, _) = setup();
    let root = zarrfs::fs::inodes::ROOT_INO;
    write_file(&fs, root, "o.txt", b"old content").await;
    write_file(&fs, root, "o2.txt", b"new").await;
    let old = fs.lookup(root, "o.txt").await.unwrap();
    let reader = fs.open(old.ino, false, false).await.unwrap();
    fs.rename(root, "o2.txt", root, "o.txt", false).await.unwrap();
    assert_eq!(&fs.read(reader, 0, 100).await.unwrap()[..], b"old content");
    assert_eq!(fs.getattr(old.ino).await.unwrap().size, 11);
    assert_eq!(fs_read_path(&fs, "o.txt").await.unwrap(), b"new");
    assert_ne!(fs.lookup(root, "o.txt").await.unwrap().ino, old.ino);
    fs.release(reader).await;
    // A chunk replaced by a rename onto its key, read by a handle opened before.
    let c = fs_resolve(&fs, "a/c/2").await.unwrap();
    let want = fs_read_path(&fs, "a/c/2/2").await.unwrap();
    let target = fs.lookup(c.ino, "2").await.unwrap();
    let reader = fs.open(target.ino, false, false).await.unwrap();
    fs.rename(c.ino, "3", c.ino, "2", false).await.unwrap();
    assert_eq!(fs.read(reader, 0, 100).await.unwrap().to_vec(), want);
    fs.release(reader).await;
}

#[tokio::test]
async fn a_removed_directory_can_be_made_again_at_once() {
    // `shutil.rmtree` of a group, then `mkdir` of the same name (`LocalStore.clear()`).
    let (mem, fs, _) = setup();
    let root = zarrfs::fs::inodes::ROOT_INO;
    let g = fs_mkdir_p(&fs, "g/h").await.unwrap();
    write_file(&fs, g, "zarr.json", &group_json("h")).await;
    let listed = |items: Vec<zarrfs::fs::DirItem>| items.into_iter().map(|i| i.name.to_string()).collect::<Vec<_>>();
    let gi = fs.lookup(root, "g").await.unwrap();
    assert!(listed(fs_list(&fs, root).await.unwrap()).contains(&"g".to_string()));
    fs.unlink(g, "zarr.json").await.unwrap();
    fs.rmdir(gi.ino, "h").await.unwrap();
    fs.rmdir(root, "g").await.unwrap();
    assert!(!listed(fs_list(&fs, root).await.unwrap()).contains(&"g".to_string()));
    assert_eq!(errno(fs.lookup(root, "g").await), libc::ENOENT);
    assert_eq!(
        errno(fs.getattr(gi.ino).await),
        libc::ESTALE,
        "the removed directory's inode names nothing: the kernel would look again"
    );
    let again = fs.mkdir(root, "g").await.unwrap();
    assert_ne!(again.ino, gi.ino);
    assert_eq!(
        errno(fs.lookup(gi.ino, "h").await),
        libc::ESTALE,
        "nothing below the old inode"
    );
    fs.rmdir(root, "g").await.unwrap();
    write_file(&fs, root, "g", b"a file now").await;
    assert_eq!(stored(mem.as_ref(), "g").await.as_deref(), Some(&b"a file now"[..]));
}

#[tokio::test]
async fn a_chunk_is_not_linked_into_another_array() {
    // Its bytes are encoded for its own array: EXDEV, as for a rename; a plain copy is fine.
    let (mem, _, built) = setup();
    let other = built.spec.build("b/", &built.spec.full_chunks(5, 4, 9));
    for (key, bytes) in other.files {
        mem.insert(&key, bytes);
    }
    let fs = writable_fs(mem.clone());
    let chunk = fs_resolve(&fs, "a/c/0/0").await.unwrap();
    let b0 = fs_mkdir_p(&fs, "b/c/0").await.unwrap();
    fs.unlink(b0, "0").await.unwrap();
    assert_eq!(errno(fs.link(chunk.ino, b0, "0").await), libc::EXDEV);
    assert_eq!(errno(fs_resolve(&fs, "b/c/0/0").await), libc::ENOENT);
    let copy = fs
        .link(chunk.ino, zarrfs::fs::inodes::ROOT_INO, "chunk.bin")
        .await
        .unwrap();
    assert_eq!(copy.size, chunk.size);
    assert_eq!(
        stored(mem.as_ref(), "chunk.bin").await.unwrap(),
        fs_read_path(&fs, "a/c/0/0").await.unwrap()
    );
}
