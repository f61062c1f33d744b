//! Listings of the v2 view: an array's `.zarray`, `.zattrs` and chunk files under their v2
//! names (from the shard indexes, or the stored chunk keys renamed), a group's `.zgroup` and
//! `.zattrs` instead of its `zarr.json`, and the root's consolidated `.zmetadata`, built by a
//! walk of the groups (arrays are not descended into).

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{doc, v2_key, ChunkSource, V2ArrayNode, V2Node};
use crate::store::key::dir_prefix;
use crate::store::{DirEntry, EntryKind, GetOptions};
use crate::view::{relative, Node, Source, View, ViewError, METADATA};
use crate::zarr::key_encoding::{parse_coord, ChunkKeyEncoding, ChunkPath, Separator};

impl View {
    /// The entries of directory `dir` in the v2 view.
    pub(in crate::view) async fn v2_list(&self, dir: &str) -> Result<Vec<(String, Node)>, ViewError> {
        if let Some(node) = self.v2_array_above(dir).await? {
            let V2Node::Array(array) = &*node else {
                return Ok(Vec::new());
            };
            let rel = relative(&array.dir, dir);
            let prefix = if rel.is_empty() {
                Vec::new()
            } else {
                match ChunkKeyEncoding::V2(array.separator).classify(rel, array.ndim) {
                    ChunkPath::Dir(prefix) => prefix,
                    _ => return Err(ViewError::NotADirectory(dir.to_string())),
                }
            };
            let mut out = self.v2_chunk_entries(array, &prefix).await?;
            if rel.is_empty() {
                let key = format!("{}{METADATA}", dir_prefix(dir));
                out.push((".zarray".into(), Node::rewritten(array.zarray.clone(), dir, &key, None)));
                out.push((".zattrs".into(), Node::rewritten(array.zattrs.clone(), dir, &key, None)));
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(out);
        }
        let prefix = dir_prefix(dir);
        let mut out = Vec::new();
        for entry in self.store.list_dir(&prefix).await? {
            match entry.kind {
                EntryKind::Dir => {
                    let child = format!("{prefix}{}", entry.name);
                    if !matches!(*self.v2_node(&child).await?, V2Node::Hidden) {
                        out.push((entry.name.clone(), Node::dir()));
                    }
                }
                EntryKind::File { size } if entry.name != METADATA => out.push((
                    entry.name.clone(),
                    Node {
                        size,
                        mtime_ns: entry.mtime_ns,
                        source: Source::Stored {
                            key: format!("{prefix}{}", entry.name),
                            version: None,
                        },
                    },
                )),
                EntryKind::File { .. } => {}
            }
        }
        let key = format!("{prefix}{METADATA}");
        if let V2Node::Group { zgroup, zattrs } = &*self.v2_node(dir).await? {
            out.push((".zgroup".into(), Node::rewritten(zgroup.clone(), dir, &key, None)));
            out.push((".zattrs".into(), Node::rewritten(zattrs.clone(), dir, &key, None)));
        }
        if dir.is_empty() {
            out.push((
                ".zmetadata".into(),
                Node::rewritten(self.v2_zmetadata().await?, "", &key, None),
            ));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The chunk files and directories of an array's chunk directory with leading coordinates
    /// `prefix`, under their v2 names.
    async fn v2_chunk_entries(&self, array: &V2ArrayNode, prefix: &[u64]) -> Result<Vec<(String, Node)>, ViewError> {
        let mut out = Vec::new();
        if array.ndim == 0 {
            // One chunk, `0` in v2 (`c` or `0` in v3): found as a lookup would.
            out.extend(self.v2_chunk_node(array, &[]).await?.map(|n| ("0".to_string(), n)));
            return Ok(out);
        }
        let leaf = array.separator == Separator::Dot || prefix.len() + 1 == array.ndim;
        match &array.source {
            ChunkSource::Sharded(sharded) => {
                let shards = &sharded.array;
                let entries: Vec<(Vec<u64>, DirEntry)> = if array.separator == Separator::Slash && array.ndim > 0 {
                    let listed = shards.list_chunk_dir(prefix).await?;
                    listed
                        .into_iter()
                        .filter_map(|e| {
                            let c = parse_coord(&e.name)?;
                            Some(([prefix, &[c]].concat(), e))
                        })
                        .collect()
                } else {
                    let mut all = Vec::new();
                    for shard in shards.stored_shards().await? {
                        for (coords, loc) in shards.chunks_of_shard(&shard).await? {
                            all.push((coords, DirEntry::file(String::new(), loc.nbytes, loc.mtime_ns)));
                        }
                    }
                    all
                };
                for (coords, entry) in entries {
                    let name = if leaf {
                        v2_key(&coords, array.separator)
                    } else {
                        entry.name.clone()
                    };
                    let name = if array.separator == Separator::Slash && leaf {
                        name.rsplit('/').next().unwrap_or_default().to_string()
                    } else {
                        name
                    };
                    let node = match entry.kind {
                        EntryKind::File { .. } if array.transcode.is_some() => {
                            match self.v2_chunk_node(array, &coords).await? {
                                Some(node) => node,
                                None => continue,
                            }
                        }
                        EntryKind::File { size } => Node {
                            size,
                            mtime_ns: entry.mtime_ns,
                            source: Source::Chunk {
                                array: shards.clone(),
                                coords: coords.into(),
                                at: None,
                            },
                        },
                        EntryKind::Dir => Node::dir(),
                    };
                    out.push((name, node));
                }
            }
            ChunkSource::Stored { encoding } => {
                let base = dir_prefix(&array.dir);
                let stored_dir = format!("{base}{}", encoding.dir_of(prefix));
                for entry in self.store.list_dir(&stored_dir).await? {
                    let rel = format!("{}{}", encoding.dir_of(prefix), entry.name);
                    let (name, coords) = match encoding.classify(&rel, array.ndim) {
                        ChunkPath::Chunk(coords) => {
                            let key = v2_key(&coords, array.separator);
                            (key.rsplit('/').next().unwrap_or_default().to_string(), Some(coords))
                        }
                        ChunkPath::Dir(_) => (entry.name.clone(), None),
                        ChunkPath::Other => continue,
                    };
                    let node = match (entry.kind, coords) {
                        (EntryKind::File { .. }, Some(coords)) if array.transcode.is_some() => {
                            match self.v2_chunk_node(array, &coords).await? {
                                Some(node) => node,
                                None => continue,
                            }
                        }
                        (EntryKind::File { size }, Some(_)) => Node {
                            size,
                            mtime_ns: entry.mtime_ns,
                            source: Source::Stored {
                                key: format!("{base}{rel}"),
                                version: None,
                            },
                        },
                        (EntryKind::Dir, None) => Node::dir(),
                        _ => continue,
                    };
                    out.push((name, node));
                }
            }
        }
        Ok(out)
    }

    /// The root's consolidated `.zmetadata`: every group's and array's v2 documents (walked
    /// at most once per TTL).
    pub(super) async fn v2_zmetadata(&self) -> Result<Bytes, ViewError> {
        {
            let kept = self.v2.zmetadata.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, bytes)) = kept.as_ref().filter(|(at, _)| at.elapsed() < self.v2.ttl) {
                return Ok(bytes.clone());
            }
        }
        let bytes = self.walk_zmetadata().await?;
        *self.v2.zmetadata.lock().unwrap_or_else(|e| e.into_inner()) = Some((std::time::Instant::now(), bytes.clone()));
        Ok(bytes)
    }

    async fn walk_zmetadata(&self) -> Result<Bytes, ViewError> {
        let mut metadata = Map::new();
        let mut pending = vec![String::new()];
        while let Some(dir) = pending.pop() {
            let node = self.v2_node(&dir).await?;
            let at = |name: &str| format!("{}{name}", dir_prefix(&dir));
            let parse = |b: &Bytes| serde_json::from_slice::<Value>(b).unwrap_or(Value::Null);
            match &*node {
                V2Node::Array(a) => {
                    metadata.insert(at(".zarray"), parse(&a.zarray));
                    metadata.insert(at(".zattrs"), parse(&a.zattrs));
                    continue;
                }
                V2Node::Hidden => continue,
                V2Node::Group { zgroup, zattrs } => {
                    metadata.insert(at(".zgroup"), parse(zgroup));
                    metadata.insert(at(".zattrs"), parse(zattrs));
                }
                V2Node::Plain => {
                    // Zarr v2 nodes stored as such are shown as stored: their own documents.
                    let mut is_array = false;
                    for name in [".zarray", ".zgroup", ".zattrs"] {
                        if let Some(got) = self.store.get(&at(name), GetOptions::default()).await? {
                            metadata.insert(at(name), parse(&got.bytes));
                            is_array |= name == ".zarray";
                        }
                    }
                    if is_array {
                        continue;
                    }
                }
            }
            for entry in self.store.list_dir(&dir_prefix(&dir)).await? {
                if entry.kind == EntryKind::Dir {
                    pending.push(at(&entry.name));
                }
            }
        }
        Ok(doc(&json!({"metadata": metadata, "zarr_consolidated_format": 1})))
    }
}
