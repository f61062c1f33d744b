//! The write path of the filesystem layer (`fs/write.rs` over `shard/commit.rs`), driven
//! without a mount: chunk files written, truncated, unlinked and renamed are packed into their
//! shards (checked in the store and through a fresh `Fs`), temporary names are staged, chunk
//! directories are implicit, the view's `zarr.json` is translated back, closes of one shard are
//! group-committed, two mounts over one store lose no update, write buffers spill to disk,
//! opt-in write-back defers commits, and a read-only mount refuses every mutation.
//!
//! Some tests pin plain-file semantics for files that are open (or pending) while renamed,
//! removed or created again; see each test's comment.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use zarrfs::fs::inodes::ROOT_INO;
use zarrfs::fs::journal::record::Kind;
use zarrfs::fs::journal::Journal;
use zarrfs::fs::{FileKind, Fs, FsConfig, FsError};
use zarrfs::store::counting::CountingStore;
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{GetOptions, Store};
use zarrfs::view::{View, ViewOptions};
use zarrfs::zarr::sharding::IndexLocation;

/// An array in a store, a writable `Fs` over it, and the chunks the store must hold.
struct Setup {
    built: Built,
    mem: Arc<MemoryStore>,
    counts: Arc<CountingStore>,
    fs: Arc<Fs>,
    /// Every stored inner chunk, in or out of the grid.
    chunks: Chunks,
}

impl Setup {
    fn new(spec: &ArraySpec, prefix: &str, chunks: Chunks) -> Setup {
        let built = spec.build(prefix, &chunks);
        let mem = memory_store(&built.files);
        if !prefix.is_empty() {
            mem.insert("zarr.json", group_json("root"));
        }
        let counts = Arc::new(CountingStore::new(mem.clone()));
        let fs = Arc::new(writable_fs(counts.clone()));
        Setup {
            built,
            mem,
            counts,
            fs,
            chunks,
        }
    }

    /// View path of the chunk file at `coords`.
    fn path(&self, coords: &[u64]) -> String {
        format!("{}{}", self.built.prefix, self.built.spec.encoding.encode(coords))
    }

    /// What the view must show: every in-grid chunk file, plus the view's `zarr.json`.
    fn view_files(&self) -> BTreeMap<String, Vec<u8>> {
        self.chunks
            .iter()
            .filter(|(c, _)| self.built.spec.in_grid(c))
            .map(|(c, b)| (self.path(c), b.clone()))
            .collect()
    }

    /// Check the store, this `Fs` and a fresh `Fs` over the same store against `chunks`.
    async fn check(&self) {
        self.check_with(&[self.fs.clone(), Arc::new(writable_fs(self.mem.clone()))])
            .await;
    }

    /// Check the store and a fresh `Fs` (when another mount wrote, this one may cache).
    async fn check_fresh(&self) {
        self.check_with(&[Arc::new(writable_fs(self.mem.clone()))]).await;
    }

    async fn check_with(&self, mounts: &[Arc<Fs>]) {
        check_shards(self.mem.as_ref(), &self.built, &self.chunks).await;
        let want = self.view_files();
        for fs in mounts {
            let (files, _) = fs_walk(fs).await;
            let chunk_files: BTreeMap<String, Vec<u8>> = files
                .into_iter()
                .filter(|(p, _)| p.starts_with(&self.built.prefix) && !p.ends_with("zarr.json"))
                .collect();
            assert_eq!(chunk_files.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
            for (p, b) in &want {
                assert!(chunk_files[p] == *b, "bytes of {p}");
            }
        }
    }
}

fn errno<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Ok(v) => panic!("succeeded: {v:?}"),
        Err(e) => e.errno(),
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// (parent inode, name) of `path`, making its directory if needed.
async fn parent_of(fs: &Fs, path: &str) -> (u64, String) {
    let (dir, name) = split(path);
    (fs_mkdir_p(fs, dir).await.unwrap(), name.to_string())
}

fn read_only_fs(store: Arc<dyn Store>) -> Fs {
    Fs::new(
        View::new(store, &ViewOptions::default()),
        FsConfig::read_only(FS_UID, FS_GID, Duration::from_secs(1)),
    )
}

/// A writable `Fs` with its configuration adjusted.
fn configured_fs(store: Arc<dyn Store>, adjust: impl FnOnce(&mut FsConfig)) -> Fs {
    let mut config = FsConfig::read_only(FS_UID, FS_GID, Duration::from_secs(1));
    config.writable = true;
    adjust(&mut config);
    Fs::new(View::new(store, &ViewOptions::default()), config)
}

/// 2-D, shape [7, 6], shard [4, 4], inner [2, 2] (nested: [2, 2] then [1, 2]).
fn small_spec(location: IndexLocation, codec: zarrfs::zarr::sharding::IndexCodec, nested: bool) -> ArraySpec {
    if nested {
        ArraySpec::new(&[7, 6], &[4, 4], &[2, 2])
            .index(location, codec)
            .nest(&[1, 2], IndexLocation::End, LE_CRC)
    } else {
        ArraySpec::new(&[7, 6], &[4, 4], &[2, 2]).index(location, codec)
    }
}

fn absent_in_grid(s: &Setup) -> Vec<Coords> {
    all_coords(&s.built.spec.inner_grid())
        .into_iter()
        .filter(|c| !s.chunks.contains_key(c))
        .collect()
}

fn present_in_grid(s: &Setup) -> Vec<Coords> {
    s.chunks.keys().filter(|c| s.built.spec.in_grid(c)).cloned().collect()
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn written_chunk_files_are_stored_exactly_in_every_index_form() {
    let mut n = 0;
    for location in [IndexLocation::Start, IndexLocation::End] {
        for codec in ALL_INDEX_CODECS {
            for (i, encoding) in ALL_ENCODINGS.into_iter().enumerate() {
                let nested = i % 2 == 1;
                let spec = small_spec(location, codec, nested)
                    .encoding(encoding)
                    .gap(2)
                    .reverse(true);
                n += 1;
                let chunks = spec.random_chunks(n, 50, 12);
                let mut s = Setup::new(&spec, if n % 2 == 0 { "" } else { "a/" }, chunks);
                let fs = s.fs.clone();

                // A new chunk, written out of order with a hole, truncated through its handle.
                let new = absent_in_grid(&s)[0].clone();
                let (parent, name) = parent_of(&fs, &s.path(&new)).await;
                let (attr, fh) = fs.create(parent, &name, false).await.unwrap();
                assert_eq!((attr.kind, attr.size), (FileKind::File, 0));
                assert_eq!(fs.write(fh, 5, b"world").await.unwrap(), 5);
                assert_eq!(fs.write(fh, 0, b"hello").await.unwrap(), 5);
                assert_eq!(fs.write(fh, 3, b"LO").await.unwrap(), 2);
                assert_eq!(fs.read(fh, 0, 100).await.unwrap().to_vec(), b"helLOworld");
                assert_eq!(fs.truncate(attr.ino, 8, Some(fh)).await.unwrap().size, 8);
                fs.write(fh, 12, b"!").await.unwrap();
                assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 13);
                fs.flush(fh).await.unwrap();
                fs.release(fh).await;
                s.chunks.insert(new.clone(), b"helLOwor\0\0\0\0!".to_vec());

                // Existing chunks: overwritten in the middle, past the end, with O_TRUNC.
                let present = present_in_grid(&s);
                let c = &present[0];
                let attr = fs_resolve(&fs, &s.path(c)).await.unwrap();
                let fh = fs.open(attr.ino, true, false).await.unwrap();
                fs.write(fh, 1, b"XY").await.unwrap();
                fs.write(fh, attr.size + 3, b"Z").await.unwrap();
                fs.release(fh).await;
                let mut want = s.chunks[c].clone();
                want.resize(want.len().max(3), 0);
                want[1..3].copy_from_slice(b"XY");
                want.resize(attr.size as usize + 3, 0);
                want.push(b'Z');
                s.chunks.insert(c.clone(), want);
                if let Some(c) = present.get(1) {
                    let attr = fs_resolve(&fs, &s.path(c)).await.unwrap();
                    let fh = fs.open(attr.ino, true, true).await.unwrap();
                    fs.write(fh, 0, b"short").await.unwrap();
                    fs.release(fh).await;
                    s.chunks.insert(c.clone(), b"short".to_vec());
                }
                // Truncated by path, shorter and longer.
                if let Some(c) = present.get(2) {
                    let attr = fs_resolve(&fs, &s.path(c)).await.unwrap();
                    assert_eq!(fs.truncate(attr.ino, 1, None).await.unwrap().size, 1);
                    s.chunks.get_mut(c).unwrap().resize(1, 0);
                    assert_eq!(fs.truncate(attr.ino, 6, None).await.unwrap().size, 6);
                    s.chunks.get_mut(c).unwrap().resize(6, 0);
                }
                s.check().await;
                // The metadata document is untouched.
                let key = s.built.zarr_json_key();
                let stored = s.mem.get(&key, GetOptions::default()).await.unwrap().unwrap();
                assert_eq!(stored.bytes.to_vec(), s.built.files[&key], "{key}");
            }
        }
    }
}

#[tokio::test]
async fn handles_of_one_path_share_their_content_until_closed() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let mut s = Setup::new(&spec, "", spec.full_chunks(1, 4, 9));
    let fs = s.fs.clone();
    let c = vec![1, 2];
    let attr = fs_resolve(&fs, &s.path(&c)).await.unwrap();
    let reader = fs.open(attr.ino, false, false).await.unwrap();
    let before = fs.read(reader, 0, 100).await.unwrap().to_vec();
    assert_eq!(before, s.chunks[&c]);
    // The reader's inode is cached: the writer is sent to the name's new inode, as the kernel
    // is by ESTALE (see `fs/inodes/caching.rs`).
    assert!(matches!(fs.open(attr.ino, true, false).await, Err(FsError::Replaced)));
    let (ino, w1) = fs_open_write(&fs, &s.path(&c), false).await.unwrap();
    let w2 = fs.open(ino, true, false).await.unwrap();
    fs.write(w1, 0, b"AAAAAAAAAAAAAAAAAAAA").await.unwrap();
    assert_eq!(fs.read(w2, 0, 100).await.unwrap().to_vec(), b"AAAAAAAAAAAAAAAAAAAA");
    fs.write(w2, 10, b"BB").await.unwrap();
    assert_eq!(fs.getattr(ino).await.unwrap().size, 20);
    // The cached inode keeps its size; a handle opened for reading before keeps its snapshot.
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, before.len() as u64);
    assert_eq!(fs.read(reader, 0, 100).await.unwrap().to_vec(), before);
    fs.release(w1).await;
    fs.release(w2).await;
    fs.release(reader).await;
    s.chunks.insert(c, b"AAAAAAAAAABBAAAAAAAA".to_vec());
    s.check().await;
}

