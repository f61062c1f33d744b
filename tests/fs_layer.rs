//! The filesystem layer (`fs/` over `view/`) driven directly, no mount: lookup, getattr, open,
//! read, opendir, readdir and getxattr over a `MemoryStore` hierarchy, compared with the
//! unsharded model; errnos of the failure cases; the raw view.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use serde_json::Value;
use zarrfs::fs::inodes::ROOT_INO;
use zarrfs::fs::{Attr, DirItem, FileKind, Fs, FsConfig, FsError, XATTR_SOURCE};
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{ByteRange, GetOptions, Store};
use zarrfs::view::{View, ViewMode, ViewOptions};

const UID: u32 = 4321;
const GID: u32 = 8765;

fn fs_with(store: Arc<dyn Store>, mode: ViewMode, ttl: Duration) -> Fs {
    let options = ViewOptions {
        mode,
        metadata_ttl: ttl,
        ..ViewOptions::default()
    };
    let mut config = FsConfig::read_only(UID, GID, Duration::from_secs(1));
    config.xattrs = true;
    Fs::new(View::new(store, &options), config)
}

fn fs_over(store: Arc<dyn Store>) -> Fs {
    fs_with(store, ViewMode::Unsharded, Duration::from_secs(1))
}

/// Resolve a path from the root by successive lookups.
async fn resolve(fs: &Fs, path: &str) -> Result<Attr, FsError> {
    let mut attr = fs.getattr(ROOT_INO).await?;
    for name in path.split('/').filter(|n| !n.is_empty()) {
        attr = fs.lookup(attr.ino, name).await?;
    }
    Ok(attr)
}

async fn errno_of(fs: &Fs, path: &str) -> i32 {
    match resolve(fs, path).await {
        Err(e) => e.errno(),
        Ok(a) => panic!("{path} exists: {a:?}"),
    }
}

/// Read a whole file through a handle, in pieces of `piece` bytes.
async fn read_all(fs: &Fs, ino: u64, piece: u32) -> Result<Vec<u8>, FsError> {
    let fh = fs.open(ino, false, false).await?;
    let mut out = Vec::new();
    loop {
        let b = fs.read(fh, out.len() as u64, piece).await?;
        if b.is_empty() {
            break;
        }
        assert!(b.len() <= piece as usize);
        out.extend_from_slice(&b);
    }
    fs.release(fh).await;
    Ok(out)
}

async fn read_path(fs: &Fs, path: &str) -> Vec<u8> {
    let attr = resolve(fs, path).await.unwrap();
    let bytes = read_all(fs, attr.ino, 4096).await.unwrap();
    assert_eq!(bytes.len() as u64, attr.size, "size of {path}");
    bytes
}

/// The listing of a directory (without `.` and `..`).
async fn list(fs: &Fs, ino: u64) -> Result<Vec<DirItem>, FsError> {
    let fh = fs.opendir(ino).await?;
    let items = fs.readdir(ino, fh, 0).await?;
    fs.releasedir(fh);
    assert_eq!(items[0].name, ".");
    assert_eq!(items[1].name, "..");
    Ok(items.into_iter().skip(2).collect())
}

async fn names(fs: &Fs, path: &str) -> Vec<String> {
    let attr = resolve(fs, path).await.unwrap();
    list(fs, attr.ino)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.into())
        .collect()
}

/// Everything the Fs shows: file path -> bytes, and directories.
struct Tree {
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
}

/// Walk the whole tree with readdir + lookup + open/read, checking on the way that listed
/// kinds and sizes agree with lookup and with the bytes read.
async fn walk(fs: &Fs) -> Tree {
    let mut tree = Tree {
        files: BTreeMap::new(),
        dirs: BTreeSet::new(),
    };
    let mut stack = vec![(String::new(), ROOT_INO)];
    while let Some((dir, ino)) = stack.pop() {
        let items = list(fs, ino).await.unwrap();
        let mut seen = BTreeSet::new();
        for item in items {
            assert!(seen.insert(item.name.clone()), "{} listed twice", item.path());
            let path = if dir.is_empty() {
                item.name.to_string()
            } else {
                format!("{dir}/{}", item.name)
            };
            assert_eq!(item.path(), path);
            let attr = fs.lookup(ino, &item.name).await.unwrap_or_else(|e| {
                panic!("{path} listed but lookup fails: {e}");
            });
            assert_eq!(attr.kind, item.kind, "kind of {path}");
            assert_eq!((attr.uid, attr.gid), (UID, GID));
            if let Some(node) = &item.node {
                assert_eq!(node.size, attr.size, "listed size of {path}");
            }
            assert_eq!(fs.getattr(attr.ino).await.unwrap().size, attr.size);
            match attr.kind {
                FileKind::File => {
                    assert_eq!(attr.perm, 0o444);
                    let bytes = read_all(fs, attr.ino, 4096).await.unwrap();
                    assert_eq!(bytes.len() as u64, attr.size, "bytes read from {path}");
                    tree.files.insert(path, bytes);
                }
                FileKind::Dir => {
                    assert_eq!(attr.perm, 0o555);
                    tree.dirs.insert(path.clone());
                    stack.push((path, attr.ino));
                }
            }
        }
    }
    tree
}

