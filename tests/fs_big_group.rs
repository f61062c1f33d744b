//! A big root group document (consolidated metadata of thousands of arrays) is not read to
//! open one array below it: the view reads its last MiB for its kind, and the rest, pinned to
//! that version, only when the document itself is read. Driven through the `fs` layer over a
//! memory store that records every request.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use serde_json::{json, Value};
use zarrfs::fs::{Fs, FsConfig};
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{
    ByteRange, Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreResult, Version,
};
use zarrfs::view::{View, ViewOptions};

const MIB: usize = 1 << 20;

/// A sharded array `a` with data, and a root whose consolidated metadata also describes 3,000
/// more (about 2 MiB), written as zarr-python does (`node_type` last).
fn hierarchy() -> (Arc<MemoryStore>, ArraySpec, Value) {
    let a = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let mut files = a.build("a/", &a.full_chunks(1, 2, 6)).files;
    let mut entries = serde_json::Map::new();
    entries.insert("a".into(), a.zarr_json());
    for i in 0..3000 {
        entries.insert(format!("g/x{i}"), a.zarr_json());
    }
    let root = json!({
        "attributes": {"title": "big"}, "zarr_format": 3,
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": entries},
        "node_type": "group"
    });
    let doc = serde_json::to_vec_pretty(&root).unwrap();
    assert!(doc.len() > 2 * MIB - MIB / 2, "{} bytes", doc.len());
    files.insert("zarr.json".into(), doc);
    (memory_store(&files), a, root)
}

fn fs_over(store: Arc<dyn Store>) -> Fs {
    let options = ViewOptions {
        metadata_ttl: Duration::from_secs(60),
        ..ViewOptions::default()
    };
    Fs::new(
        View::new(store, &options),
        FsConfig::read_only(FS_UID, FS_GID, Duration::from_secs(1)),
    )
}

/// The reads of `key` among `ops`: their ranges and whether each was pinned to a version.
fn reads_of(ops: &[Op], key: &str) -> Vec<(Option<ByteRange>, bool)> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Get { key: k, range, pinned } if k == key => Some((*range, *pinned)),
            _ => None,
        })
        .collect()
}

fn parse(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

#[tokio::test]
async fn one_array_below_a_big_root_is_opened_with_the_roots_last_mib_alone() {
    let (mem, a, _) = hierarchy();
    let rec = Arc::new(RecordingStore::new(mem.clone()));
    let fs = fs_over(rec.clone());
    let shown = parse(&fs_read_path(&fs, "a/zarr.json").await.unwrap());
    assert_eq!(shown, a.rewritten_json());
    assert!(fs_read_path(&fs, "a/c/0/0").await.is_ok());
    let ops = rec.take();
    assert_eq!(
        reads_of(&ops, "zarr.json"),
        [(Some(ByteRange::Suffix(MIB as u64)), false)],
        "the root's end alone: {ops:?}"
    );

    // Reading the root document fetches the rest, of the version its end came from, once.
    let root = parse(&fs_read_path(&fs, "zarr.json").await.unwrap());
    let root_again = parse(&fs_read_path(&fs, "zarr.json").await.unwrap());
    assert_eq!(reads_of(&rec.take(), "zarr.json"), [(None, true)]);
    let entries = &root["consolidated_metadata"]["metadata"];
    assert_eq!(entries["a"], shown, "rewritten as the array is shown");
    assert_eq!(entries["g/x2999"], a.rewritten_json());
    assert_eq!(root["attributes"]["title"], "big");
    assert_eq!(root, root_again);
}

#[tokio::test]
async fn a_big_root_replaced_or_removed_after_its_end_was_read_shows_what_is_stored() {
    let (mem, a, mut root) = hierarchy();
    let fs = fs_over(mem.clone());
    fs_read_path(&fs, "a/zarr.json").await.unwrap();
    // Replaced: the document shown is the new one, rewritten.
    root["attributes"]["title"] = json!("replaced");
    mem.set("zarr.json", Bytes::from(serde_json::to_vec(&root).unwrap()))
        .await
        .unwrap();
    let shown = parse(&fs_read_path(&fs, "zarr.json").await.unwrap());
    assert_eq!(shown["attributes"]["title"], "replaced");
    assert_eq!(shown["consolidated_metadata"]["metadata"]["a"], a.rewritten_json());

    // Removed: the root's document is gone, not shown with made-up bytes.
    let fs = fs_over(mem.clone());
    fs_read_path(&fs, "a/zarr.json").await.unwrap();
    mem.erase("zarr.json").await.unwrap();
    let err = fs_read_path(&fs, "zarr.json").await.expect_err("gone");
    assert_eq!(err.errno(), libc::ENOENT, "{err:?}");
}

/// A store whose reads of a value's end cost two requests (Azure's), or, with `.1`, that
/// refuses them.
#[derive(Debug)]
struct NoSuffix(Arc<dyn Store>, bool);

#[async_trait]
impl Store for NoSuffix {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            suffix_reads: self.1,
            ..self.0.capabilities()
        }
    }
    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        if self.1 && matches!(opts.range, Some(ByteRange::Suffix(_))) {
            // As S3 does for an empty object, through `object_store`.
            let refused = std::io::Error::other("Received non-partial response when range requested");
            return Err(zarrfs::store::StoreError::io(key, refused));
        }
        self.0.get(key, opts).await
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.0.head(key).await
    }
    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.0.set(key, value).await
    }
    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.0.erase(key).await
    }
    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.0.list_prefix(prefix).await
    }
    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.0.list_dir(prefix).await
    }
}