/// A writable `Fs` whose store answers reads after 20 ms and which trusts nothing cached: every
/// open looks its file up in the store, so concurrent operations interleave there.
fn slow_fs(store: Arc<MemoryStore>) -> Fs {
    slow_fs_over(Arc::new(zarrfs::store::latency::LatencyStore::new(
        store,
        Duration::from_millis(20),
    )))
}

/// [`slow_fs`] over a store that answers slowly already (to count its round trips).
fn slow_fs_over(slow: Arc<zarrfs::store::latency::LatencyStore>) -> Fs {
    let options = ViewOptions {
        metadata_ttl: Duration::ZERO,
        ..ViewOptions::default()
    };
    let mut config = FsConfig::read_only(FS_UID, FS_GID, Duration::ZERO);
    config.writable = true;
    Fs::new(View::new(slow, &options), config)
}

/// Two opens of one name, each finding nothing held and both looking the file up in the store
/// at once (a round trip each): the one that holds it second must get the first one's file.
/// It got its own, which no name led to: its writes went nowhere and its close committed
/// nothing, reporting success (the model test saw a write lost this way, and the file a reader's
/// open put there kept showing the older content to every later reader).
#[tokio::test]
async fn opens_racing_on_one_name_share_one_file() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let mut s = Setup::new(&spec, "", spec.full_chunks(1, 4, 9));
    let fs = slow_fs(s.mem.clone());
    let c = vec![1, 2];
    let len = s.chunks[&c].len();
    let attr = fs_resolve(&fs, &s.path(&c)).await.unwrap();
    for round in 0..4u8 {
        let (a, b) = tokio::join!(fs.open(attr.ino, true, true), fs.open(attr.ino, true, true));
        let (a, b) = (a.unwrap(), b.unwrap());
        let (first, last) = if round % 2 == 0 { (a, b) } else { (b, a) };
        fs.write(first, 0, &vec![b'F' + round; len]).await.unwrap();
        fs.write(last, 0, &vec![b'a' + round; len]).await.unwrap();
        assert_eq!(fs.read(first, 0, 100).await.unwrap().to_vec(), vec![b'a' + round; len]);
        fs.flush(first).await.unwrap();
        fs.flush(last).await.unwrap();
        fs.release(a).await;
        fs.release(b).await;
        let reader = fs.open(attr.ino, false, false).await.unwrap();
        assert_eq!(
            fs.read(reader, 0, 100).await.unwrap().to_vec(),
            vec![b'a' + round; len],
            "round {round}"
        );
        fs.release(reader).await;
    }
    s.chunks.insert(c, vec![b'a' + 3; len]);
    s.check_fresh().await;
}

/// A replay asks the store whether it already holds each journaled file for many files at
/// once: files in 8 shards, stored as journaled but for one, take a few round trips to check,
/// where one file after another took a round trip or two each.
#[tokio::test]
async fn a_replay_checks_the_store_for_many_files_at_once() {
    let spec = ArraySpec::new(&[16, 2], &[2, 2], &[1, 1]).index(IndexLocation::End, LE_CRC);
    let mut s = Setup::new(&spec, "", spec.full_chunks(3, 4, 9));
    let slow = Arc::new(zarrfs::store::latency::LatencyStore::new(
        s.mem.clone(),
        Duration::from_millis(20),
    ));
    let dir = tempfile::tempdir().unwrap();
    let journal = |fs: Fs| {
        let (journal, replay) = Journal::open(dir.path(), "mem", 1 << 20).unwrap();
        (fs.with_journal(Arc::new(journal)), replay)
    };
    // A mount journals one file of each of the 8 shards and dies before committing; the store
    // has all but the last already (another commit landed them before the crash).
    let (fs, _) = journal(slow_fs_over(slow.clone()));
    let files: Vec<(String, Vec<u8>)> = (0..8u64)
        .map(|i| {
            let c = vec![2 * i, 1];
            let data = match i {
                7 => b"new content".to_vec(),
                _ => s.chunks[&c].clone(),
            };
            (s.path(&c), data)
        })
        .collect();
    let entries = files
        .iter()
        .map(|(p, d)| (p.clone(), Kind::Content(bytes::Bytes::from(d.clone()))))
        .collect();
    fs.journal().unwrap().append(entries).unwrap();
    drop(fs);
    let (fs, replay) = journal(slow_fs_over(slow.clone()));
    let since = slow.sent().len();
    let done = fs.replay_journal(replay).await.unwrap();
    assert_eq!((done.files, done.already_stored), (1, 7), "{done:?}");
    let waves = slow.waves(since);
    // One after another: 3 or 4 each (metadata, index, version, bytes), over 24.
    assert!(
        waves <= 6,
        "8 files in 8 shards took {waves} round trips to check: {:?}",
        slow.requests(since)
    );
    s.chunks.insert(vec![14, 1], b"new content".to_vec());
    s.check_fresh().await;
}