fn check_file(path: &str, got: &[u8], want: &Expect) {
    match want {
        Expect::Bytes(b) => assert!(got == &b[..], "bytes of {path} differ"),
        Expect::Json(v) => {
            let parsed: Value = serde_json::from_slice(got).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"));
            assert_eq!(&parsed, v, "document {path}");
        }
    }
}

/// Files exactly as the model; every model directory present; extra directories only inside
/// the chunk trees of sharded arrays (prefix directories listed from shard existence).
fn check_tree(tree: &Tree, files: &BTreeMap<String, Expect>, arrays: &[Built]) {
    let got: Vec<&String> = tree.files.keys().collect();
    let want: Vec<&String> = files.keys().collect();
    assert_eq!(got, want, "file names");
    for (path, want) in files {
        check_file(path, &tree.files[path], want);
    }
    let expected_dirs: BTreeSet<String> = files.keys().flat_map(|k| parents(k)).collect();
    for d in &expected_dirs {
        assert!(tree.dirs.contains(d), "directory {d} missing");
    }
    for d in tree.dirs.difference(&expected_dirs) {
        assert!(
            arrays
                .iter()
                .any(|a| d.starts_with(&a.prefix) && a.spec.encoding.separator() == '/'),
            "unexpected directory {d}"
        );
    }
}

