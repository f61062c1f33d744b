//! The hierarchy is coherent as a whole: group documents with inline consolidated metadata
//! are shown and written like the arrays they describe, and arrays created through the view
//! with sharding are shown as stored — driven through the `fs` layer over a memory store with
//! a zero metadata TTL (every cached answer is checked again at once).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use zarrfs::fs::{Fs, FsConfig, FsError};
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{GetOptions, Store};
use zarrfs::view::{View, ViewMode, ViewOptions};

fn group(metadata: Value) -> Value {
    json!({
        "attributes": {"title": "consolidated"}, "zarr_format": 3,
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": metadata},
        "node_type": "group"
    })
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap()
}

fn parse(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

struct Hierarchy {
    mem: Arc<MemoryStore>,
    a: ArraySpec,
    b: ArraySpec,
}

/// `a` (sharded), `p` (unsharded), group `g` holding `g/b` (sharded, nested levels); the root
/// block flattens all of them as zarr-python does, `g` carries a block of its own.
fn hierarchy() -> Hierarchy {
    let a = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let b = ArraySpec::new(&[6], &[6], &[3]).nest(&[1], zarrfs::zarr::sharding::IndexLocation::Start, LE_CRC);
    let mut files = a.build("a/", &a.full_chunks(1, 2, 6)).files;
    files.extend(b.build("g/b/", &b.full_chunks(2, 1, 4)).files);
    files.insert("p/zarr.json".into(), bytes(&plain_array_json()));
    let root = group(json!({
        "a": a.zarr_json(), "g": group(json!({})), "g/b": b.zarr_json(), "p": plain_array_json(),
    }));
    files.insert("zarr.json".into(), bytes(&root));
    files.insert("g/zarr.json".into(), bytes(&group(json!({"b": b.zarr_json()}))));
    Hierarchy {
        mem: memory_store(&files),
        a,
        b,
    }
}

fn fs_over(store: Arc<dyn Store>, mode: ViewMode) -> Fs {
    let mut config = FsConfig::read_only(FS_UID, FS_GID, Duration::from_secs(1));
    config.writable = true;
    let options = ViewOptions {
        mode,
        metadata_ttl: Duration::ZERO,
        ..ViewOptions::default()
    };
    Fs::new(View::new(store, &options), config)
}

fn errno(r: Result<(), FsError>) -> i32 {
    r.expect_err("should fail").errno()
}

/// Write `data` at `path` the way zarr-python does: a temporary name beside it, renamed over.
async fn put_by_rename(fs: &Fs, path: &str, data: &[u8]) -> Result<(), FsError> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let temp = format!("{dir}/{name}.0a1b2c.partial")
        .trim_start_matches('/')
        .to_string();
    fs_write_file(fs, &temp, data).await?;
    let parent = fs_mkdir_p(fs, dir).await?;
    let temp_name = temp.rsplit('/').next().unwrap();
    fs.rename(parent, temp_name, parent, name, false).await
}

async fn stored(mem: &MemoryStore, key: &str) -> Vec<u8> {
    let got = mem.get(key, GetOptions::default()).await.unwrap();
    got.unwrap_or_else(|| panic!("{key} not stored")).bytes.to_vec()
}

async fn view_json(fs: &Fs, path: &str) -> Value {
    parse(&fs_read_path(fs, path).await.unwrap())
}

#[tokio::test]
async fn each_consolidated_entry_is_what_the_view_shows_for_its_array() {
    let h = hierarchy();
    let fs = fs_over(h.mem.clone(), ViewMode::Unsharded);
    let root = view_json(&fs, "zarr.json").await;
    let entries = &root["consolidated_metadata"]["metadata"];
    for path in ["a", "g/b", "p"] {
        assert_eq!(
            entries[path],
            view_json(&fs, &format!("{path}/zarr.json")).await,
            "{path}"
        );
    }
    assert_eq!(entries["a"], h.a.rewritten_json());
    assert_eq!(entries["g/b"], h.b.rewritten_json());
    assert_eq!(entries["p"], plain_array_json());
    let g = view_json(&fs, "g/zarr.json").await;
    assert_eq!(g["consolidated_metadata"]["metadata"]["b"], h.b.rewritten_json());
    // Every other member as stored, in order.
    let stored_doc = parse(&stored(&h.mem, "zarr.json").await);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&root), keys(&stored_doc));
    assert_eq!(root["attributes"], stored_doc["attributes"]);
    // Listed sizes agree with lookups and reads (fs_walk checks), and the walk sees the same.
    let (files, _) = fs_walk(&fs).await;
    assert_eq!(parse(&files["zarr.json"]), root);

    // The raw view shows the stored bytes.
    let raw = fs_over(h.mem.clone(), ViewMode::Raw);
    assert_eq!(
        fs_read_path(&raw, "zarr.json").await.unwrap(),
        stored(&h.mem, "zarr.json").await
    );
}

