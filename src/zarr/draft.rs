//! The Zarr v3 drafts of 2020 and 2022: their layouts, their array metadata, and their
//! sharding storage transformer, as far as the unsharded view needs them.
//!
//! A draft hierarchy is recognised by its entry point, a `zarr.json` whose `zarr_format` is a
//! URI: `https://purl.org/zarr/spec/protocol/core/3.0` (the 2020 draft, as zarr-python
//! 2.14–2.18 write it) or `https://purl.org/zarr/spec/core/3.0` (the 2022 draft). Metadata and
//! data live apart:
//!
//! | | 2020 | 2022 |
//! |---|---|---|
//! | array `/a/b` | `meta/root/a/b.array.json` | `meta/a/b.array.json` |
//! | its chunk (0, 1) | `data/root/a/b/c0/1` | `data/a/b/c0/1` |
//! | root array | `meta/root.array.json`, `data/root/c0/1` | `meta/array.json`, `data/c0/1` |
//!
//! The 2022 text contradicts itself: its examples put data under `data/<path>/`, while its
//! sharding transformer (§2.3.1) adapts keys starting with `data/root`. Both are accepted: a
//! data directory `data/root/<path>` of a 2022 hierarchy belongs to the array at `/root/<path>`
//! if there is one, else to the array at `/<path>`.
//!
//! The sharding storage transformer (`indexed`, `chunks_per_shard`) keeps the array's chunk
//! grid as the inner chunks' grid and stores each shard under the key its shard coordinates
//! would have as a chunk; the index is at the end, 16 bytes per chunk (offset and length,
//! little-endian), no checksum, `2^64 - 1` twice for a missing chunk. Unsharding it is
//! removing the transformer from the metadata: nothing else changes.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::zarr::grid::checked_product;
use crate::zarr::json;
use crate::zarr::key_encoding::{ChunkKeyEncoding, Separator};
use crate::zarr::metadata::{ArrayMetadata, CodecSpec};
use crate::zarr::sharding::{Endian, IndexCodec, IndexLocation, ShardLayout, ShardLevel, ShardingConfig};
use crate::zarr::translate::Refusal;
use crate::zarr::ZarrError;

/// The entry points' `zarr_format` URIs.
const URI_2020: &str = "https://purl.org/zarr/spec/protocol/core/3.0";
const URI_2022: &str = "https://purl.org/zarr/spec/core/3.0";

/// Which draft a hierarchy follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftLayout {
    Y2020,
    Y2022,
}

/// A draft array's document, as far as the view interprets it.
#[derive(Debug, Clone)]
pub struct DraftArray {
    /// In the form the sharding layer takes (shape, chunk key encoding; `chunk_shape` is the
    /// shard shape when sharded).
    pub meta: ArrayMetadata,
    /// The sharding, if the array has the transformer.
    pub sharding: Option<ShardLayout>,
}

impl DraftLayout {
    /// The draft an entry point `zarr.json` declares, if it is one. Only `zarr_format` is
    /// decoded; the other members are skipped (their JSON syntax checked), never built: the
    /// root document of a final hierarchy may carry the consolidated metadata of ten thousand
    /// arrays, and a parsed tree of it takes five times its size.
    pub fn of_entry_point(bytes: &[u8]) -> Option<DraftLayout> {
        let EntryPoint(format) = serde_json::from_slice(bytes).ok()?;
        match format?.as_str()? {
            URI_2020 => Some(DraftLayout::Y2020),
            URI_2022 => Some(DraftLayout::Y2022),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DraftLayout::Y2020 => "draft 2020",
            DraftLayout::Y2022 => "draft 2022",
        }
    }

    /// The metadata key of the array at hierarchy path `path` (`""` for the root).
    fn array_key(self, path: &str) -> String {
        match (self, path) {
            (DraftLayout::Y2020, "") => "meta/root.array.json".to_string(),
            (DraftLayout::Y2020, p) => format!("meta/root/{p}.array.json"),
            (DraftLayout::Y2022, "") => "meta/array.json".to_string(),
            (DraftLayout::Y2022, p) => format!("meta/{p}.array.json"),
        }
    }