fn hierarchy_fs() -> (Hierarchy, Arc<MemoryStore>, Fs) {
    let h = sample_hierarchy();
    let store = h.memory_store();
    let fs = fs_over(store.clone());
    (h, store, fs)
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn whole_tree_matches_the_unsharded_model() {
    let (h, _, fs) = hierarchy_fs();
    let tree = walk(&fs).await;
    check_tree(&tree, &h.files, &h.arrays);
    // Reading in odd-sized pieces gives the same bytes.
    for path in ["data/sharded/c/4/3", "data/dotted/zarr.json", "notes.txt"] {
        let attr = resolve(&fs, path).await.unwrap();
        assert_eq!(read_all(&fs, attr.ino, 3).await.unwrap(), tree.files[path], "{path}");
    }
}

#[tokio::test]
async fn names_kinds_and_sizes() {
    let (h, _, fs) = hierarchy_fs();
    assert_eq!(names(&fs, "").await, ["data", "notes.txt", "zarr.json"]);
    assert_eq!(
        names(&fs, "data").await,
        ["dotted", "plain", "sharded", "v2", "zarr.json"]
    );
    // Shards are hidden, the chunk tree replaces them, stray files stay.
    assert_eq!(names(&fs, "data/sharded").await, ["README", "c", "zarr.json"]);
    assert_eq!(names(&fs, "data/sharded/c").await, ["0", "1", "2", "3", "4"]);
    assert_eq!(names(&fs, "data/sharded/c/0").await, ["0", "2", "3"]);
    assert_eq!(names(&fs, "data/sharded/c/2").await, ["0", "1"]);
    assert_eq!(names(&fs, "data/sharded/c/4").await, ["2", "3"]);
    assert_eq!(names(&fs, "data/plain").await, ["c", "zarr.json"]);
    assert_eq!(names(&fs, "data/plain/c/1").await, ["0", "1"]);
    let dotted = &h.arrays[1];
    let mut want: Vec<String> = dotted.expected_keys().into_keys().collect();
    want.push("zarr.json".into());
    want.sort();
    assert_eq!(names(&fs, "data/dotted").await, want);

    let sharded = &h.arrays[0];
    for (c, bytes) in &sharded.expected {
        let path = format!("data/sharded/c/{}/{}", c[0], c[1]);
        let attr = resolve(&fs, &path).await.unwrap();
        assert_eq!(attr.size, bytes.len() as u64, "{path}");
        assert_eq!(attr.kind, FileKind::File);
        assert_eq!((attr.perm, attr.nlink, attr.uid, attr.gid), (0o444, 1, UID, GID));
    }
    let dir = resolve(&fs, "data/sharded/c/0").await.unwrap();
    assert_eq!((dir.kind, dir.perm), (FileKind::Dir, 0o555));
    // Inode numbers are stable across lookups.
    let again = resolve(&fs, "data/sharded/c/0").await.unwrap();
    assert_eq!(dir.ino, again.ino);
    assert_eq!(
        resolve(&fs, "notes.txt").await.unwrap().size,
        "hello, not zarr\n".len() as u64
    );
}

#[tokio::test]
async fn rewritten_zarr_json_describes_the_inner_chunks() {
    let (h, store, fs) = hierarchy_fs();
    for a in &h.arrays {
        let path = a.zarr_json_key();
        let bytes = read_path(&fs, &path).await;
        let view: Value = serde_json::from_slice(&bytes).unwrap();
        let stored: Value = serde_json::from_slice(&a.files[&path]).unwrap();
        assert_eq!(
            view["chunk_grid"],
            serde_json::json!({"name": "regular", "configuration": {"chunk_shape": a.spec.inner_chunk_shape()}}),
            "{path}"
        );
        assert_eq!(view["codecs"], a.spec.inner_codecs, "{path}");
        let (vo, so) = (view.as_object().unwrap(), stored.as_object().unwrap());
        assert_eq!(
            vo.keys().collect::<Vec<_>>(),
            so.keys().collect::<Vec<_>>(),
            "{path}: same fields in the same order"
        );
        for (k, v) in so {
            if k != "chunk_grid" && k != "codecs" {
                assert_eq!(&vo[k], v, "{path}: field {k}");
            }
        }
        // The store itself is untouched.
        let raw = store.get(&path, GetOptions::default()).await.unwrap().unwrap();
        assert_eq!(raw.bytes.to_vec(), a.files[&path]);
    }
}

#[tokio::test]
async fn pass_through_files_are_identical() {
    let (h, _, fs) = hierarchy_fs();
    for path in [
        "zarr.json",
        "notes.txt",
        "data/zarr.json",
        "data/plain/zarr.json",
        "data/plain/c/1/1",
        "data/sharded/README",
    ] {
        assert_eq!(read_path(&fs, path).await, h.store[path], "{path}");
    }
}

#[tokio::test]
async fn reads_past_the_end_are_empty() {
    let (_, _, fs) = hierarchy_fs();
    for path in ["data/sharded/c/0/0", "notes.txt", "data/sharded/zarr.json"] {
        let attr = resolve(&fs, path).await.unwrap();
        let whole = read_path(&fs, path).await;
        let fh = fs.open(attr.ino, false, false).await.unwrap();
        let size = attr.size;
        assert!(fs.read(fh, size, 100).await.unwrap().is_empty(), "{path} at EOF");
        assert!(fs.read(fh, size + 1, 100).await.unwrap().is_empty(), "{path}");
        assert_eq!(
            fs.read(fh, size - 1, 100).await.unwrap().to_vec(),
            whole[whole.len() - 1..],
            "{path}: short read at the end"
        );
        assert!(fs.read(fh, 1 << 62, 4096).await.unwrap().is_empty(), "{path} 2^62");
        assert!(fs.read(fh, u64::MAX - 1, 4096).await.unwrap().is_empty(), "{path}");
        assert!(fs.read(fh, 0, 0).await.unwrap().is_empty(), "{path} zero length");
        assert_eq!(fs.read(fh, 1, 2).await.unwrap().to_vec(), whole[1..3]);
        fs.release(fh).await;
        assert_eq!(fs.read(fh, 0, 1).await.unwrap_err().errno(), libc::EBADF);
    }
}

#[tokio::test]
async fn chunk_larger_than_the_snapshot_limit_reads_in_ranges() {
    let big = zarrfs::fs::handles::SNAPSHOT_LIMIT as usize + 1000;
    let spec = ArraySpec::new(&[2], &[2], &[1]).index(zarrfs::zarr::sharding::IndexLocation::Start, LE_CRC);
    let mut chunks = Chunks::new();
    chunks.insert(vec![0], chunk_bytes(&[0], big, 1));
    chunks.insert(vec![1], chunk_bytes(&[1], 10, 1));
    let built = spec.build("big/", &chunks);
    let fs = fs_over(memory_store(&built.files));
    let attr = resolve(&fs, "big/c/0").await.unwrap();
    assert_eq!(attr.size, big as u64);
    let fh = fs.open(attr.ino, false, false).await.unwrap();
    let want = &chunks[&vec![0]];
    let at = big as u64 - 7;
    assert_eq!(fs.read(fh, at, 100).await.unwrap().to_vec(), want[big - 7..]);
    assert_eq!(fs.read(fh, 5, 10).await.unwrap().to_vec(), want[5..15]);
    assert!(fs.read(fh, big as u64, 10).await.unwrap().is_empty());
    assert!(fs.read(fh, 1 << 62, 4096).await.unwrap().is_empty());
    assert!(fs.read(fh, u64::MAX - 10, 4096).await.unwrap().is_empty());
}

#[tokio::test]
async fn open_files_beyond_the_snapshot_budget_read_pinned_ranges() {
    // Room for one chunk's snapshot: the second file opened reads range by range, from the
    // shard version it opened, and a replaced chunk is ESTALE there (never half old, half new).
    let spec = ArraySpec::new(&[2], &[2], &[1]).index(zarrfs::zarr::sharding::IndexLocation::End, LE_CRC);
    let mut chunks = Chunks::new();
    chunks.insert(vec![0], chunk_bytes(&[0], 100, 1));
    chunks.insert(vec![1], chunk_bytes(&[1], 100, 1));
    let built = spec.build("a/", &chunks);
    let store = memory_store(&built.files);
    let options = ViewOptions {
        open_snapshot_bytes: 150,
        ..ViewOptions::default()
    };
    let fs = Fs::new(
        View::new(store.clone(), &options),
        FsConfig::read_only(UID, GID, Duration::ZERO),
    );
    let attr = resolve(&fs, "a/c/0").await.unwrap();
    let (first, second) = (
        fs.open(attr.ino, false, false).await.unwrap(),
        fs.open(attr.ino, false, false).await.unwrap(),
    );
    let old = &chunks[&vec![0]];
    assert_eq!(fs.read(first, 0, 10).await.unwrap().to_vec(), old[..10]);
    assert_eq!(fs.view().snapshot_bytes(), 100);
    assert_eq!(fs.read(second, 0, 10).await.unwrap().to_vec(), old[..10]);
    assert_eq!(fs.view().snapshot_bytes(), 100, "no room for a second snapshot");

    let mut changed = chunks.clone();
    changed.insert(vec![0], chunk_bytes(&[0], 100, 2));
    for (key, bytes) in spec.build("a/", &changed).files {
        store.insert(&key, bytes);
    }
    assert_eq!(
        fs.read(first, 10, 90).await.unwrap().to_vec(),
        old[10..],
        "the snapshot"
    );
    assert_eq!(fs.read(second, 10, 90).await.unwrap_err().errno(), libc::ESTALE);
    fs.release(first).await;
    fs.release(second).await;
    assert_eq!(fs.view().snapshot_bytes(), 0, "given back at release");
}

#[tokio::test]
async fn missing_names_are_enoent() {
    let (_, _, fs) = hierarchy_fs();
    for path in [
        "nope",
        "data/nope",
        "data/sharded/c/0/1",  // empty index entry
        "data/sharded/c/0/4",  // beyond the grid
        "data/sharded/c/5",    // row stored (edge shard) but outside the grid
        "data/sharded/c/5/0",  // chunk stored outside the grid
        "data/sharded/c/4/0",  // shard exists, entry empty
        "data/sharded/c/2/2",  // shard missing
        "data/sharded/c/00/0", // non-canonical
        "data/sharded/c/0/0/x",
        "data/sharded/c/x",
        "data/sharded/c.0.0",
        "data/dotted/c.9.0",
        "data/dotted/c/0/0",
        "data/v2/9/0/0",
        "notes.txt/x",
    ] {
        assert_eq!(errno_of(&fs, path).await, libc::ENOENT, "{path}");
    }
    let c0 = resolve(&fs, "data/sharded/c/0").await.unwrap();
    let e = fs.lookup(c0.ino, "1").await.unwrap_err();
    assert!(matches!(e, FsError::NotFound), "{e:?}");
    assert_eq!(fs.getattr(987_654_321).await.unwrap_err().errno(), libc::EBADF);
}

#[tokio::test]
async fn write_access_is_erofs_and_kinds_are_checked() {
    let (_, _, fs) = hierarchy_fs();
    for path in ["data/sharded/c/0/0", "notes.txt", "data/sharded/zarr.json"] {
        let attr = resolve(&fs, path).await.unwrap();
        assert_eq!(
            fs.open(attr.ino, true, false).await.unwrap_err().errno(),
            libc::EROFS,
            "{path}"
        );
        assert_eq!(fs.opendir(attr.ino).await.unwrap_err().errno(), libc::ENOTDIR, "{path}");
    }
    let dir = resolve(&fs, "data/sharded/c").await.unwrap();
    assert_eq!(fs.open(dir.ino, false, false).await.unwrap_err().errno(), libc::EISDIR);
    assert_eq!(fs.open(dir.ino, true, false).await.unwrap_err().errno(), libc::EROFS);
}

#[tokio::test]
async fn readdir_resumes_from_any_offset() {
    let (_, _, fs) = hierarchy_fs();
    for path in ["", "data", "data/sharded/c/0", "data/dotted", "data/v2"] {
        let dir = resolve(&fs, path).await.unwrap();
        let fh = fs.opendir(dir.ino).await.unwrap();
        let all = fs.readdir(dir.ino, fh, 0).await.unwrap();
        assert!(all.len() >= 3, "{path}");
        let offsets: Vec<u64> = all.iter().map(|i| i.offset).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{path}: offsets increase");
        assert!(offsets[0] > 0, "offset 0 means 'from the start'");
        for k in 0..=all.len() {
            let from = if k == 0 { 0 } else { all[k - 1].offset };
            let rest = fs.readdir(dir.ino, fh, from).await.unwrap();
            let got: Vec<(&str, u64)> = rest.iter().map(|i| (i.name.as_str(), i.offset)).collect();
            let want: Vec<(&str, u64)> = all[k..].iter().map(|i| (i.name.as_str(), i.offset)).collect();
            assert_eq!(got, want, "{path} from offset {from}");
        }
        assert!(fs.readdir(dir.ino, fh, 1 << 40).await.unwrap().is_empty());
        // The listing is taken at opendir: a second handle sees the same entries.
        let fh2 = fs.opendir(dir.ino).await.unwrap();
        let again: Vec<String> = fs
            .readdir(dir.ino, fh2, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.name.into())
            .collect();
        assert_eq!(again, all.iter().map(|i| i.name.to_string()).collect::<Vec<_>>());
        fs.releasedir(fh);
        fs.releasedir(fh2);
        assert_eq!(fs.readdir(dir.ino, fh, 0).await.unwrap_err().errno(), libc::EBADF);
    }
}

/// With kernel listings and an indefinite TTL, a directory opened again while the mount changed
/// nothing is answered from the kernel's kept listing with no listing taken; if the kernel asks
/// that handle anyway (its copy was reclaimed), it lists the same entries, from any offset.
#[tokio::test]
async fn a_handle_opened_on_a_kept_listing_lists_the_same_when_asked() {
    let (_, store, _) = hierarchy_fs();
    let options = ViewOptions {
        metadata_ttl: zarrfs::fs::INDEFINITE_TTL,
        ..ViewOptions::default()
    };
    let mut config = FsConfig::read_only(UID, GID, zarrfs::fs::INDEFINITE_TTL);
    config.kernel_listings = true;
    let fs = Fs::new(View::new(store, &options), config);
    for path in ["", "data", "data/sharded/c/0", "data/dotted"] {
        let dir = resolve(&fs, path).await.unwrap();
        let first = fs.open_dir(dir.ino).await.unwrap();
        assert!(first.cache && !first.keep_cache, "{path}: nothing kept yet");
        let all = fs.readdir(dir.ino, first.fh, 0).await.unwrap();
        let kept = fs.open_dir(dir.ino).await.unwrap();
        assert!(
            kept.cache && kept.keep_cache,
            "{path}: the kernel's copy is the listing"
        );
        let named = |items: &[DirItem]| -> Vec<(String, u64)> {
            items.iter().map(|i| (i.name.to_string(), i.offset)).collect()
        };
        for k in [all.len(), all.len() / 2, 0] {
            let from = if k == 0 { 0 } else { all[k - 1].offset };
            let lazy = fs.open_dir(dir.ino).await.unwrap();
            assert!(lazy.keep_cache);
            let got = fs.readdir(dir.ino, lazy.fh, from).await.unwrap();
            assert_eq!(named(&got), named(&all[k..]), "{path} from offset {from}");
            fs.releasedir(lazy.fh);
        }
        fs.releasedir(first.fh);
        fs.releasedir(kept.fh);
    }
}

#[tokio::test]
async fn corrupt_shard_is_eio_and_everything_else_still_reads() {
    let (h, store, fs) = hierarchy_fs();
    let victim = resolve(&fs, "data/sharded/c/0/0").await.unwrap();
    let fh = fs.open(victim.ino, false, false).await.unwrap();
    let other = resolve(&fs, "data/sharded/c/2/1").await.unwrap();
    let fh_other = fs.open(other.ino, false, false).await.unwrap();

    // Shard c/0/0 (inner rows 0-1, columns 0-1) truncated below its index size.
    store.insert("data/sharded/c/0/0", b"garbage".to_vec());
    let e = fs.read(fh, 0, 4096).await.unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(
        e.to_string().contains("data/sharded/c/0/0"),
        "error names the shard: {e}"
    );
    assert_eq!(errno_of(&fs, "data/sharded/c/1/1").await, libc::EIO);
    let row = resolve(&fs, "data/sharded/c/0").await.unwrap();
    assert_eq!(fs.opendir(row.ino).await.unwrap_err().errno(), libc::EIO);

    // Everything else is fine.
    assert_eq!(
        fs.read(fh_other, 0, 4096).await.unwrap().to_vec(),
        h.arrays[0].expected[&vec![2, 1]]
    );
    assert_eq!(
        read_path(&fs, "data/sharded/c/0/2").await,
        h.arrays[0].expected[&vec![0, 2]]
    );
    assert_eq!(read_path(&fs, "notes.txt").await, h.store["notes.txt"]);
    assert_eq!(names(&fs, "data/sharded/c/2").await, ["0", "1"]);
    assert!(!read_path(&fs, "data/sharded/zarr.json").await.is_empty());

    // A checksum mismatch is EIO too.
    let mut bad = h.store["data/sharded/c/0/1"].clone();
    let n = bad.len();
    bad[n - 10] ^= 0x04;
    store.insert("data/sharded/c/0/1", bad);
    let fs = fs_over(store.clone());
    assert_eq!(errno_of(&fs, "data/sharded/c/0/2").await, libc::EIO);
    assert_eq!(
        read_path(&fs, "data/sharded/c/4/3").await,
        h.arrays[0].expected[&vec![4, 3]]
    );
}

#[tokio::test]
async fn rewritten_shard_shows_new_sizes_and_bytes() {
    let (h, store, _) = hierarchy_fs();
    let fs = fs_with(store.clone(), ViewMode::Unsharded, Duration::ZERO);
    let a = &h.arrays[0];
    let before = read_path(&fs, "data/sharded/c/2/1").await;
    assert_eq!(before, a.expected[&vec![2, 1]]);
    let mut chunks = a.expected.clone();
    chunks.insert(vec![2, 1], b"new bytes of (2, 1)".to_vec());
    chunks.remove(&vec![2, 0]);
    store.insert("data/sharded/c/1/0", a.spec.shard_bytes(&[1, 0], &chunks));
    assert_eq!(read_path(&fs, "data/sharded/c/2/1").await, b"new bytes of (2, 1)");
    assert_eq!(errno_of(&fs, "data/sharded/c/2/0").await, libc::ENOENT);
    assert_eq!(names(&fs, "data/sharded/c/2").await, ["1"]);
}

#[tokio::test]
async fn getxattr_names_the_source() {
    let (h, store, fs) = hierarchy_fs();
    let chunk = resolve(&fs, "data/sharded/c/4/3").await.unwrap();
    let text = String::from_utf8(fs.getxattr(chunk.ino, XATTR_SOURCE).await.unwrap()).unwrap();
    let want = &h.arrays[0].expected[&vec![4, 3]];
    let rest = text
        .strip_prefix("shard data/sharded/c/2/1 offset ")
        .unwrap_or_else(|| panic!("{text}"));
    let (offset, length) = rest.split_once(" length ").unwrap();
    let (offset, length): (u64, u64) = (offset.parse().unwrap(), length.parse().unwrap());
    assert_eq!(length, want.len() as u64);
    let got = store
        .get(
            "data/sharded/c/2/1",
            GetOptions::range(ByteRange::Range { offset, length }),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got.bytes[..], &want[..], "the named range holds the chunk");

    let notes = resolve(&fs, "notes.txt").await.unwrap();
    assert_eq!(fs.getxattr(notes.ino, XATTR_SOURCE).await.unwrap(), b"stored notes.txt");
    let meta = resolve(&fs, "data/sharded/zarr.json").await.unwrap();
    assert_eq!(
        fs.getxattr(meta.ino, XATTR_SOURCE).await.unwrap(),
        b"rewritten metadata"
    );
    assert_eq!(
        fs.getxattr(chunk.ino, "user.other").await.unwrap_err().errno(),
        libc::ENODATA
    );
    let dir = resolve(&fs, "data").await.unwrap();
    assert_eq!(
        fs.getxattr(dir.ino, XATTR_SOURCE).await.unwrap_err().errno(),
        libc::ENODATA
    );
    assert_eq!(
        fs.listxattr(chunk.ino).await.unwrap(),
        format!("{XATTR_SOURCE}\0").into_bytes()
    );
}

#[tokio::test]
async fn without_the_xattr_option_attributes_are_not_implemented() {
    // ENOSYS, so that the kernel stops asking (an `ls -l` would ask twice per file).
    let h = sample_hierarchy();
    let fs = Fs::new(
        View::new(h.memory_store(), &ViewOptions::default()),
        FsConfig::read_only(UID, GID, Duration::from_secs(1)),
    );
    let chunk = resolve(&fs, "data/sharded/c/4/3").await.unwrap();
    for name in [XATTR_SOURCE, "security.selinux"] {
        assert_eq!(fs.getxattr(chunk.ino, name).await.unwrap_err().errno(), libc::ENOSYS);
    }
    assert_eq!(fs.listxattr(chunk.ino).await.unwrap_err().errno(), libc::ENOSYS);
}

#[tokio::test]
async fn raw_view_shows_the_store_as_is() {
    let h = sample_hierarchy();
    let fs = fs_with(h.memory_store(), ViewMode::Raw, Duration::from_secs(1));
    let tree = walk(&fs).await;
    assert_eq!(tree.files, h.store, "raw view = stored keys and bytes");
    let dirs: BTreeSet<String> = h.store.keys().flat_map(|k| parents(k)).collect();
    assert_eq!(tree.dirs, dirs);
    assert_eq!(names(&fs, "data/sharded").await, ["README", "c", "zarr.json"]);
    assert_eq!(names(&fs, "data/sharded/c").await, ["0", "1", "2"]);
    assert_eq!(names(&fs, "data/sharded/c/1").await, ["0"]);
    assert_eq!(errno_of(&fs, "data/sharded/c/3").await, libc::ENOENT);
}

// ---------------------------------------------------------------------------------------------
// Reference model: random sharded arrays inside a group, walked through the Fs.

/// Stored keys, the expected view files, and the arrays.
type RandomTree = (BTreeMap<String, Vec<u8>>, BTreeMap<String, Expect>, Vec<Built>);

fn random_hierarchy(seed: u64) -> RandomTree {
    let mut store: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut arrays = Vec::new();
    // Sometimes the root itself is the array; otherwise it sits in a group next to a file.
    let prefix = if seed.is_multiple_of(3) { "" } else { "g/a/" };
    let spec = random_spec(seed);
    let chunks = spec.random_chunks(seed, 30 + seed % 70, 12);
    arrays.push(spec.build(prefix, &chunks));
    if !prefix.is_empty() {
        store.insert("zarr.json".into(), group_json("root"));
        store.insert("g/zarr.json".into(), group_json("g"));
        store.insert("g/other.bin".into(), vec![1, 2, 3]);
    }
    for (k, v) in &store {
        files.insert(k.clone(), Expect::Bytes(v.clone()));
    }
    for a in &arrays {
        store.extend(a.files.clone());
        files.insert(a.zarr_json_key(), Expect::Json(a.spec.rewritten_json()));
        for (k, b) in a.view_chunk_files() {
            files.insert(k, Expect::Bytes(b));
        }
    }
    (store, files, arrays)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn fs_tree_equals_unsharded_reference(seed in any::<u64>()) {
        let (store, files, arrays) = random_hierarchy(seed);
        runtime().block_on(async {
            let fs = fs_over(memory_store(&store));
            let tree = walk(&fs).await;
            check_tree(&tree, &files, &arrays);
        });
    }
}

#[tokio::test]
async fn arrays_that_cannot_be_unsharded_pass_through() {
    let h = sample_hierarchy();
    let mut store = h.store.clone();
    // Sharding followed by a codec zarrfs cannot decode around a shard.
    let spec = ArraySpec::new(&[4, 4], &[4, 4], &[2, 2]);
    let built = spec.build("gz/", &spec.full_chunks(1, 3, 5));
    let mut doc = spec.zarr_json();
    doc["codecs"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "frobnicate", "configuration": {"level": 1}}));
    store.extend(built.files.clone());
    store.insert("gz/zarr.json".into(), serde_json::to_vec(&doc).unwrap());
    // Not JSON at all.
    store.insert("bad/zarr.json".into(), b"{not json".to_vec());
    store.insert("bad/c/0/0".into(), b"shard?".to_vec());
    let fs = fs_over(memory_store(&store));
    assert_eq!(names(&fs, "gz").await, ["c", "zarr.json"]);
    assert_eq!(names(&fs, "gz/c").await, ["0"]);
    assert_eq!(names(&fs, "gz/c/0").await, ["0"]);
    assert_eq!(read_path(&fs, "gz/c/0/0").await, store["gz/c/0/0"]);
    assert_eq!(read_path(&fs, "gz/zarr.json").await, store["gz/zarr.json"]);
    assert_eq!(errno_of(&fs, "gz/c/1/1").await, libc::ENOENT);
    assert_eq!(read_path(&fs, "bad/zarr.json").await, b"{not json");
    assert_eq!(read_path(&fs, "bad/c/0/0").await, b"shard?");
    // The rest of the hierarchy is unaffected.
    let tree = walk(&fs).await;
    for (path, want) in &h.files {
        check_file(path, &tree.files[path], want);
    }
}