#[tokio::test]
async fn a_consolidation_through_the_view_stores_the_sharded_entries() {
    let h = hierarchy();
    let fs = fs_over(h.mem.clone(), ViewMode::Unsharded);
    let before = dump_store(h.mem.as_ref()).await;
    // The view's document written back unchanged: the store agrees with itself as before.
    let view = view_json(&fs, "zarr.json").await;
    put_by_rename(&fs, "zarr.json", &bytes(&view)).await.unwrap();
    assert_eq!(parse(&stored(&h.mem, "zarr.json").await), parse(&before["zarr.json"]));

    // A re-consolidation after a resize: the entry keeps its new shape and gets its sharding.
    let mut resized = view.clone();
    resized["consolidated_metadata"]["metadata"]["a"]["shape"] = json!([12, 8]);
    resized["consolidated_metadata"]["metadata"]["g"]["consolidated_metadata"]["metadata"]["b"] = h.b.rewritten_json();
    put_by_rename(&fs, "zarr.json", &bytes(&resized)).await.unwrap();
    let stored_doc = parse(&stored(&h.mem, "zarr.json").await);
    let mut want_a = h.a.zarr_json();
    want_a["shape"] = json!([12, 8]);
    assert_eq!(stored_doc["consolidated_metadata"]["metadata"]["a"], want_a);
    assert_eq!(
        stored_doc["consolidated_metadata"]["metadata"]["g"]["consolidated_metadata"]["metadata"]["b"],
        h.b.zarr_json()
    );
    // Only the group document changed, and no temporary name is left.
    let after = dump_store(h.mem.as_ref()).await;
    let changed: Vec<_> = after.keys().filter(|k| before.get(*k) != after.get(*k)).collect();
    assert_eq!(changed, ["zarr.json"]);
    assert_eq!(after.len(), before.len());
    // Shown unsharded with the new shape.
    let mut shown_a = h.a.rewritten_json();
    shown_a["shape"] = json!([12, 8]);
    assert_eq!(
        view_json(&fs, "zarr.json").await["consolidated_metadata"]["metadata"]["a"],
        shown_a
    );

    // Written in place (no rename) too.
    fs_write_file(&fs, "g/zarr.json", &bytes(&group(json!({"b": h.b.rewritten_json()}))))
        .await
        .unwrap();
    let g = parse(&stored(&h.mem, "g/zarr.json").await);
    assert_eq!(g["consolidated_metadata"]["metadata"]["b"], h.b.zarr_json());
}

#[tokio::test]
async fn entries_the_sharded_store_cannot_express_are_refused() {
    let h = hierarchy();
    let fs = fs_over(h.mem.clone(), ViewMode::Unsharded);
    let before = dump_store(h.mem.as_ref()).await;
    let view = view_json(&fs, "zarr.json").await;
    let mut other_chunks = view.clone();
    other_chunks["consolidated_metadata"]["metadata"]["a"]["chunk_grid"]["configuration"]["chunk_shape"] =
        json!([4, 2]);
    assert_eq!(
        errno(put_by_rename(&fs, "zarr.json", &bytes(&other_chunks)).await),
        libc::EINVAL
    );
    // The stored (sharded) form contradicts what the view shows of `a`.
    let mut stored_form = view.clone();
    stored_form["consolidated_metadata"]["metadata"]["a"] = h.a.zarr_json();
    assert_eq!(
        errno(fs_write_file(&fs, "zarr.json", &bytes(&stored_form)).await),
        libc::EINVAL
    );
    let mut b = h.b.rewritten_json();
    b["codecs"] = json!([{"name": "bytes"}, {"name": "gzip"}]);
    let mut nested = view.clone();
    nested["consolidated_metadata"]["metadata"]["g"] = group(json!({"b": b}));
    assert_eq!(
        errno(fs_write_file(&fs, "zarr.json", &bytes(&nested)).await),
        libc::EINVAL
    );
    assert_eq!(
        errno(fs_write_file(&fs, "g/zarr.json", &bytes(&group(json!({"b": b})))).await),
        libc::EINVAL
    );
    // Nothing stored; the view still shows the stored document.
    let after = dump_store(h.mem.as_ref()).await;
    let stray: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    assert!(stray.iter().all(|k| k.ends_with(".partial")), "{stray:?}");
    assert_eq!(after["zarr.json"], before["zarr.json"]);
    assert_eq!(view_json(&fs, "zarr.json").await, view);
}