#[tokio::test]
async fn empty_files_o_trunc_and_exclusive_create() {
    let spec = small_spec(IndexLocation::Start, BE_CRC, true).encoding(DEF_DOT);
    let mut s = Setup::new(&spec, "arr/", spec.random_chunks(5, 50, 10));
    let fs = s.fs.clone();
    // Created and closed without a write: a present, empty chunk.
    let new = absent_in_grid(&s)[0].clone();
    let (parent, name) = parent_of(&fs, &s.path(&new)).await;
    let (_, fh) = fs.create(parent, &name, false).await.unwrap();
    fs.release(fh).await;
    s.chunks.insert(new.clone(), Vec::new());
    assert_eq!(fs_resolve(&fs, &s.path(&new)).await.unwrap().size, 0);
    // Exclusive create of an existing chunk.
    assert_eq!(errno(fs.create(parent, &name, false).await), libc::EEXIST);
    // O_TRUNC on open, and truncation to zero: still present, empty.
    let present = present_in_grid(&s);
    let a = fs_resolve(&fs, &s.path(&present[1])).await.unwrap();
    let fh = fs.open(a.ino, true, true).await.unwrap();
    fs.release(fh).await;
    s.chunks.insert(present[1].clone(), Vec::new());
    let b = fs_resolve(&fs, &s.path(&present[2])).await.unwrap();
    fs.truncate(b.ino, 0, None).await.unwrap();
    s.chunks.insert(present[2].clone(), Vec::new());
    // Create with truncation of an existing chunk replaces it.
    let path = s.path(&present[3]);
    let (dir, name) = split(&path);
    let parent = fs_resolve(&fs, dir).await.unwrap().ino;
    let (attr, fh) = fs.create(parent, name, true).await.unwrap();
    assert_eq!(attr.size, 0);
    fs.write(fh, 0, b"replaced").await.unwrap();
    fs.release(fh).await;
    s.chunks.insert(present[3].clone(), b"replaced".to_vec());
    s.check().await;
}

#[tokio::test]
async fn unlink_removes_chunks_and_erases_emptied_shards() {
    // Shard (0, 0) holds inner chunks (0..2, 0..2); shard (1, 1) too.
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).gap(1);
    let chunks = spec.full_chunks(3, 1, 8);
    let mut s = Setup::new(&spec, "", chunks);
    let fs = s.fs.clone();
    for c in [vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]] {
        let path = s.path(&c);
        let (dir, name) = split(&path);
        let parent = fs_resolve(&fs, dir).await.unwrap();
        fs.unlink(parent.ino, name).await.unwrap();
        s.chunks.remove(&c);
        assert_eq!(errno(fs_resolve(&fs, &path).await), libc::ENOENT, "{path}");
        assert_eq!(errno(fs.unlink(parent.ino, name).await), libc::ENOENT, "{path} again");
        s.check().await;
    }
    assert!(s.mem.head("c/0/0").await.unwrap().is_none(), "emptied shard erased");
    assert!(s.mem.head("c/1/1").await.unwrap().is_some());
    // Directories are not files.
    let c = fs_resolve(&fs, "c").await.unwrap();
    assert_eq!(errno(fs.unlink(c.ino, "2").await), libc::EISDIR);
    // Every chunk gone: no shard left, no chunk tree.
    for c in present_in_grid(&s) {
        let path = s.path(&c);
        let (dir, name) = split(&path);
        let parent = fs_resolve(&fs, dir).await.unwrap();
        fs.unlink(parent.ino, name).await.unwrap();
        s.chunks.remove(&c);
    }
    s.check().await;
    let keys: Vec<String> = dump_store(s.mem.as_ref()).await.into_keys().collect();
    assert_eq!(keys, ["zarr.json"]);
    let root: Vec<String> = fs_list(&fs, ROOT_INO)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.into())
        .collect();
    assert_eq!(root, ["zarr.json"]);
}

#[tokio::test]
async fn chunks_stored_outside_the_grid_survive_repacking() {
    // Inner grid [3]; the edge shard covers inner chunks 2 and 3, and 3 is outside the grid.
    let spec = ArraySpec::new(&[5], &[4], &[2]).index(IndexLocation::Start, LE);
    let chunks = spec.full_chunks(4, 2, 6);
    assert!(chunks.contains_key(&vec![3]));
    let mut s = Setup::new(&spec, "", chunks);
    let fs = s.fs.clone();
    fs_write_file(&fs, "c/2", b"new two").await.unwrap();
    s.chunks.insert(vec![2], b"new two".to_vec());
    s.check().await;
    let c = fs_resolve(&fs, "c").await.unwrap();
    fs.unlink(c.ino, "2").await.unwrap();
    s.chunks.remove(&vec![2]);
    s.check().await;
    assert!(
        s.mem.head("c/1").await.unwrap().is_some(),
        "shard kept for the outside chunk"
    );
}

#[tokio::test]
async fn chunk_keys_outside_the_grid_cannot_be_written() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let s = Setup::new(&spec, "", spec.random_chunks(6, 50, 8));
    let before = dump_store(s.mem.as_ref()).await;
    let fs = s.fs.clone();
    // Inner grid [4, 3]: column 3 is in the stored edge shard but outside the grid.
    let (parent, _) = parent_of(&fs, "c/0/x").await;
    let (_, fh) = fs.create(parent, "3", true).await.unwrap();
    fs.write(fh, 0, b"nope").await.unwrap();
    assert_eq!(errno(fs.flush(fh).await), libc::EINVAL);
    fs.release(fh).await;
    assert_eq!(dump_store(s.mem.as_ref()).await, before);
    assert_eq!(errno(fs.lookup(parent, "3").await), libc::ENOENT);
}

// ---------------------------------------------------------------------------------------------
// Staging and renames.

#[tokio::test]
async fn temporary_names_are_staged_until_renamed_onto_a_chunk_key() {
    for encoding in ALL_ENCODINGS {
        let spec = small_spec(IndexLocation::End, LE_CRC, false).encoding(encoding);
        let mut s = Setup::new(&spec, "a/", spec.random_chunks(7, 50, 10));
        let fs = s.fs.clone();
        let targets = [vec![0, 1], vec![3, 2], vec![2, 0], vec![1, 1]];
        for (i, c) in targets.iter().enumerate() {
            let path = s.path(c);
            let (dir, name) = split(&path);
            let temp = match i {
                0 => format!("{name}.a1b2c3d4.partial"),
                1 => format!(".{name}.XyZ123"),
                2 => format!("{name}~"),
                _ => format!("tmp{i}"),
            };
            let before = dump_store(s.mem.as_ref()).await;
            s.counts.reset();
            let parent = fs_mkdir_p(&fs, dir).await.unwrap();
            let data = chunk_bytes(c, 10 + i, 77);
            let (attr, fh) = fs.create(parent, &temp, false).await.unwrap();
            fs.write(fh, 0, &data).await.unwrap();
            fs.flush(fh).await.unwrap();
            // Closed before the rename (rsync) or still open (a writer renaming its fd's file).
            let still_open = i % 2 == 1;
            if !still_open {
                fs.release(fh).await;
            }
            let counts = s.counts.counts();
            assert_eq!(
                (counts.set, counts.erase),
                (0, 0),
                "{encoding:?} {temp}: nothing stored"
            );
            assert_eq!(dump_store(s.mem.as_ref()).await, before, "{encoding:?} {temp}");
            // Visible to lookup, getattr and reads.
            let found = fs.lookup(parent, &temp).await.unwrap();
            assert_eq!((found.ino, found.size), (attr.ino, data.len() as u64));
            assert_eq!(fs.getattr(found.ino).await.unwrap().size, data.len() as u64);
            assert_eq!(fs_read(&fs, found.ino).await.unwrap(), data, "{temp}");
            // Renamed onto the chunk key: committed there.
            fs.rename(parent, &temp, parent, name, false).await.unwrap();
            if still_open {
                fs.release(fh).await;
            }
            assert_eq!(
                errno(fs.lookup(parent, &temp).await),
                libc::ENOENT,
                "{temp} after rename"
            );
            s.chunks.insert(c.clone(), data);
            s.check().await;
        }
        // A staged file unlinked: gone, nothing stored.
        let before = dump_store(s.mem.as_ref()).await;
        let path = s.path(&[0, 0]);
        let parent = fs_mkdir_p(&fs, split(&path).0).await.unwrap();
        let temp = format!("{}.partial", split(&path).1);
        let (_, fh) = fs.create(parent, &temp, true).await.unwrap();
        fs.write(fh, 0, b"abandoned").await.unwrap();
        fs.release(fh).await;
        fs.unlink(parent, &temp).await.unwrap();
        assert_eq!(errno(fs.lookup(parent, &temp).await), libc::ENOENT);
        assert_eq!(dump_store(s.mem.as_ref()).await, before);
        // Staged renamed to staged stays staged; then onto a key.
        let (_, fh) = fs.create(parent, "one.tmp", true).await.unwrap();
        fs.write(fh, 0, b"via two names").await.unwrap();
        fs.release(fh).await;
        fs.rename(parent, "one.tmp", parent, "two.tmp", false).await.unwrap();
        assert_eq!(errno(fs.lookup(parent, "one.tmp").await), libc::ENOENT);
        assert_eq!(fs.lookup(parent, "two.tmp").await.unwrap().size, 13);
        assert_eq!(dump_store(s.mem.as_ref()).await, before);
        fs.rename(parent, "two.tmp", parent, split(&path).1, false)
            .await
            .unwrap();
        s.chunks.insert(vec![0, 0], b"via two names".to_vec());
        s.check().await;
    }
}