/// Index lookups counted by the view's shard statistics (hits and misses together).
fn index_lookups(fs: &Fs) -> u64 {
    let stats = fs.view().shard_stats().snapshot();
    ["index_cache_hits", "index_cache_misses"]
        .iter()
        .map(|k| stats[*k].as_u64().unwrap())
        .sum()
}

/// A chunk file is located when it is opened, and its reads go where it was found: no read
/// consults a shard index again. A shard rewritten after the open is located afresh, so the
/// reader gets the bytes of the new version, never a mix or an error.
#[tokio::test]
async fn reads_go_where_the_open_found_the_chunk() {
    let h = sample_hierarchy();
    let a = &h.arrays[0];
    let store = h.memory_store();
    let fs = fs_over(store.clone());
    let dir = a.prefix.trim_end_matches('/');
    let attr = resolve(&fs, &format!("{dir}/c/0/0")).await.unwrap();
    let fh = fs.open(attr.ino, false, false).await.unwrap();
    let before = index_lookups(&fs);
    let whole = fs.read(fh, 0, 1 << 20).await.unwrap();
    assert_eq!(whole.to_vec(), a.expected[&vec![0, 0]]);
    for offset in [0, 1, 3] {
        let part = fs.read(fh, offset, 2).await.unwrap();
        assert_eq!(part.to_vec(), a.expected[&vec![0, 0]][offset as usize..][..2]);
    }
    assert_eq!(index_lookups(&fs), before, "a read looked the chunk up again");

    // The shard is rewritten by another writer after this open: the next open's first read
    // finds the location stale and reads the new version.
    let fh = fs.open(attr.ino, false, false).await.unwrap();
    let shard_key = a.shard_key(&a.spec.shard_of(&[0, 0]));
    let mut chunks = a.expected.clone();
    chunks.insert(vec![0, 0], b"rewritten".to_vec());
    let rebuilt = a.spec.build(&a.prefix, &chunks);
    store
        .set(&shard_key, rebuilt.files[&shard_key].clone().into())
        .await
        .unwrap();
    assert_eq!(fs.read(fh, 0, 1 << 20).await.unwrap().to_vec(), b"rewritten");
}

