//! Entry points for fuzzing every parser of stored or user-supplied bytes. Each takes arbitrary
//! bytes and must neither panic nor loop; where a round trip is defined (a shard unpacked and
//! packed again, a chunk key decoded and encoded again, a view document translated back
//! unchanged) it is checked, and a broken one panics, which is what the fuzzer reports.
//!
//! The targets in `fuzz/` (cargo-fuzz, nightly; `scripts/dev/fuzz.sh`) call these, and an ordinary
//! test on stable (`tests/fuzz_corpus.rs`) feeds each the files of its corpus under
//! `fuzz/corpus/<name>/`, so every crash once found stays a regression test.

use serde_json::Value;

use crate::zarr::bytes_codecs;
use crate::zarr::chunk_keys::KeyGrid;
use crate::zarr::consolidated::rewrite_group;
use crate::zarr::draft::{parse_draft_array, rewrite_draft_unsharded, translate_draft_array, DraftLayout};
use crate::zarr::key_encoding::{ChunkKeyEncoding, ChunkPath, Separator};
use crate::zarr::legacy::parse_legacy_array;
use crate::zarr::metadata::{parse_codecs, parse_zarr_json, NodeMetadata};
use crate::zarr::shard_index::ShardIndex;
use crate::zarr::shard_pack::{pack, unpack};
use crate::zarr::sharding::{analyse, rewrite_unsharded, Endian, IndexCodec, Sharding};
use crate::zarr::transcode::{Transcode, V2Compressor};
use crate::zarr::translate::translate_array;
use crate::zarr::v2_meta::v2_array;

/// A fuzz target: takes any bytes.
pub type Target = fn(&[u8]);

/// The fuzz targets, by name (the directory of each corpus).
pub const TARGETS: [(&str, Target); 8] = [
    ("shard_index", shard_index),
    ("shard_pack", shard_pack),
    ("zarr_json", zarr_json),
    ("draft", draft),
    ("legacy", legacy),
    ("chunk_key", chunk_key),
    ("bytes_codecs", bytes_codecs_target),
    ("mount_options", mount_options),
];

/// The first byte chooses the index codec (byte order, checksum) and the next two the number
/// of chunks; the rest is decoded as an index.
pub fn shard_index(data: &[u8]) {
    let [flags, a, b, rest @ ..] = data else { return };
    let codec = IndexCodec {
        endian: if flags & 1 == 0 { Endian::Little } else { Endian::Big },
        crc32c: flags & 2 != 0,
    };
    let n = u64::from(u16::from_le_bytes([*a, *b]));
    if let Ok(index) = ShardIndex::decode(rest, n, codec, u64::MAX / 2) {
        let again = ShardIndex::decode(&index.encode(codec), n, codec, u64::MAX / 2);
        assert_eq!(
            again.ok().as_ref(),
            Some(&index),
            "an index encodes to what it decodes from"
        );
    }
}

/// A `zarr.json` whose sharding layout unpacks the rest of the input as a shard; what unpacks
/// packs again to a shard that unpacks to the same chunks.
pub fn shard_pack(data: &[u8]) {
    let Some(split) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let (doc, shard) = (&data[..split], &data[split + 1..]);
    let Ok(NodeMetadata::Array(meta)) = parse_zarr_json(doc) else {
        return;
    };
    let Sharding::Sharded(layout) = analyse(&meta) else {
        return;
    };
    if layout.levels.iter().any(|l| l.num_chunks() > 4096) {
        return;
    }
    let Ok(content) = unpack(shard, &layout.levels) else {
        return;
    };
    if let Ok(Some(packed)) = pack(&content, &layout.levels) {
        let again = unpack(&packed, &layout.levels).expect("a packed shard unpacks");
        assert_eq!(again.count(), content.count(), "packing keeps every chunk");
    }
}