#[tokio::test]
async fn renaming_a_chunk_onto_another_key_of_its_array_moves_it() {
    for encoding in [DEF_SLASH, DEF_DOT] {
        let spec = small_spec(IndexLocation::Start, LE_CRC, true).encoding(encoding);
        let mut chunks = spec.full_chunks(8, 1, 10);
        chunks.remove(&vec![3, 2]);
        chunks.remove(&vec![0, 2]);
        let mut s = Setup::new(&spec, "", chunks);
        let fs = s.fs.clone();
        let moves: [(Coords, Coords); 4] = [
            (vec![0, 0], vec![3, 2]), // to another shard, absent target
            (vec![1, 1], vec![0, 2]), // absent target in another shard column
            (vec![2, 0], vec![2, 1]), // within one shard, replacing
            (vec![3, 2], vec![0, 0]), // back, onto an emptied key
        ];
        for (from, to) in moves {
            let (fp, fname) = parent_of(&fs, &s.path(&from)).await;
            let (tp, tname) = parent_of(&fs, &s.path(&to)).await;
            fs.rename(fp, &fname, tp, &tname, false).await.unwrap();
            let bytes = s.chunks.remove(&from).unwrap();
            s.chunks.insert(to.clone(), bytes);
            assert_eq!(errno(fs.lookup(fp, &fname).await), libc::ENOENT);
            s.check().await;
        }
        // RENAME_NOREPLACE onto an existing chunk; a missing source; a rename onto itself.
        let before = dump_store(s.mem.as_ref()).await;
        let (p, a) = parent_of(&fs, &s.path(&[1, 0])).await;
        let (q, b) = parent_of(&fs, &s.path(&[1, 2])).await;
        assert_eq!(errno(fs.rename(p, &a, q, &b, true).await), libc::EEXIST);
        let (m, missing) = parent_of(&fs, &s.path(&[1, 1])).await;
        assert_eq!(errno(fs.rename(m, &missing, q, &b, false).await), libc::ENOENT);
        fs.rename(p, &a, p, &a, false).await.unwrap();
        assert_eq!(dump_store(s.mem.as_ref()).await, before);
        s.check().await;
    }
}

#[tokio::test]
async fn renames_out_of_the_chunk_key_space_are_exdev() {
    let h = sample_hierarchy();
    let store = h.memory_store();
    let fs = writable_fs(store.clone());
    let before = dump_store(store.as_ref()).await;
    let cases = [
        ("data/sharded/c/0/0", "notes2.txt"),       // out of the array
        ("data/sharded/c/0/0", "data/plain/c/1/9"), // an unsharded array's chunk key
        ("data/sharded/c/0/0", "data/v2/0/0/0"),    // another sharded array's chunk key
        ("data/sharded/zarr.json", "data/sharded/zarr.json.bak"),
        ("data/sharded/zarr.json", "data/sharded/c/4/0"),
        ("data/sharded/c/0", "data/sharded/c/9"), // a chunk directory
        ("data/sharded", "data/moved"),           // an array
    ];
    for (from, to) in cases {
        let (fp, fname) = parent_of(&fs, from).await;
        let (tp, tname) = parent_of(&fs, to).await;
        assert_eq!(
            errno(fs.rename(fp, &fname, tp, &tname, false).await),
            libc::EXDEV,
            "{from} -> {to}"
        );
        assert_eq!(dump_store(store.as_ref()).await, before, "{from} -> {to}");
        assert!(fs_resolve(&fs, from).await.is_ok(), "{from} still there");
    }
}

#[tokio::test]
async fn chunks_move_to_temporary_names_and_stored_files_onto_chunk_keys() {
    let h = sample_hierarchy();
    let store = h.memory_store();
    let fs = writable_fs(store.clone());
    let a = &h.arrays[0];
    let chunk = a.expected[&vec![0, 0]].clone();
    // A chunk renamed to a temporary name of its array: staged there, gone from the shard.
    let row = fs_resolve(&fs, "data/sharded/c/0").await.unwrap();
    fs.rename(row.ino, "0", row.ino, "0.bak", false).await.unwrap();
    assert_eq!(fs_read_path(&fs, "data/sharded/c/0/0.bak").await.unwrap(), chunk);
    assert_eq!(errno(fs_resolve(&fs, "data/sharded/c/0/0").await), libc::ENOENT);
    let fresh = writable_fs(store.clone());
    assert_eq!(errno(fs_resolve(&fresh, "data/sharded/c/0/0").await), libc::ENOENT);
    // ... and back.
    fs.rename(row.ino, "0.bak", row.ino, "0", false).await.unwrap();
    assert_eq!(errno(fs_resolve(&fs, "data/sharded/c/0/0.bak").await), libc::ENOENT);
    let fresh = writable_fs(store.clone());
    assert_eq!(fs_read_path(&fresh, "data/sharded/c/0/0").await.unwrap(), chunk);
    // A stored file renamed onto a chunk key is committed there and leaves the store.
    let (tp, _) = parent_of(&fs, "data/sharded/c/4/x").await;
    fs.rename(ROOT_INO, "notes.txt", tp, "0", false).await.unwrap();
    let fresh = writable_fs(store.clone());
    assert_eq!(
        fs_read_path(&fresh, "data/sharded/c/4/0").await.unwrap(),
        h.store["notes.txt"]
    );
    assert!(store.head("notes.txt").await.unwrap().is_none());
    let stored: Vec<String> = dump_store(store.as_ref()).await.into_keys().collect();
    assert!(!stored.iter().any(|k| k.ends_with(".bak")), "{stored:?}");
}

#[tokio::test]
async fn renaming_a_chunk_into_another_sharded_array_is_exdev() {
    // Both arrays are sharded; the write path documents moves only onto keys of the same array.
    let h = sample_hierarchy();
    let store = h.memory_store();
    let fs = writable_fs(store.clone());
    let before = dump_store(store.as_ref()).await;
    let (fp, fname) = parent_of(&fs, "data/sharded/c/0/0").await;
    let (tp, tname) = parent_of(&fs, "data/dotted/c.8.0").await;
    let result = fs.rename(fp, &fname, tp, &tname, false).await;
    let changed = dump_store(store.as_ref()).await != before;
    assert_eq!(
        result.as_ref().map_err(|e| e.errno()),
        Err(libc::EXDEV),
        "chunk moved into another array (store changed: {changed})"
    );
    assert!(!changed);
}

// ---------------------------------------------------------------------------------------------
// Directories and metadata.

#[tokio::test]
async fn mkdir_of_a_chunk_directory_stores_nothing() {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let chunks: Chunks = all_coords(&[2, 2])
        .into_iter()
        .map(|c| (c.clone(), chunk_bytes(&c, 5, 1)))
        .collect();
    let mut s = Setup::new(&spec, "a/", chunks);
    let fs = s.fs.clone();
    let before = dump_store(s.mem.as_ref()).await;
    s.counts.reset();
    let c = fs_resolve(&fs, "a/c").await.unwrap();
    // An implicit directory that exists: making it again succeeds (it is the same directory).
    let row = fs_resolve(&fs, "a/c/0").await.unwrap();
    assert_eq!(fs.mkdir(c.ino, "0").await.unwrap().ino, row.ino);
    let dir = fs.mkdir(c.ino, "3").await.unwrap();
    assert_eq!(dir.kind, FileKind::Dir);
    let counts = s.counts.counts();
    assert_eq!((counts.set, counts.erase), (0, 0));
    assert_eq!(dump_store(s.mem.as_ref()).await, before);
    // A file created in it is a chunk like any other.
    let (_, fh) = fs.create(dir.ino, "2", true).await.unwrap();
    fs.write(fh, 0, b"in a new row").await.unwrap();
    fs.release(fh).await;
    s.chunks.insert(vec![3, 2], b"in a new row".to_vec());
    s.check().await;
    // Chunk directories with chunks are not empty; empty ones have nothing to remove.
    assert_eq!(errno(fs.rmdir(c.ino, "3").await), libc::ENOTEMPTY);
    // A new directory outside the chunk tree, in a plain directory, passes through.
    let root = fs.mkdir(ROOT_INO, "newdir").await.unwrap();
    assert_eq!(root.kind, FileKind::Dir);
}