/// A new sharded array `n` (shape 8, shards of 4, chunks of 2) as its client would store it:
/// its document and its whole shards.
fn new_array(seed: u64) -> (Value, Built) {
    let spec = ArraySpec::new(&[8], &[4], &[2]);
    let built = spec.build("n/", &spec.full_chunks(seed, 2, 6));
    (spec.zarr_json(), built)
}

fn shard_files(built: &Built) -> Vec<(&String, &Vec<u8>)> {
    built.files.iter().filter(|(k, _)| !k.ends_with("zarr.json")).collect()
}

#[tokio::test]
async fn arrays_created_with_sharding_are_shown_as_stored_until_the_next_mount() {
    let h = hierarchy();
    let fs = fs_over(h.mem.clone(), ViewMode::Unsharded);
    let (doc, built) = new_array(5);
    put_by_rename(&fs, "n/zarr.json", &bytes(&doc)).await.unwrap();
    assert_eq!(parse(&stored(&h.mem, "n/zarr.json").await), doc);
    // The TTL is zero: the view has looked at the stored document again. The client's whole
    // shards land as written, byte for byte, and read back as files.
    for (key, shard) in shard_files(&built) {
        put_by_rename(&fs, key, shard).await.unwrap();
    }
    for (key, shard) in shard_files(&built) {
        assert_eq!(&stored(&h.mem, key).await, shard, "{key}");
        assert_eq!(&fs_read_path(&fs, key).await.unwrap(), shard, "{key}");
    }
    assert_eq!(view_json(&fs, "n/zarr.json").await, doc);

    // A fresh mount shows it unsharded like every other sharded array.
    let next = fs_over(h.mem.clone(), ViewMode::Unsharded);
    assert_eq!(view_json(&next, "n/zarr.json").await, built.spec.rewritten_json());
    let (files, _) = fs_walk(&next).await;
    let chunks: BTreeMap<_, _> = files.into_iter().filter(|(k, _)| k.starts_with("n/c/")).collect();
    assert_eq!(chunks, built.view_chunk_files());
}

#[tokio::test]
async fn groups_declaring_new_sharded_arrays_show_them_as_stored() {
    let h = hierarchy();
    let fs = fs_over(h.mem.clone(), ViewMode::Unsharded);
    let (doc, built) = new_array(6);
    // The client consolidates first (its entry for `n` is sharded: nothing is stored there).
    let mut root = view_json(&fs, "zarr.json").await;
    root["consolidated_metadata"]["metadata"]["n"] = doc.clone();
    put_by_rename(&fs, "zarr.json", &bytes(&root)).await.unwrap();
    let stored_root = parse(&stored(&h.mem, "zarr.json").await);
    assert_eq!(stored_root["consolidated_metadata"]["metadata"]["n"], doc);
    assert_eq!(stored_root["consolidated_metadata"]["metadata"]["a"], h.a.zarr_json());
    // Then writes the array and one whole shard.
    fs_write_file(&fs, "n/zarr.json", &bytes(&doc)).await.unwrap();
    let (key, shard) = shard_files(&built)[0];
    fs_write_file(&fs, key, shard).await.unwrap();
    assert_eq!(&stored(&h.mem, key).await, shard);
    // The view agrees with itself: `n` as stored in the group and on its own, `a` unsharded.
    let shown = view_json(&fs, "zarr.json").await;
    assert_eq!(shown["consolidated_metadata"]["metadata"]["n"], doc);
    assert_eq!(shown["consolidated_metadata"]["metadata"]["a"], h.a.rewritten_json());
    assert_eq!(view_json(&fs, "n/zarr.json").await, doc);
}

#[tokio::test]
async fn an_array_resized_without_reconsolidating_leaves_the_entry_as_it_was() {
    let h = hierarchy();
    let fs = fs_over(h.mem.clone(), ViewMode::Unsharded);
    let mut a = view_json(&fs, "a/zarr.json").await;
    a["shape"] = json!([12, 8]);
    fs_write_file(&fs, "a/zarr.json", &bytes(&a)).await.unwrap();
    assert_eq!(parse(&stored(&h.mem, "a/zarr.json").await)["shape"], json!([12, 8]));
    let root = parse(&stored(&h.mem, "zarr.json").await);
    assert_eq!(root["consolidated_metadata"]["metadata"]["a"], h.a.zarr_json());
    let shown = view_json(&fs, "zarr.json").await;
    assert_eq!(shown["consolidated_metadata"]["metadata"]["a"], h.a.rewritten_json());
}