#[tokio::test]
async fn where_an_end_costs_two_requests_documents_are_read_whole_in_one() {
    let (mem, a, _) = hierarchy();
    let rec = Arc::new(RecordingStore::new(Arc::new(NoSuffix(mem, false))));
    let fs = fs_over(rec.clone());
    assert_eq!(
        parse(&fs_read_path(&fs, "a/zarr.json").await.unwrap()),
        a.rewritten_json()
    );
    assert_eq!(reads_of(&rec.take(), "zarr.json"), [(None, false)]);
    let root = parse(&fs_read_path(&fs, "zarr.json").await.unwrap());
    assert_eq!(root["consolidated_metadata"]["metadata"]["a"], a.rewritten_json());
    assert_eq!(reads_of(&rec.take(), "zarr.json"), [], "read once");
}

#[tokio::test]
async fn documents_below_the_root_and_a_big_root_that_does_not_end_with_its_kind_are_read_whole() {
    let (mem, a, root) = hierarchy();
    // Keys sorted the other way: `zarr_format` then `node_type` at the start; a big attribute
    // last, so the end says nothing of the kind.
    let reordered = format!(
        r#"{{"node_type": "group", "zarr_format": 3, "consolidated_metadata": {}, "attributes": {{"title": "big"}}}}"#,
        root["consolidated_metadata"]
    );
    mem.set("zarr.json", Bytes::from(reordered)).await.unwrap();
    let rec = Arc::new(RecordingStore::new(mem.clone()));
    let fs = fs_over(rec.clone());
    fs_read_path(&fs, "a/zarr.json").await.unwrap();
    let ops = rec.take();
    assert_eq!(
        reads_of(&ops, "zarr.json"),
        [(Some(ByteRange::Suffix(MIB as u64)), false), (None, false)],
        "its end, then all of it"
    );
    // Below the root, documents are read whole, in one request.
    assert_eq!(reads_of(&ops, "a/zarr.json"), [(None, false)]);
    let root = parse(&fs_read_path(&fs, "zarr.json").await.unwrap());
    assert_eq!(root["consolidated_metadata"]["metadata"]["a"], a.rewritten_json());
}

#[tokio::test]
async fn a_refused_read_of_the_roots_end_is_read_whole() {
    let (mem, a, _) = hierarchy();
    let rec = Arc::new(RecordingStore::new(Arc::new(NoSuffix(mem, true))));
    let fs = fs_over(rec.clone());
    assert_eq!(
        parse(&fs_read_path(&fs, "a/zarr.json").await.unwrap()),
        a.rewritten_json()
    );
    assert_eq!(
        reads_of(&rec.take(), "zarr.json"),
        [(Some(ByteRange::Suffix(MIB as u64)), false), (None, false)]
    );
    let root = parse(&fs_read_path(&fs, "zarr.json").await.unwrap());
    assert_eq!(root["consolidated_metadata"]["metadata"]["a"], a.rewritten_json());
}

/// `zarrfs stats` opens the root directory for its ioctl and reads nothing from it: while the
/// root was read by its end alone, that open takes no listing, so it reads the end (to know the
/// root is such a group) and not the whole document. A listing of the handle then takes it, and
/// later opens of the root are as any directory's, with nothing more to read.
#[tokio::test]
async fn opening_a_big_root_directory_reads_its_end_alone_until_it_is_listed() {
    let (mem, _, _) = hierarchy();
    let rec = Arc::new(RecordingStore::new(mem.clone()));
    let fs = fs_over(rec.clone());
    let root = zarrfs::fs::inodes::ROOT_INO;
    let fh = fs.opendir(root).await.unwrap();
    let ops = rec.take();
    assert_eq!(
        reads_of(&ops, "zarr.json"),
        [(Some(ByteRange::Suffix(MIB as u64)), false)],
        "an open alone read more than the root's end: {ops:?}"
    );
    let names: Vec<String> = fs
        .readdir(root, fh, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.to_string())
        .collect();
    fs.releasedir(fh);
    assert_eq!(names, [".", "..", "a", "zarr.json"]);
    assert_eq!(
        reads_of(&rec.take(), "zarr.json"),
        [(None, true)],
        "the listing shows the whole root"
    );
    let again = fs.opendir(root).await.unwrap();
    assert_eq!(fs.readdir(root, again, 0).await.unwrap().len(), 4);
    fs.releasedir(again);
    assert!(reads_of(&rec.take(), "zarr.json").is_empty());
}