#[tokio::test]
async fn a_new_chunk_directory_stays_visible_until_used() {
    // `mkdir c/3; stat c/3; rmdir c/3` on a plain file system.
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let chunks: Chunks = all_coords(&[2, 2])
        .into_iter()
        .map(|c| (c.clone(), chunk_bytes(&c, 5, 1)))
        .collect();
    let s = Setup::new(&spec, "", chunks);
    let fs = s.fs.clone();
    let c = fs_resolve(&fs, "c").await.unwrap();
    let dir = fs.mkdir(c.ino, "3").await.unwrap();
    let found = fs.lookup(c.ino, "3").await.map(|a| a.ino).map_err(|e| e.errno());
    let stat = fs.getattr(dir.ino).await.map(|a| a.kind).map_err(|e| e.errno());
    let listed: Vec<String> = fs_list(&fs, c.ino)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.into())
        .collect();
    let removed = fs.rmdir(c.ino, "3").await.map_err(|e| e.errno());
    assert_eq!(
        (found, stat, listed.contains(&"3".to_string()), removed),
        (Ok(dir.ino), Ok(FileKind::Dir), true, Ok(())),
        "lookup, getattr, readdir and rmdir of a directory just made"
    );
    assert_eq!(errno(fs.lookup(c.ino, "3").await), libc::ENOENT, "removed");
    let counts = s.counts.counts();
    assert_eq!((counts.set, counts.erase), (0, 0));
}

#[tokio::test]
async fn every_directory_readdir_lists_can_be_looked_up() {
    // `c/3` made by mkdir while `c` existed in the store (through chunk (0, 0)); then the only
    // stored chunk is removed, so the store has no chunk tree left. readdir of the array still
    // lists `c` (an ancestor of the made directory), and lookup of `c` must then find it.
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let mut chunks = Chunks::new();
    chunks.insert(vec![0, 0], b"only chunk".to_vec());
    let s = Setup::new(&spec, "", chunks);
    let fs = s.fs.clone();
    let c = fs_resolve(&fs, "c").await.unwrap();
    fs.mkdir(c.ino, "3").await.unwrap();
    let row = fs_resolve(&fs, "c/0").await.unwrap();
    fs.unlink(row.ino, "0").await.unwrap();
    let listed: Vec<String> = fs_list(&fs, ROOT_INO)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.into())
        .collect();
    for name in &listed {
        let found = fs.lookup(ROOT_INO, name).await.map(|a| a.kind).map_err(|e| e.errno());
        assert!(found.is_ok(), "{name} listed in {listed:?} but lookup gives {found:?}");
    }
}

async fn write_view_json(fs: &Fs, path: &str, bytes: &[u8]) -> Result<(), FsError> {
    let (_, fh) = fs_open_write(fs, path, true).await?;
    fs.write(fh, 0, bytes).await?;
    let result = fs.flush(fh).await;
    fs.release(fh).await;
    result
}

#[tokio::test]
async fn view_metadata_writes_are_translated_back() {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(IndexLocation::Start, BE_CRC);
    let mut s = Setup::new(&spec, "a/", spec.full_chunks(9, 2, 6));
    let fs = s.fs.clone();
    let key = s.built.zarr_json_key();
    let view_bytes = fs_read_path(&fs, &key).await.unwrap();
    let view: Value = serde_json::from_slice(&view_bytes).unwrap();
    assert_eq!(view, spec.rewritten_json());

    // The same document (also re-serialised differently): nothing is stored.
    s.counts.reset();
    write_view_json(&fs, &key, &view_bytes).await.unwrap();
    write_view_json(&fs, &key, &serde_json::to_vec(&view).unwrap())
        .await
        .unwrap();
    let counts = s.counts.counts();
    assert_eq!((counts.set, counts.erase), (0, 0));
    assert_eq!(dump_store(s.mem.as_ref()).await[&key], s.built.files[&key]);

    // Another chunk grid or codec chain cannot be expressed: EINVAL, nothing stored.
    let before = dump_store(s.mem.as_ref()).await;
    let mut other = view.clone();
    other["chunk_grid"]["configuration"]["chunk_shape"] = json!([4, 2]);
    assert_eq!(
        errno(write_view_json(&fs, &key, &serde_json::to_vec(&other).unwrap()).await),
        libc::EINVAL
    );
    let mut other = view.clone();
    other["codecs"].as_array_mut().unwrap().push(json!({"name": "crc32c"}));
    assert_eq!(
        errno(write_view_json(&fs, &key, &serde_json::to_vec(&other).unwrap()).await),
        libc::EINVAL
    );
    assert_eq!(errno(write_view_json(&fs, &key, b"{not json").await), libc::EINVAL);
    assert_eq!(dump_store(s.mem.as_ref()).await, before);
    assert_eq!(fs_read_path(&fs, &key).await.unwrap(), view_bytes);

    // A new shape and attributes: stored with the sharding configuration put back.
    let mut grown = view.clone();
    grown["shape"] = json!([12, 8]);
    grown["attributes"] = json!({"resized": true});
    write_view_json(&fs, &key, &serde_json::to_vec_pretty(&grown).unwrap())
        .await
        .unwrap();
    let stored: Value = serde_json::from_slice(&dump_store(s.mem.as_ref()).await[&key]).unwrap();
    let mut want = spec.zarr_json();
    want["shape"] = json!([12, 8]);
    want["attributes"] = json!({"resized": true});
    assert_eq!(stored, want);
    // The view shows the new shape at once, and a fresh mount too.
    for fs in [fs.clone(), Arc::new(writable_fs(s.mem.clone()))] {
        let shown: Value = serde_json::from_slice(&fs_read_path(&fs, &key).await.unwrap()).unwrap();
        assert_eq!(shown, grown);
    }
    // Chunks of the new rows can be written (into new shards).
    fs_write_file(&fs, "a/c/5/3", b"row five").await.unwrap();
    let mut grown_spec = spec.clone();
    grown_spec.shape = vec![12, 8];
    s.built = grown_spec.build("a/", &s.chunks);
    s.built.files.insert(key.clone(), serde_json::to_vec(&stored).unwrap());
    s.chunks.insert(vec![5, 3], b"row five".to_vec());
    s.check().await;
}

#[tokio::test]
async fn passthrough_files_are_written_as_they_are() {
    let h = sample_hierarchy();
    let store = h.memory_store();
    let fs = writable_fs(store.clone());
    fs_write_file(&fs, "notes.txt", b"rewritten notes").await.unwrap();
    fs_write_file(&fs, "data/new.bin", b"\x00\x01new").await.unwrap();
    fs_write_file(&fs, "data/plain/c/1/1", b"unsharded chunk")
        .await
        .unwrap();
    let stored = dump_store(store.as_ref()).await;
    assert_eq!(stored["notes.txt"], b"rewritten notes");
    assert_eq!(stored["data/new.bin"], b"\x00\x01new");
    assert_eq!(stored["data/plain/c/1/1"], b"unsharded chunk");
    let fresh = writable_fs(store.clone());
    assert_eq!(fs_read_path(&fresh, "data/new.bin").await.unwrap(), b"\x00\x01new");
    let data = fs_resolve(&fs, "data").await.unwrap();
    fs.unlink(data.ino, "new.bin").await.unwrap();
    assert!(store.head("data/new.bin").await.unwrap().is_none());
}