/// The inodes of the four leaf directories of the hierarchy's sharded array.
async fn sharded_leaf_dirs(fs: &Fs) -> Vec<u64> {
    let mut dirs = Vec::new();
    for row in 0..4 {
        dirs.push(resolve(fs, &format!("data/sharded/c/{row}")).await.unwrap().ino);
    }
    dirs
}

/// A listing from the start (READDIRPLUS) hands attributes to a walker that stats what it
/// lists, up to the last file (left to a plain READDIR, where the walker's LOOKUP of it shows
/// it still stats), and only `.` and `..` to one that did not look up a file it listed.
#[tokio::test]
async fn a_listing_hands_attributes_only_to_walkers_that_stat() {
    let (_, _, fs) = hierarchy_fs();
    let dirs = sharded_leaf_dirs(&fs).await;
    let listed = |ino: u64| {
        let fs = &fs;
        async move {
            let fh = fs.opendir(ino).await.unwrap();
            let all: Vec<String> = fs
                .readdir(ino, fh, 0)
                .await
                .unwrap()
                .into_iter()
                .map(|i| i.name.into())
                .collect();
            let plus: Vec<String> = fs
                .dir_items_plus(ino, fh, 0)
                .await
                .unwrap()
                .map(|i| i.name.into())
                .collect();
            // What the plus answer left out comes with the plain READDIR after it.
            let from = plus.len() as u64;
            let rest: Vec<String> = fs
                .readdir(ino, fh, from)
                .await
                .unwrap()
                .into_iter()
                .map(|i| i.name.into())
                .collect();
            assert_eq!([plus.clone(), rest].concat(), all);
            fs.releasedir(fh);
            (plus, all)
        }
    };
    // Nothing to go by: attributes, up to the last file.
    let (plus, all) = listed(dirs[0]).await;
    assert!(all.len() >= 4, "{all:?}");
    assert_eq!(plus, all[..all.len() - 1]);
    // The walker looked nothing up in it: names only.
    let (plus, _) = listed(dirs[1]).await;
    assert_eq!(plus, [".", ".."]);
    // It stats the files of the next one: attributes again.
    let (_, all) = listed(dirs[2]).await;
    fs.lookup(dirs[2], &all[2]).await.unwrap();
    let (plus, all) = listed(dirs[3]).await;
    assert_eq!(plus, all[..all.len() - 1]);
}

