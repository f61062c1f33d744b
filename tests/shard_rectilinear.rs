//! Sharded arrays on a rectilinear grid (zarr-python 3.4's varying shard edges) through the
//! sharding transformer and the filesystem layer, against memory stores: every inner chunk
//! written is packed into the shard whose edges hold it, each shard with an index of its own
//! shape; reads, listings, removals and the unsharded view agree; an array that cannot be
//! unsharded is shown as stored.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use serde_json::{json, Value};
use zarrfs::shard::ShardOptions;
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{GetOptions, Store};
use zarrfs::zarr::metadata::{parse_zarr_json, NodeMetadata};
use zarrfs::zarr::shard_pack::unpack;
use zarrfs::zarr::sharding::{analyse, Sharding};

/// What zarr-python 3.4 writes for `shape=(64, 48), chunks=(8, 8), shards=[[16, 24, 24], [24, 24]]`
/// (uncompressed inner chunks).
fn doc(shape: [u64; 2], chunk_shapes: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "shape": shape, "data_type": "int32",
        "chunk_grid": {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": chunk_shapes}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [8, 8],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}],
        "attributes": {"t": 1}, "zarr_format": 3, "node_type": "array", "storage_transformers": []
    }))
    .unwrap()
}

fn zarr_python_doc() -> Vec<u8> {
    doc([64, 48], json!([[16, [24, 2]], [[24, 2]]]))
}

/// Shard row holding inner chunk row `y` (edges 2, 3, 3 inner chunks).
fn shard_row(y: u64) -> u64 {
    [0, 0, 1, 1, 1, 2, 2, 2][y as usize]
}

fn chunk(coords: &[u64]) -> Vec<u8> {
    chunk_bytes(coords, 8 * 8 * 4, 7)
}

#[test]
fn every_inner_chunk_goes_to_the_shard_whose_edges_hold_it() {
    runtime().block_on(async {
        let store = Arc::new(MemoryStore::new());
        let array = open_array(store.clone(), "a/", &zarr_python_doc(), ShardOptions::default()).shared();
        assert_eq!(array.inner_grid(), [8, 6]);
        let all = all_coords(&[8, 6]);
        let writes = all.iter().map(|c| (c.clone(), Some(Bytes::from(chunk(c))))).collect();
        array.write_chunks(writes).await.unwrap();

        let stored = dump_store(store.as_ref()).await;
        let keys: Vec<&str> = stored.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a/c/0/0", "a/c/0/1", "a/c/1/0", "a/c/1/1", "a/c/2/0", "a/c/2/1"]);
        let meta = match parse_zarr_json(&zarr_python_doc()).unwrap() {
            NodeMetadata::Array(m) => m,
            NodeMetadata::Group { .. } => unreachable!(),
        };
        let Sharding::Sharded(layout) = analyse(&meta) else {
            panic!()
        };
        for (key, bytes) in &stored {
            let coords: Vec<u64> = key[4..].split('/').map(|c| c.parse().unwrap()).collect();
            let levels = layout.levels_of(&coords).unwrap();
            let per_shard = levels[0].num_chunks();
            assert_eq!(per_shard, if coords[0] == 0 { 6 } else { 9 }, "{key}");
            assert_eq!(
                bytes.len() as u64,
                per_shard * (256 + 16) + 4,
                "{key}: chunks and index"
            );
            let content = unpack(bytes, &levels).unwrap();
            assert_eq!(content.count() as u64, per_shard, "{key}");
        }
        for c in &all {
            let loc = array.locate(c).await.unwrap().unwrap();
            assert_eq!(loc.shard_key, format!("a/c/{}/{}", shard_row(c[0]), c[1] / 3));
            let (_, got) = array.read_chunk(c, 0, u64::MAX).await.unwrap().unwrap();
            assert_eq!(got.to_vec(), chunk(c), "{c:?}");
        }
        assert_eq!(array.locate(&[8, 0]).await.unwrap(), None);
        assert_eq!(array.chunks_in_shard_of(&[1, 0]), 6);
        assert_eq!(array.chunks_in_shard_of(&[7, 5]), 9);

        let rows: Vec<String> = array
            .list_chunk_dir(&[])
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(rows, ["0", "1", "2", "3", "4", "5", "6", "7"]);
        let files = array.list_chunk_dir(&[4]).await.unwrap();
        assert_eq!(files.len(), 6);

        // Emptying shard (0, 0) chunk by chunk erases it; the others stay.
        let removals = all
            .iter()
            .filter(|c| c[0] < 2 && c[1] < 3)
            .map(|c| (c.clone(), None))
            .collect();
        array.write_chunks(removals).await.unwrap();
        assert!(store.get("a/c/0/0", GetOptions::default()).await.unwrap().is_none());
        assert_eq!(array.locate(&[1, 2]).await.unwrap(), None);
        assert!(array.locate(&[2, 2]).await.unwrap().is_some());
    });
}