#[tokio::test]
async fn editing_a_stored_file_inside_a_sharded_array_is_not_silently_dropped() {
    // `data/sharded/README` is a stored file next to the shards: a write to it must reach the
    // store (or be refused), not stay in memory as if it were a temporary file.
    let h = sample_hierarchy();
    let store = h.memory_store();
    let fs = writable_fs(store.clone());
    let written = fs_write_file(&fs, "data/sharded/README", b"edited README\n").await;
    if written.is_ok() {
        let fresh = writable_fs(store.clone());
        assert_eq!(
            String::from_utf8(fs_read_path(&fresh, "data/sharded/README").await.unwrap()).unwrap(),
            "edited README\n",
            "the write was accepted but is not in the store"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Files open while renamed or removed (plain file semantics).

#[tokio::test]
async fn exclusive_create_of_a_file_being_written_is_eexist() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let s = Setup::new(&spec, "", spec.full_chunks(10, 3, 6));
    let fs = s.fs.clone();
    let (parent, _) = parent_of(&fs, "c/3/x").await;
    fs.unlink(parent, "1").await.unwrap();
    let (_, fh) = fs.create(parent, "1", false).await.unwrap();
    fs.write(fh, 0, b"first writer").await.unwrap();
    let second = fs.create(parent, "1", false).await.map(|(_, fh)| fh);
    let content = fs.read(fh, 0, 100).await.unwrap().to_vec();
    assert_eq!(
        (second.map_err(|e| e.errno()), content),
        (Err(libc::EEXIST), b"first writer".to_vec()),
        "O_CREAT|O_EXCL of a file open for writing"
    );
}

#[tokio::test]
async fn closing_a_removed_file_does_not_bring_it_back() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let mut s = Setup::new(&spec, "", spec.full_chunks(11, 3, 6));
    let fs = s.fs.clone();
    let attr = fs_resolve(&fs, "c/2/1").await.unwrap();
    let fh = fs.open(attr.ino, true, false).await.unwrap();
    fs.write(fh, 0, b"late").await.unwrap();
    let (parent, _) = parent_of(&fs, "c/2/x").await;
    fs.unlink(parent, "1").await.unwrap();
    fs.release(fh).await;
    s.chunks.remove(&vec![2, 1]);
    s.check().await;
}

#[tokio::test]
async fn a_chunk_renamed_while_open_keeps_its_writes() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let mut s = Setup::new(&spec, "", spec.full_chunks(12, 3, 6));
    let fs = s.fs.clone();
    let attr = fs_resolve(&fs, "c/0/0").await.unwrap();
    let fh = fs.open(attr.ino, true, true).await.unwrap();
    fs.write(fh, 0, b"written before the rename").await.unwrap();
    let (parent, _) = parent_of(&fs, "c/0/x").await;
    fs.rename(parent, "0", parent, "1", false).await.unwrap();
    fs.release(fh).await;
    s.chunks.remove(&vec![0, 0]);
    s.chunks.insert(vec![0, 1], b"written before the rename".to_vec());
    s.check().await;
}

// ---------------------------------------------------------------------------------------------
// Group commit and concurrency.

/// One shard of 16 inner chunks, initially holding none.
fn one_shard_spec() -> ArraySpec {
    ArraySpec::new(&[8, 8], &[8, 8], &[2, 2]).index(IndexLocation::End, LE_CRC)
}