    /// The metadata keys, in order of preference, of the array whose data directory is `dir`
    /// (a store path without a trailing `/`); none outside the data tree.
    pub fn array_keys_for_data_dir(self, dir: &str) -> Vec<String> {
        let Some(path) = below(dir, self.data_root()) else {
            return Vec::new();
        };
        let mut keys = vec![self.array_key(path)];
        if self == DraftLayout::Y2022 {
            keys.extend(below(path, "root").map(|p| self.array_key(p)));
        }
        keys
    }

    /// The directory all data keys are under.
    fn data_root(self) -> &'static str {
        match self {
            DraftLayout::Y2020 => "data/root",
            DraftLayout::Y2022 => "data",
        }
    }

    /// The data directory of the array whose metadata key is `key`, if `key` is an array's
    /// metadata key.
    pub fn data_dir_of_array_key(self, key: &str) -> Option<String> {
        let data_root = self.data_root();
        let (root_key, meta_dir) = match self {
            DraftLayout::Y2020 => ("meta/root.array.json", "meta/root/"),
            DraftLayout::Y2022 => ("meta/array.json", "meta/"),
        };
        if key == root_key {
            return Some(data_root.to_string());
        }
        let path = key.strip_prefix(meta_dir)?.strip_suffix(".array.json")?;
        (!path.is_empty() && !path.ends_with('/')).then(|| format!("{data_root}/{path}"))
    }
}

/// The path of `dir` below the directory `root` (`""` for `root` itself), if it is there.
fn below<'a>(dir: &'a str, root: &str) -> Option<&'a str> {
    match dir.strip_prefix(root)? {
        "" => Some(""),
        rest => rest.strip_prefix('/'),
    }
}

/// Whether a storage transformer entry is the sharding transformer (zarr-python 2.18 writes
/// `extension` + `type: indexed`; the 2022 text shows `name: sharding`).
fn is_sharding(t: &Map<String, Value>) -> bool {
    let by_extension = t
        .get("extension")
        .and_then(Value::as_str)
        .is_some_and(|uri| uri.contains("storage_transformers/sharding/"))
        && t.get("type").and_then(Value::as_str).is_none_or(|ty| ty == "indexed");
    by_extension || t.get("name").and_then(Value::as_str) == Some("sharding")
}