/// A node document: parsed, analysed, rewritten for the view, translated back unchanged, and
/// described as v2.
pub fn zarr_json(data: &[u8]) {
    match parse_zarr_json(data) {
        Ok(NodeMetadata::Array(meta)) => {
            let _ = KeyGrid::from_v3(&meta);
            let (chunk_shape, codecs) = match analyse(&meta) {
                Sharding::Sharded(layout) => {
                    let view = rewrite_unsharded(&meta, &layout);
                    let back = translate_array(data, &view, &view);
                    assert!(
                        matches!(back, Ok(None)),
                        "the view's own document translates to no change"
                    );
                    locate_round_trip(&meta, &layout);
                    (layout.inner_chunk_shape.clone(), layout.inner_codecs.clone())
                }
                _ => (meta.chunk_shape.clone(), meta.codecs.clone()),
            };
            if chunk_shape.iter().product::<u64>() <= 1 << 16 {
                if let Ok(plan) = Transcode::plan(&codecs, &meta.data_type, &chunk_shape, V2Compressor::None) {
                    let _ = plan.run(data);
                }
            }
            let _ = v2_array(&meta, &chunk_shape, &codecs, Separator::Dot, &Value::Null);
        }
        Ok(NodeMetadata::Group { mut raw }) => {
            let _ = rewrite_group(&mut raw, &|_| false);
        }
        Err(_) => {}
    }
}

/// The first and last inner chunks of the view's grid (and one in the middle) are found in a
/// stored shard whose level holds their index, and map back to themselves: the arithmetic of
/// regular and rectilinear shard grids alike.
fn locate_round_trip(meta: &crate::zarr::metadata::ArrayMetadata, layout: &crate::zarr::sharding::ShardLayout) {
    let Ok(grid) = crate::zarr::grid::grid_shape(&meta.shape, &layout.inner_chunk_shape) else {
        return;
    };
    if grid.contains(&0) {
        return;
    }
    let corners = [
        vec![0; grid.len()],
        grid.iter().map(|g| g / 2).collect(),
        grid.iter().map(|g| g - 1).collect::<Vec<u64>>(),
    ];
    for coords in corners {
        let Some(loc) = layout.locate(&coords) else {
            continue;
        };
        let level = layout.level0(&loc.shard_coords).expect("a located shard has a level");
        assert!(
            loc.per_level_index[0] < level.num_chunks(),
            "index entry inside its shard"
        );
        assert_eq!(
            layout.inner_coords(&loc.shard_coords, &loc.per_level_index),
            Some(coords),
            "a located chunk maps back"
        );
    }
}

/// A draft entry point or array document, rewritten and translated back.
pub fn draft(data: &[u8]) {
    let _ = DraftLayout::of_entry_point(data);
    if let Ok(array) = parse_draft_array(data) {
        let shown = rewrite_draft_unsharded(&array.meta.raw);
        let back = translate_draft_array(&array.meta.raw, &shown);
        assert!(back.is_ok(), "the view's draft document translates back");
    }
}

/// Zarr v2 and v1 array documents.
pub fn legacy(data: &[u8]) {
    let _ = parse_legacy_array(data, false);
    let _ = parse_legacy_array(data, true);
    if let Ok(doc) = serde_json::from_slice::<Value>(data) {
        let _ = KeyGrid::from_zarray(&doc);
    }
}

/// The first byte chooses an encoding and a number of dimensions; the rest is a key. A key
/// that decodes encodes back to itself.
pub fn chunk_key(data: &[u8]) {
    let [flags, rest @ ..] = data else { return };
    let sep = if flags & 1 == 0 {
        Separator::Slash
    } else {
        Separator::Dot
    };
    let encoding = match (flags >> 1) % 3 {
        0 => ChunkKeyEncoding::Default(sep),
        1 => ChunkKeyEncoding::V2(sep),
        _ => ChunkKeyEncoding::Draft(sep),
    };
    let ndim = usize::from(flags >> 3);
    let Ok(key) = std::str::from_utf8(rest) else { return };
    if let Some(coords) = encoding.decode(key, ndim) {
        assert_eq!(encoding.encode(&coords), key, "keys are canonical");
    }
    if let ChunkPath::Dir(prefix) = encoding.classify(key, ndim) {
        assert!(prefix.len() < ndim);
    }
}

/// A codec chain (JSON, up to the first zero byte) decoding the rest, bounded.
pub fn bytes_codecs_target(data: &[u8]) {
    let Some(split) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let Ok(chain) = serde_json::from_slice::<Value>(&data[..split]) else {
        return;
    };
    let Ok(codecs) = parse_codecs(&chain, "codecs") else {
        return;
    };
    if let Ok(out) = bytes_codecs::decode(&codecs, &data[split + 1..], 1 << 20) {
        assert!(out.len() <= 1 << 20, "decoding is bounded");
    }
}

/// Mount options as `-o` lists and the mount helper's arguments.
pub fn mount_options(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let argv = std::iter::once("zarrfs")
        .chain(text.split('\n'))
        .map(std::ffi::OsString::from)
        .collect();
    let _ = crate::cli::mount_options::expand(argv, &crate::cli::mount_long_options());
}