#[tokio::test]
async fn closes_of_one_shard_together_cost_one_rewrite() {
    let spec = one_shard_spec();
    let mut s = Setup::new(&spec, "", Chunks::new());
    let fs = s.fs.clone();
    let coords = all_coords(&[4, 4]);
    let mut handles = Vec::new();
    for c in &coords {
        let (parent, name) = parent_of(&fs, &s.path(c)).await;
        let (_, fh) = fs.create(parent, &name, true).await.unwrap();
        let data = chunk_bytes(c, 9, 5);
        fs.write(fh, 0, &data).await.unwrap();
        s.chunks.insert(c.clone(), data);
        handles.push(fh);
    }
    s.counts.reset();
    let results = futures::future::join_all(handles.iter().map(|fh| fs.flush(*fh))).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let sets = s.counts.counts().set;
    assert!(
        sets >= 1 && sets < coords.len() as u64,
        "{sets} shard writes for {} files",
        coords.len()
    );
    for fh in handles {
        fs.release(fh).await;
    }
    assert_eq!(s.counts.counts().set, sets, "release after flush writes nothing");
    s.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_of_one_shard_are_group_committed() {
    let spec = one_shard_spec();
    let mut s = Setup::new(&spec, "", spec.random_chunks(13, 30, 8));
    let coords = all_coords(&[4, 4]);
    for c in &coords {
        // Make every parent directory first, so the tasks only write.
        fs_mkdir_p(&s.fs, split(&s.path(c)).0).await.unwrap();
    }
    s.counts.reset();
    let mut tasks = Vec::new();
    for c in &coords {
        let (fs, path) = (s.fs.clone(), s.path(c));
        let data = chunk_bytes(c, 3 + c[1] as usize, 21);
        s.chunks.insert(c.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            let (dir, name) = split(&path);
            let parent = fs_resolve(&fs, dir).await.unwrap().ino;
            let (_, fh) = fs.create(parent, name, true).await.unwrap();
            fs.write(fh, 0, &data).await.unwrap();
            let flushed = fs.flush(fh).await;
            fs.release(fh).await;
            flushed
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let sets = s.counts.counts().set;
    assert!(sets >= 1 && sets <= coords.len() as u64, "{sets} shard writes");
    s.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_mounts_writing_one_store_lose_no_update() {
    // Two shards of 32 inner chunks each; mount A writes the even chunks, mount B the odd ones.
    let spec = ArraySpec::new(&[8, 8], &[4, 8], &[1, 1]).index(IndexLocation::Start, LE_CRC);
    let mut s = Setup::new(&spec, "", spec.random_chunks(14, 50, 6));
    let other = Arc::new(writable_fs(s.mem.clone()));
    let coords = all_coords(&[8, 8]);
    for round in 0..4u64 {
        let mut tasks = Vec::new();
        for (i, c) in coords.iter().enumerate() {
            let fs = if i % 2 == 0 { s.fs.clone() } else { other.clone() };
            let path = s.path(c);
            // In the last round mount B removes its chunks while mount A rewrites its own.
            let data = (round < 3 || i % 2 == 0).then(|| chunk_bytes(c, (round as usize + i) % 7, round));
            match &data {
                Some(d) => s.chunks.insert(c.clone(), d.clone()),
                None => s.chunks.remove(c),
            };
            tasks.push(tokio::spawn(async move {
                match data {
                    Some(d) => fs_write_file(&fs, &path, &d).await,
                    None => {
                        let (dir, name) = split(&path);
                        let parent = fs_resolve(&fs, dir).await?.ino;
                        fs.unlink(parent, name).await
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        s.check_fresh().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Write buffers spilled to disk, and opt-in write-back.

#[tokio::test]
async fn spilled_write_buffers_commit_the_same_bytes() {
    let spec = one_shard_spec();
    let mut s = Setup::new(&spec, "", spec.random_chunks(15, 50, 8));
    // A budget of 64 KiB: a 1 MiB chunk spills to a temporary file, small ones may not.
    let fs = configured_fs(s.mem.clone(), |c| c.write_buffer_bytes = 64 << 10);
    let big = chunk_bytes(&[0, 0], 1 << 20, 16);
    let (parent, name) = parent_of(&fs, "c/0/0").await;
    let (attr, fh) = fs.create(parent, &name, true).await.unwrap();
    // Written back to front in 4 KiB pieces, then a tail past a hole, then truncated.
    for start in (0..big.len()).step_by(4096).rev() {
        let end = (start + 4096).min(big.len());
        fs.write(fh, start as u64, &big[start..end]).await.unwrap();
    }
    fs.write(fh, big.len() as u64 + 100, b"tail").await.unwrap();
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, big.len() as u64 + 104);
    assert_eq!(fs.read(fh, 1000, 8).await.unwrap().to_vec(), big[1000..1008]);
    fs.truncate(attr.ino, big.len() as u64 - 1, Some(fh)).await.unwrap();
    fs.release(fh).await;
    s.chunks.insert(vec![0, 0], big[..big.len() - 1].to_vec());
    // An existing chunk opened and grown through the spilling mount.
    let (parent, name) = parent_of(&fs, "c/3/3").await;
    let (_, fh) = fs.create(parent, &name, true).await.unwrap();
    fs.write(fh, 70_000, b"end").await.unwrap();
    fs.release(fh).await;
    let mut want = vec![0; 70_000];
    want.extend_from_slice(b"end");
    s.chunks.insert(vec![3, 3], want);
    s.check().await;
}

fn write_back_fs(store: Arc<dyn Store>, delay: Duration) -> Fs {
    configured_fs(store, |c| c.write_back_delay = Some(delay))
}

#[tokio::test]
async fn write_back_defers_commits_and_packs_each_shard_once() {
    // Two shards of 16 inner chunks each.
    let spec = ArraySpec::new(&[8, 16], &[8, 8], &[2, 2]).index(IndexLocation::Start, BE_CRC);
    let mut s = Setup::new(&spec, "", spec.random_chunks(17, 40, 8));
    let fs = write_back_fs(s.counts.clone(), Duration::from_secs(3600));
    s.counts.reset();
    let coords = [vec![0, 0], vec![1, 1], vec![3, 2], vec![0, 5], vec![2, 7]];
    let mut last = 0;
    for c in &coords {
        let data = chunk_bytes(c, 11, 18);
        fs_write_file(&fs, &s.path(c), &data).await.unwrap();
        s.chunks.insert(c.clone(), data.clone());
        // Closed, not stored, but visible.
        assert_eq!(fs_read_path(&fs, &s.path(c)).await.unwrap(), data);
        let attr = fs_resolve(&fs, &s.path(c)).await.unwrap();
        last = attr.ino;
    }
    assert_eq!(s.counts.counts().set, 0, "nothing stored before it is due");
    // Not due yet: the flusher's tick commits nothing.
    fs.write_back(false).await.unwrap();
    assert_eq!(s.counts.counts().set, 0);
    // fsync of any file commits everything, one rewrite per shard.
    let fh = fs.open(last, true, false).await.unwrap();
    fs.fsync(fh).await.unwrap();
    fs.release(fh).await;
    assert_eq!(s.counts.counts().set, 2, "one rewrite per shard");
    s.check_fresh().await;
}

#[tokio::test]
async fn write_back_commits_a_complete_shard_at_once() {
    let spec = one_shard_spec();
    let mut s = Setup::new(&spec, "", Chunks::new());
    let fs = write_back_fs(s.counts.clone(), Duration::from_secs(3600));
    let coords = all_coords(&[4, 4]);
    for c in &coords[..15] {
        let data = chunk_bytes(c, 5, 19);
        fs_write_file(&fs, &s.path(c), &data).await.unwrap();
        s.chunks.insert(c.clone(), data);
    }
    s.counts.reset();
    fs.write_back(false).await.unwrap();
    assert_eq!(s.counts.counts().set, 0, "15 of 16 chunks: not due");
    let c = &coords[15];
    let data = chunk_bytes(c, 5, 19);
    fs_write_file(&fs, &s.path(c), &data).await.unwrap();
    s.chunks.insert(c.clone(), data);
    fs.write_back(false).await.unwrap();
    assert_eq!(s.counts.counts().set, 1, "the complete shard in one rewrite");
    s.check().await;
}

#[tokio::test]
async fn write_back_listing_shows_the_size_of_pending_files() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let s = Setup::new(&spec, "", spec.full_chunks(20, 8, 8));
    let fs = write_back_fs(s.mem.clone(), Duration::from_secs(3600));
    // Rewritten shorter and closed: pending, the stored version still has 8 bytes.
    fs_write_file(&fs, "c/1/1", b"abc").await.unwrap();
    let row = fs_resolve(&fs, "c/1").await.unwrap();
    assert_eq!(fs.lookup(row.ino, "1").await.unwrap().size, 3);
    let listed = fs_list(&fs, row.ino).await.unwrap();
    let item = listed.iter().find(|i| i.name == "1").unwrap();
    assert_eq!(
        item.node.as_ref().map(|n| n.size),
        Some(3),
        "size readdir(plus) reports"
    );
}

#[tokio::test]
async fn write_back_rename_of_a_pending_rewrite_moves_the_new_bytes() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let s = Setup::new(&spec, "", spec.full_chunks(21, 8, 8));
    let fs = write_back_fs(s.mem.clone(), Duration::from_secs(3600));
    // An existing chunk rewritten and closed (pending), then renamed, then written back.
    fs_write_file(&fs, "c/0/0", b"rewritten").await.unwrap();
    let (parent, _) = parent_of(&fs, "c/0/x").await;
    fs.rename(parent, "0", parent, "1", false).await.unwrap();
    fs.write_back(true).await.unwrap();
    let fresh = writable_fs(s.mem.clone());
    let moved = fs_read_path(&fresh, "c/0/1").await.map_err(|e| e.errno());
    let old = fs_read_path(&fresh, "c/0/0").await.map_err(|e| e.errno());
    assert_eq!(
        (moved, old),
        (Ok(b"rewritten".to_vec()), Err(libc::ENOENT)),
        "(c/0/1, c/0/0) after `echo rewritten > c/0/0; mv c/0/0 c/0/1`"
    );
}

#[tokio::test]
async fn write_back_rename_of_a_pending_new_chunk() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let mut s = Setup::new(&spec, "", spec.full_chunks(22, 8, 8));
    let fs = write_back_fs(s.mem.clone(), Duration::from_secs(3600));
    let (parent, _) = parent_of(&fs, "c/0/x").await;
    fs.unlink(parent, "2").await.unwrap();
    // A new chunk, closed and pending (not in the store yet), renamed onto an existing key.
    fs_write_file(&fs, "c/0/2", b"new").await.unwrap();
    let renamed = fs.rename(parent, "2", parent, "0", false).await.map_err(|e| e.errno());
    assert_eq!(renamed, Ok(()), "mv c/0/2 c/0/0 of a closed, pending chunk file");
    fs.write_back(true).await.unwrap();
    s.chunks.remove(&vec![0, 2]);
    s.chunks.insert(vec![0, 0], b"new".to_vec());
    s.check_fresh().await;
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_read_only_mount_refuses_every_mutation() {
    let h = sample_hierarchy();
    let mem = h.memory_store();
    let counts = Arc::new(CountingStore::new(mem.clone()));
    let fs = read_only_fs(counts.clone());
    let before = dump_store(mem.as_ref()).await;
    let chunk = fs_resolve(&fs, "data/sharded/c/0/0").await.unwrap();
    let row = fs_resolve(&fs, "data/sharded/c/0").await.unwrap();
    let meta = fs_resolve(&fs, "data/sharded/zarr.json").await.unwrap();
    let notes = fs_resolve(&fs, "notes.txt").await.unwrap();
    let reader = fs.open(chunk.ino, false, false).await.unwrap();
    let erofs = libc::EROFS;
    assert_eq!(errno(fs.create(row.ino, "1", false).await), erofs);
    assert_eq!(errno(fs.create(row.ino, "0", true).await), erofs);
    assert_eq!(errno(fs.create(row.ino, "0.tmp.partial", true).await), erofs);
    assert_eq!(errno(fs.create(ROOT_INO, "new.txt", true).await), erofs);
    for ino in [chunk.ino, meta.ino, notes.ino] {
        assert_eq!(errno(fs.open(ino, true, false).await), erofs);
        assert_eq!(errno(fs.open(ino, true, true).await), erofs);
        assert_eq!(errno(fs.truncate(ino, 0, None).await), erofs);
        assert_eq!(errno(fs.truncate(ino, 5, Some(reader)).await), erofs);
    }
    assert_ne!(fs.write(reader, 0, b"x").await.map_err(|e| e.errno()), Ok(1));
    assert_eq!(errno(fs.unlink(row.ino, "0").await), erofs);
    assert_eq!(errno(fs.unlink(ROOT_INO, "notes.txt").await), erofs);
    assert_eq!(errno(fs.rename(row.ino, "0", row.ino, "1", false).await), erofs);
    assert_eq!(
        errno(fs.rename(ROOT_INO, "notes.txt", ROOT_INO, "n", false).await),
        erofs
    );
    assert_eq!(errno(fs.mkdir(row.ino, "x").await), erofs);
    let c = fs_resolve(&fs, "data/sharded/c").await.unwrap();
    assert_eq!(errno(fs.mkdir(c.ino, "9").await), erofs);
    assert_eq!(errno(fs.mkdir(ROOT_INO, "newdir").await), erofs);
    assert_eq!(errno(fs.rmdir(c.ino, "0").await), erofs);
    fs.release(reader).await;
    let n = counts.counts();
    assert_eq!((n.set, n.erase), (0, 0));
    assert_eq!(dump_store(mem.as_ref()).await, before);
    assert_eq!(
        fs_read_path(&fs, "data/sharded/c/0/0").await.unwrap(),
        h.arrays[0].expected[&vec![0, 0]]
    );
}

/// zarr-python's write: the temporary file is closed (FLUSH commits it), then renamed onto its
/// key before the kernel's asynchronous RELEASE arrives. The content must be at the new name
/// at once, even if that release never comes (the daemon unmounted first).
#[tokio::test]
async fn a_rename_before_release_commits_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    store
        .set(
            "zarr.json",
            bytes::Bytes::from_static(br#"{"zarr_format":3,"node_type":"group"}"#),
        )
        .await
        .unwrap();
    let fs = writable_fs(store.clone());
    let (_, fh) = fs.create(1, "data.partial", false).await.unwrap();
    fs.write(fh, 0, b"payload").await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.rename(1, "data.partial", 1, "data", false).await.unwrap();
    // No release: as if the kernel never sent it.
    let stored = store.get("data", zarrfs::store::GetOptions::default()).await.unwrap();
    assert_eq!(stored.map(|g| g.bytes.to_vec()), Some(b"payload".to_vec()));
    assert!(store
        .get("data.partial", zarrfs::store::GetOptions::default())
        .await
        .unwrap()
        .is_none());
    let fresh = writable_fs(store.clone());
    let attr = fresh.lookup(1, "data").await.unwrap();
    let fh = fresh.open(attr.ino, false, false).await.unwrap();
    assert_eq!(&fresh.read(fh, 0, 100).await.unwrap()[..], b"payload");
}

/// zarr-python 3 writes every file under `<name>.<32 hex>.partial` and renames it onto its key.
/// Outside sharded arrays such a new file is held by the mount: nothing is stored at its close,
/// it is stored once at the rename, and one removed before its rename costs nothing. A file
/// already stored that is renamed onto such a name moves there, as onto any name.
#[tokio::test]
async fn zarr_pythons_temporary_names_are_held_until_renamed_and_stored_files_move_onto_them() {
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    mem.set(
        "zarr.json",
        bytes::Bytes::from_static(br#"{"zarr_format":3,"node_type":"group"}"#),
    )
    .await
    .unwrap();
    mem.set("old", bytes::Bytes::from_static(b"stored")).await.unwrap();
    let counts = Arc::new(CountingStore::new(mem.clone()));
    let fs = writable_fs(counts.clone());
    let temp = "data.0123456789abcdef0123456789abcdef.partial";
    let get = |key: &'static str| {
        let mem = mem.clone();
        async move {
            mem.get(key, GetOptions::default())
                .await
                .unwrap()
                .map(|g| g.bytes.to_vec())
        }
    };

    let (_, fh) = fs.create(1, temp, false).await.unwrap();
    fs.write(fh, 0, b"payload").await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await;
    assert_eq!(counts.counts().set, 0, "a temporary file was stored at its close");
    assert_eq!(get(temp).await, None);
    assert_eq!(fs.lookup(1, temp).await.unwrap().size, 7, "a held file shows");
    fs.rename(1, temp, 1, "data", false).await.unwrap();
    assert_eq!((counts.counts().set, counts.counts().erase), (1, 0));
    assert_eq!(get("data").await, Some(b"payload".to_vec()));

    let (_, fh) = fs.create(1, temp, false).await.unwrap();
    fs.write(fh, 0, b"dropped").await.unwrap();
    fs.release(fh).await;
    fs.unlink(1, temp).await.unwrap();
    assert_eq!(
        (counts.counts().set, counts.counts().erase),
        (1, 0),
        "a removed temporary file cost a request"
    );
    assert_eq!(errno(fs.lookup(1, temp).await), libc::ENOENT);

    fs.rename(1, "old", 1, temp, false).await.unwrap();
    assert_eq!(
        get(temp).await,
        Some(b"stored".to_vec()),
        "a stored file renamed onto a temporary name"
    );
    assert_eq!(get("old").await, None);
}

/// An open directory lists what is there when it is read, not when it was opened, once the
/// mount changed something: a readdirplus entry hands the kernel a name with its size, which
/// it then trusts. Paging goes on after the last name returned: none twice, none skipped.
#[tokio::test]
async fn an_open_directory_lists_changes_made_since_it_was_opened() {
    let spec = small_spec(IndexLocation::End, LE_CRC, false);
    let s = Setup::new(&spec, "", spec.full_chunks(13, 3, 6));
    let fs = s.fs.clone();
    let (row, _) = parent_of(&fs, "c/0/x").await;
    let names = |items: &[zarrfs::fs::DirItem]| items.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
    let fh = fs.opendir(row).await.unwrap();
    let before = fs.readdir(row, fh, 0).await.unwrap();
    assert_eq!(names(&before), [".", "..", "0", "1", "2"]);
    // Removed after opendir: not handed out.
    fs.unlink(row, "1").await.unwrap();
    let all = fs.readdir(row, fh, 0).await.unwrap();
    assert_eq!(names(&all), [".", "..", "0", "2"]);
    // Paging: "0" returned; then "0" goes and "1" is made (being written): "1" comes after
    // the last name returned, so it is listed, and "2" is not skipped.
    let after_0 = all[2].offset;
    fs.unlink(row, "0").await.unwrap();
    let (_, wfh) = fs.create(row, "1", false).await.unwrap();
    fs.write(wfh, 0, b"new").await.unwrap();
    let rest = fs.readdir(row, fh, after_0).await.unwrap();
    assert_eq!(names(&rest), ["1", "2"], "after the last name returned");
    // A file's size is the one it has now (it was 0 when created).
    let fh2 = fs.opendir(row).await.unwrap();
    fs.write(wfh, 3, b" content").await.unwrap();
    let listed = fs.readdir(row, fh2, 0).await.unwrap();
    let one = listed
        .iter()
        .find(|i| i.name == "1")
        .and_then(|i| i.node.clone())
        .unwrap();
    assert_eq!(fs.attr(0, &one).size, 11);
    fs.release(wfh).await;
}

/// What a `zarr.json` written through the mount says its node is, is known from the bytes
/// stored: placing the files written next (an array's chunks, a new array's shards) does not
/// read the document back, and places them as a read of it would.
#[tokio::test]
async fn a_node_document_written_through_the_mount_is_not_read_back() {
    let mem = Arc::new(MemoryStore::new());
    mem.insert("zarr.json", group_json("root"));
    let counts = Arc::new(CountingStore::new(mem.clone()));
    let fs = writable_fs(counts.clone());
    // An unsharded array: its chunk files are stored as they are.
    fs_mkdir_p(&fs, "plain").await.unwrap();
    fs_write_file(
        &fs,
        "plain/zarr.json",
        &serde_json::to_vec(&plain_array_json()).unwrap(),
    )
    .await
    .unwrap();
    // A sharded array created through the mount: its client writes whole shards as files.
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    fs_mkdir_p(&fs, "sharded").await.unwrap();
    fs_write_file(
        &fs,
        "sharded/zarr.json",
        &serde_json::to_vec(&spec.zarr_json()).unwrap(),
    )
    .await
    .unwrap();
    counts.reset();
    fs_write_file(&fs, "plain/c/0/0", b"chunk").await.unwrap();
    fs_write_file(&fs, "sharded/c/0/0", b"a whole shard").await.unwrap();
    let c = counts.counts();
    assert_eq!(c.get, 0, "the documents were not read back: {c:?}");
    assert_eq!(
        mem.get("plain/c/0/0", GetOptions::default())
            .await
            .unwrap()
            .unwrap()
            .bytes,
        &b"chunk"[..]
    );
    assert_eq!(
        mem.get("sharded/c/0/0", GetOptions::default())
            .await
            .unwrap()
            .unwrap()
            .bytes,
        &b"a whole shard"[..]
    );
}