/// `ls -l` stats each entry as it reads it, so the kernel asks for the rest of the listing with
/// attributes (READDIRPLUS past the start) and never looks the last file up: that shows the
/// walker stats too.
#[tokio::test]
async fn a_listing_continued_with_attributes_shows_a_walker_that_stats() {
    let (_, _, fs) = hierarchy_fs();
    let dirs = sharded_leaf_dirs(&fs).await;
    let first_answer = |ino: u64, then_more: bool| {
        let fs = &fs;
        async move {
            let fh = fs.opendir(ino).await.unwrap();
            let plus: Vec<DirItem> = fs.dir_items_plus(ino, fh, 0).await.unwrap().collect();
            if then_more {
                let last = plus.last().unwrap().offset;
                let rest: Vec<DirItem> = fs.dir_items_plus(ino, fh, last).await.unwrap().collect();
                assert_eq!(rest.len(), 1, "the last file, with its attributes");
            }
            fs.releasedir(fh);
            plus.len()
        }
    };
    assert!(first_answer(dirs[0], true).await > 2, "nothing to go by: attributes");
    assert!(
        first_answer(dirs[1], false).await > 2,
        "the walker used what it was handed"
    );
    assert!(first_answer(dirs[2], false).await > 2, "one of the last two was used");
    assert_eq!(
        first_answer(dirs[3], false).await,
        2,
        "two listings nobody used: names only"
    );
}