/// The codecs a draft array's chunks are encoded with (2020: `compressor`, 2022: `codecs`),
/// named by the URI's name segment (`…/codec/zlib/1.0` -> `zlib`).
fn draft_codecs(doc: &Map<String, Value>) -> Vec<CodecSpec> {
    let specs = doc
        .get("codecs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .chain(doc.get("compressor").filter(|c| !c.is_null()).cloned());
    specs
        .filter_map(|raw| {
            let uri = raw.get("codec").or_else(|| raw.get("type"))?.as_str()?.to_string();
            let mut segments = uri.trim_end_matches('/').rsplit('/');
            let name = match (segments.next(), segments.next()) {
                (Some(version), Some(name)) if version.starts_with(|c: char| c.is_ascii_digit()) => name,
                (Some(last), _) => last,
                _ => uri.as_str(),
            };
            Some(CodecSpec {
                name: name.to_string(),
                configuration: raw.get("configuration").cloned().unwrap_or(Value::Null),
                raw: raw.clone(),
            })
        })
        .collect()
}

/// Parse a draft array document.
pub fn parse_draft_array(bytes: &[u8]) -> Result<DraftArray, ZarrError> {
    let raw: Value = serde_json::from_slice(bytes).map_err(|e| ZarrError::Json { reason: e.to_string() })?;
    let doc = json::object(&raw, "array metadata")?;
    let shape = json::u64_array(json::required(doc, "shape", "shape")?, "shape")?;
    checked_product(&shape)?;
    let grid = json::object(json::required(doc, "chunk_grid", "chunk_grid")?, "chunk_grid")?;
    if let Some(kind) = grid.get("type").and_then(Value::as_str).filter(|t| *t != "regular") {
        return Err(ZarrError::unsupported("chunk_grid.type", format!("{kind:?}")));
    }
    let chunk_shape = json::positive_u64_array(
        json::required(grid, "chunk_shape", "chunk_grid.chunk_shape")?,
        "chunk_grid.chunk_shape",
    )?;
    if chunk_shape.len() != shape.len() {
        return Err(ZarrError::invalid(
            "chunk_grid.chunk_shape",
            format!("has {} dimensions but shape has {}", chunk_shape.len(), shape.len()),
        ));
    }
    let separator = match grid.get("separator") {
        None => Separator::Slash,
        Some(s) => Separator::from_json(s, "chunk_grid.separator")?,
    };
    let transformers = match doc.get("storage_transformers") {
        None | Some(Value::Null) => &[][..],
        Some(v) => json::array(v, "storage_transformers")?,
    };
    let mut sharding = None;
    for (i, t) in transformers.iter().enumerate() {
        let field = format!("storage_transformers[{i}]");
        let t = json::object(t, &field)?;
        if !is_sharding(t) || sharding.is_some() {
            return Err(ZarrError::unsupported(
                field,
                "a storage transformer other than one sharding",
            ));
        }
        let config = json::object(json::required(t, "configuration", &field)?, &field)?;
        let per_shard = json::positive_u64_array(
            json::required(config, "chunks_per_shard", "chunks_per_shard")?,
            "chunks_per_shard",
        )?;
        if per_shard.len() != shape.len() {
            return Err(ZarrError::invalid(
                "chunks_per_shard",
                "must have one entry per dimension",
            ));
        }
        let shard_shape = chunk_shape
            .iter()
            .zip(&per_shard)
            .map(|(c, k)| c.checked_mul(*k).ok_or_else(|| ZarrError::overflow("shard shape")))
            .collect::<Result<Vec<_>, _>>()?;
        let config = ShardingConfig {
            chunk_shape: chunk_shape.clone(),
            codecs: Vec::new(),
            index_codec: IndexCodec {
                endian: Endian::Little,
                crc32c: false,
            },
            index_location: IndexLocation::End,
        };
        sharding = Some(ShardLayout {
            levels: vec![ShardLevel::new(&shard_shape, &config)?],
            outer_codecs: Vec::new(),
            inner_chunk_shape: chunk_shape.clone(),
            inner_codecs: draft_codecs(doc),
            rectilinear: None,
        });
    }
    let stored_chunk_shape = match &sharding {
        Some(layout) => layout.levels[0].shard_shape.clone(),
        None => chunk_shape,
    };
    Ok(DraftArray {
        meta: ArrayMetadata {
            shape,
            data_type: doc.get("data_type").cloned().unwrap_or(Value::Null),
            chunk_shape: stored_chunk_shape,
            rectilinear: None,
            chunk_key_encoding: ChunkKeyEncoding::Draft(separator),
            codecs: draft_codecs(doc),
            fill_value: doc.get("fill_value").cloned().unwrap_or(Value::Null),
            storage_transformers: Vec::new(),
            raw: raw.clone(),
        },
        sharding,
    })
}

/// The document the unsharded view shows for a sharded draft array: the stored one without
/// its sharding transformer (the field itself goes when it held nothing else), every other
/// field as stored, in the stored order.
pub fn rewrite_draft_unsharded(raw: &Value) -> Vec<u8> {
    let mut doc = raw.clone();
    if let Some(obj) = doc.as_object_mut() {
        obj.remove("storage_transformers");
    }
    serde_json::to_vec_pretty(&doc).unwrap_or_default()
}

/// A view's draft array document written back: the stored sharding transformer restored.
/// Refused (with why) when the write changes what the stored shards depend on: the chunk
/// grid, the data type, the compressor or codecs, or declares a transformer itself.
pub fn translate_draft_array(stored: &Value, written: &[u8]) -> Result<Vec<u8>, Refusal> {
    let mut doc: Value = serde_json::from_slice(written).map_err(|e| Refusal::NotJson(e.to_string()))?;
    let obj = doc.as_object_mut().ok_or(Refusal::NotAnObject)?;
    if obj
        .get("storage_transformers")
        .is_some_and(|t| t.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(Refusal::ChangesSharding("storage_transformers"));
    }
    for field in ["chunk_grid", "data_type", "compressor", "codecs", "chunk_memory_layout"] {
        if obj.get(field) != stored.get(field) {
            return Err(Refusal::ChangesSharding(field));
        }
    }
    obj.remove("storage_transformers");
    if let Some(t) = stored.get("storage_transformers") {
        obj.insert("storage_transformers".into(), t.clone());
    }
    Ok(serde_json::to_vec_pretty(&doc).unwrap_or_default())
}

/// Whether a draft array document written through the view declares sharding (its client
/// will write whole shards).
pub fn declares_sharding(written: &[u8]) -> bool {
    serde_json::from_slice::<Value>(written)
        .ok()
        .and_then(|d| d.get("storage_transformers").cloned())
        .and_then(|t| t.as_array().cloned())
        .is_some_and(|t| t.iter().filter_map(Value::as_object).any(is_sharding))
}

/// The `zarr_format` member of a JSON object (the last one if it is repeated, as a parsed
/// [`Value`] keeps it), every other member skipped.
struct EntryPoint(Option<Value>);

impl<'de> Deserialize<'de> for EntryPoint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EntryPointVisitor)
    }
}