#[test]
fn a_grid_that_overhangs_the_shape_shows_no_chunk_past_it() {
    runtime().block_on(async {
        let store = Arc::new(MemoryStore::new());
        let doc = doc([60, 44], json!([[16, [24, 2]], [[24, 2]]]));
        let array = open_array(store.clone(), "", &doc, ShardOptions::default()).shared();
        assert_eq!(array.inner_grid(), [8, 6]);
        array
            .write_chunk(&[7, 5], Some(Bytes::from(chunk(&[7, 5]))))
            .await
            .unwrap();
        let shard = store.get("c/2/1", GetOptions::default()).await.unwrap().unwrap();
        assert_eq!(shard.bytes.len() as u64, 256 + 9 * 16 + 4);
        assert!(array.write_chunk(&[8, 0], None).await.is_err(), "outside the grid");
    });
}

#[test]
fn the_filesystem_shows_a_regular_unsharded_array_and_packs_writes() {
    runtime().block_on(async {
        let mut files = BTreeMap::new();
        files.insert("zarr.json".to_string(), br#"{"zarr_format":3,"node_type":"group"}"#.to_vec());
        files.insert("a/zarr.json".to_string(), zarr_python_doc());
        let unsharded = json!({"shape": [30, 20], "data_type": "int32",
            "chunk_grid": {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [[10, 5, 15], [20]]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "zarr_format": 3, "node_type": "array"});
        files.insert("u/zarr.json".to_string(), serde_json::to_vec(&unsharded).unwrap());
        files.insert("u/c/1/0".to_string(), vec![1; 5 * 20 * 4]);
        let store = memory_store(&files);
        let fs = writable_fs(store.clone());

        let view: Value = serde_json::from_slice(&fs_read_path(&fs, "a/zarr.json").await.unwrap()).unwrap();
        assert_eq!(view["chunk_grid"], json!({"name": "regular", "configuration": {"chunk_shape": [8, 8]}}));
        assert_eq!(view["codecs"], json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        assert_eq!(view["attributes"], json!({"t": 1}));

        fs_write_file(&fs, "a/c/7/5", &chunk(&[7, 5])).await.unwrap();
        fs_write_file(&fs, "a/c/0/0", &chunk(&[0, 0])).await.unwrap();
        assert_eq!(fs_read_path(&fs, "a/c/7/5").await.unwrap(), chunk(&[7, 5]));
        let stored = dump_store(store.as_ref()).await;
        assert_eq!(stored["a/c/2/1"].len(), 256 + 9 * 16 + 4);
        assert_eq!(stored["a/c/0/0"].len(), 256 + 6 * 16 + 4);

        // Shown as stored: the unsharded rectilinear array's files are its stored files.
        let (walked, _) = fs_walk(&fs).await;
        assert_eq!(walked["u/zarr.json"], files["u/zarr.json"]);
        assert_eq!(walked["u/c/1/0"], files["u/c/1/0"]);
        let chunk_files: Vec<&str> = walked.keys().filter(|k| k.starts_with("a/c/")).map(String::as_str).collect();
        assert_eq!(chunk_files, ["a/c/0/0", "a/c/7/5"]);

        // A resize past the grid's edges through the view grows the stored grid by one edge.
        let mut resized = view.clone();
        resized["shape"] = json!([70, 48]);
        fs_write_file(&fs, "a/zarr.json", &serde_json::to_vec(&resized).unwrap())
            .await
            .unwrap();
        let stored = store.get("a/zarr.json", GetOptions::default()).await.unwrap().unwrap();
        let stored: Value = serde_json::from_slice(&stored.bytes).unwrap();
        assert_eq!(stored["shape"], json!([70, 48]));
        assert_eq!(
            stored["chunk_grid"]["configuration"]["chunk_shapes"],
            json!([[16, [24, 2], 8], [[24, 2]]])
        );
        assert_eq!(stored["codecs"][0]["name"], json!("sharding_indexed"));
    });
}