struct EntryPointVisitor;

impl<'de> Visitor<'de> for EntryPointVisitor {
    type Value = EntryPoint;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EntryPoint, A::Error> {
        let mut format = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "zarr_format" {
                format = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(EntryPoint(format))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn zarr218_array() -> Value {
        json!({"attributes": {"a": 1},
               "chunk_grid": {"chunk_shape": [3, 2], "separator": "/", "type": "regular"},
               "chunk_memory_layout": "C",
               "compressor": {"codec": "https://purl.org/zarr/spec/codec/zlib/1.0", "configuration": {"level": 1}},
               "data_type": "<i4", "extensions": [], "fill_value": -1, "shape": [10, 9],
               "storage_transformers": [{"configuration": {"chunks_per_shard": [2, 2]},
                   "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
                   "type": "indexed"}]})
    }

    #[test]
    fn entry_points() {
        let p = |uri: &str| DraftLayout::of_entry_point(json!({"zarr_format": uri}).to_string().as_bytes());
        assert_eq!(p(URI_2020), Some(DraftLayout::Y2020));
        assert_eq!(p(URI_2022), Some(DraftLayout::Y2022));
        assert_eq!(
            DraftLayout::of_entry_point(br#"{"zarr_format": 3, "node_type": "group"}"#),
            None
        );
        assert_eq!(DraftLayout::of_entry_point(b"not json"), None);
        // Every member is still checked: a document that is not JSON declares nothing.
        let bad = format!(r#"{{"zarr_format": "{URI_2020}", "x": [1, }}"#);
        assert_eq!(DraftLayout::of_entry_point(bad.as_bytes()), None);
        let trailing = format!(r#"{{"zarr_format": "{URI_2020}"}} x"#);
        assert_eq!(DraftLayout::of_entry_point(trailing.as_bytes()), None);
        for top in [&b"[1]"[..], b"\"s\"", b"3", b"null"] {
            assert_eq!(DraftLayout::of_entry_point(top), None);
        }
        // Members around it are skipped whatever they hold; the last `zarr_format` counts.
        let nested = format!(
            r#"{{"a": {{"zarr_format": 3, "b": [{{}}, [null, 1.5e300, "\u00e9"]]}}, "zarr_format": "{URI_2022}", "c": true}}"#
        );
        assert_eq!(DraftLayout::of_entry_point(nested.as_bytes()), Some(DraftLayout::Y2022));
        let twice = format!(r#"{{"zarr_format": "{URI_2022}", "zarr_format": 3}}"#);
        assert_eq!(DraftLayout::of_entry_point(twice.as_bytes()), None);
        assert_eq!(DraftLayout::of_entry_point(br#"{"node_type": "group"}"#), None);
    }

    #[test]
    fn keys_of_both_layouts() {
        let (y20, y22) = (DraftLayout::Y2020, DraftLayout::Y2022);
        assert_eq!(
            y20.array_keys_for_data_dir("data/root/a/b"),
            ["meta/root/a/b.array.json"]
        );
        assert_eq!(y20.array_keys_for_data_dir("data/root"), ["meta/root.array.json"]);
        assert!(y20.array_keys_for_data_dir("data/rootx").is_empty());
        assert!(y20.array_keys_for_data_dir("meta/root").is_empty());
        assert_eq!(y22.array_keys_for_data_dir("data/a/b"), ["meta/a/b.array.json"]);
        assert_eq!(y22.array_keys_for_data_dir("data"), ["meta/array.json"]);
        assert_eq!(
            y22.array_keys_for_data_dir("data/root/a"),
            ["meta/root/a.array.json", "meta/a.array.json"]
        );
        assert_eq!(
            y22.array_keys_for_data_dir("data/root"),
            ["meta/root.array.json", "meta/array.json"]
        );
        assert_eq!(
            y20.data_dir_of_array_key("meta/root/a/b.array.json").as_deref(),
            Some("data/root/a/b")
        );
        assert_eq!(
            y20.data_dir_of_array_key("meta/root.array.json").as_deref(),
            Some("data/root")
        );
        assert_eq!(
            y22.data_dir_of_array_key("meta/a.array.json").as_deref(),
            Some("data/a")
        );
        assert_eq!(y22.data_dir_of_array_key("meta/array.json").as_deref(), Some("data"));
        assert_eq!(y20.data_dir_of_array_key("meta/root/a.group.json"), None);
    }

    #[test]
    fn a_sharded_array_of_zarr_218() {
        let raw = zarr218_array();
        let a = parse_draft_array(raw.to_string().as_bytes()).unwrap();
        let layout = a.sharding.as_ref().unwrap();
        assert_eq!(layout.inner_chunk_shape, [3, 2]);
        assert_eq!(layout.levels[0].shard_shape, [6, 4]);
        assert_eq!(layout.levels[0].chunks_per_shard, [2, 2]);
        assert_eq!(layout.levels[0].index_size(), 64);
        assert_eq!(a.meta.chunk_key_encoding, ChunkKeyEncoding::Draft(Separator::Slash));
        assert_eq!(a.meta.chunk_shape, [6, 4]);
        assert_eq!(a.meta.codecs[0].name, "zlib");
        assert_eq!(layout.inner_codecs[0].name, "zlib");
        let shown: Value = serde_json::from_slice(&rewrite_draft_unsharded(&raw)).unwrap();
        assert!(shown.get("storage_transformers").is_none());
        assert_eq!(shown["chunk_grid"], raw["chunk_grid"]);
        assert_eq!(shown["attributes"], raw["attributes"]);
        // Written back: the transformer returns; attributes may change, the grid may not.
        let mut edited = shown.clone();
        edited["attributes"]["b"] = json!(2);
        let back: Value =
            serde_json::from_slice(&translate_draft_array(&raw, edited.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(back["storage_transformers"], raw["storage_transformers"]);
        assert_eq!(back["attributes"]["b"], 2);
        edited["chunk_grid"]["chunk_shape"] = json!([6, 4]);
        assert!(translate_draft_array(&raw, edited.to_string().as_bytes()).is_err());
        assert!(declares_sharding(raw.to_string().as_bytes()));
        assert!(!declares_sharding(&rewrite_draft_unsharded(&raw)));
    }

    #[test]
    fn the_2022_form_and_refusals() {
        let mut raw = zarr218_array();
        raw["storage_transformers"] = json!([{"name": "sharding", "configuration": {"chunks_per_shard": [1, 3]}}]);
        let a = parse_draft_array(raw.to_string().as_bytes()).unwrap();
        assert_eq!(a.sharding.unwrap().levels[0].shard_shape, [3, 6]);
        raw["storage_transformers"] = json!([{"extension": "https://example.org/other", "type": "x"}]);
        assert!(parse_draft_array(raw.to_string().as_bytes()).is_err());
        raw.as_object_mut().unwrap().remove("storage_transformers");
        let plain = parse_draft_array(raw.to_string().as_bytes()).unwrap();
        assert!(plain.sharding.is_none() && plain.meta.chunk_shape == [3, 2]);
        for bad in [
            json!({"shape": [4]}),
            json!([1]),
            json!({"shape": [4], "chunk_grid": {"chunk_shape": [0]}}),
        ] {
            assert!(parse_draft_array(bad.to_string().as_bytes()).is_err(), "{bad}");
        }
    }
}
