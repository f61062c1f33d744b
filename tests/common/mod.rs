//! Shared helpers of the integration tests: build sharded Zarr v3 arrays *in Rust* (metadata
//! and shards assembled with `ShardIndex::encode`, nested sharding included), keep the expected
//! unsharded model next to them, and put both into a `MemoryStore` or a directory.
//!
//! Every test binary includes this module and uses a different part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};

use zarrfs::shard::{IndexCache, ShardOptions, ShardedArray};
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{
    ByteRange, Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreResult, Version,
};
use zarrfs::zarr::key_encoding::{ChunkKeyEncoding, Separator};
use zarrfs::zarr::metadata::{parse_zarr_json, NodeMetadata};
use zarrfs::zarr::shard_index::{ChunkRange, ShardIndex};
use zarrfs::zarr::sharding::{analyse, Endian, IndexCodec, IndexLocation, Sharding};

pub type Coords = Vec<u64>;
/// Inner chunk coordinates -> encoded bytes.
pub type Chunks = BTreeMap<Coords, Vec<u8>>;

pub const DEF_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::Default(Separator::Slash);
pub const DEF_DOT: ChunkKeyEncoding = ChunkKeyEncoding::Default(Separator::Dot);
pub const V2_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::V2(Separator::Slash);
pub const V2_DOT: ChunkKeyEncoding = ChunkKeyEncoding::V2(Separator::Dot);
pub const ALL_ENCODINGS: [ChunkKeyEncoding; 4] = [DEF_SLASH, DEF_DOT, V2_SLASH, V2_DOT];

pub const LE_CRC: IndexCodec = IndexCodec {
    endian: Endian::Little,
    crc32c: true,
};
pub const LE: IndexCodec = IndexCodec {
    endian: Endian::Little,
    crc32c: false,
};
pub const BE_CRC: IndexCodec = IndexCodec {
    endian: Endian::Big,
    crc32c: true,
};
pub const BE: IndexCodec = IndexCodec {
    endian: Endian::Big,
    crc32c: false,
};
pub const ALL_INDEX_CODECS: [IndexCodec; 4] = [LE, LE_CRC, BE, BE_CRC];

/// Filler written between chunks (and around them) so that offsets must really be used.
pub const JUNK: u8 = 0xEE;

// ---------------------------------------------------------------------------------------------
// Small deterministic randomness (no extra dependency).

/// splitmix64.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (hi > lo).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }

    /// True with probability `p` percent.
    pub fn percent(&mut self, p: u64) -> bool {
        self.next_u64() % 100 < p
    }
}

/// Distinct-looking bytes for the chunk at `coords`: a text header naming the chunk (so two
/// chunks of the same length never have equal bytes unless very short), then pseudo-random.
/// A single-threaded runtime for driving the async layers from a test.
#[allow(dead_code)] // not every test binary drives async code itself
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn chunk_bytes(coords: &[u64], len: usize, salt: u64) -> Vec<u8> {
    let mut out: Vec<u8> = format!("{coords:?}#{salt};").into_bytes();
    let mut seed = salt;
    for c in coords {
        seed = seed.wrapping_mul(1_000_003).wrapping_add(*c + 1);
    }
    let mut rng = Rng::new(seed);
    while out.len() < len {
        out.push(rng.next_u64() as u8);
    }
    out.truncate(len);
    out
}

// ---------------------------------------------------------------------------------------------
// Grid arithmetic.

pub fn product(v: &[u64]) -> u64 {
    v.iter().product()
}

pub fn ceil_div(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(x, y)| x.div_ceil(*y)).collect()
}

pub fn div_each(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

pub fn mul_each(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(x, y)| x * y).collect()
}

/// C-order coordinates of linear index `i` in a grid of `dims`.
pub fn c_order(mut i: u64, dims: &[u64]) -> Vec<u64> {
    let mut out = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        out[d] = i % dims[d];
        i /= dims[d];
    }
    out
}

/// Every coordinate tuple of the box `[0, hi)` in C order.
pub fn all_coords(hi: &[u64]) -> Vec<Coords> {
    (0..product(hi)).map(|i| c_order(i, hi)).collect()
}

// ---------------------------------------------------------------------------------------------
// Array specification and builder.

/// One level of sharding: the chunks the (sub-)shard of this level is cut into.
#[derive(Debug, Clone)]
pub struct Level {
    pub chunk_shape: Vec<u64>,
    pub index: IndexCodec,
    pub location: IndexLocation,
}

/// A sharded array as a writer would store it.
#[derive(Debug, Clone)]
pub struct ArraySpec {
    pub shape: Vec<u64>,
    /// The stored chunk grid (shard shape).
    pub shard_shape: Vec<u64>,
    /// Outermost first; the last level's chunk shape is the inner chunk shape.
    pub levels: Vec<Level>,
    /// The innermost codec chain, as JSON.
    pub inner_codecs: Value,
    pub encoding: ChunkKeyEncoding,
    pub attributes: Value,
    /// Junk bytes written before each chunk and at the end of each shard's data.
    pub gap: usize,
    /// Store chunks in reverse C order (offsets then decrease with the index).
    pub reverse: bool,
}

pub fn bytes_codec() -> Value {
    json!([{"name": "bytes", "configuration": {"endian": "little"}}])
}

pub fn encoding_json(e: ChunkKeyEncoding) -> Value {
    match e {
        ChunkKeyEncoding::Default(s) => {
            json!({"name": "default", "configuration": {"separator": s.as_char().to_string()}})
        }
        ChunkKeyEncoding::V2(s) => {
            json!({"name": "v2", "configuration": {"separator": s.as_char().to_string()}})
        }
        ChunkKeyEncoding::Draft(_) => panic!("final v3 metadata has no draft chunk keys"),
    }
}

pub fn index_codecs_json(c: IndexCodec) -> Value {
    let endian = match c.endian {
        Endian::Little => "little",
        Endian::Big => "big",
    };
    let mut v = vec![json!({"name": "bytes", "configuration": {"endian": endian}})];
    if c.crc32c {
        v.push(json!({"name": "crc32c"}));
    }
    Value::Array(v)
}

impl ArraySpec {
    /// One level of sharding, index at the end, little endian + crc32c, `/` keys.
    pub fn new(shape: &[u64], shard_shape: &[u64], inner_chunk_shape: &[u64]) -> Self {
        ArraySpec {
            shape: shape.to_vec(),
            shard_shape: shard_shape.to_vec(),
            levels: vec![Level {
                chunk_shape: inner_chunk_shape.to_vec(),
                index: LE_CRC,
                location: IndexLocation::End,
            }],
            inner_codecs: bytes_codec(),
            encoding: DEF_SLASH,
            attributes: json!({"description": "built by tests/common", "n": [1, 2.5, null]}),
            gap: 0,
            reverse: false,
        }
    }

    /// Set the index codec and location of every level.
    pub fn index(mut self, location: IndexLocation, codec: IndexCodec) -> Self {
        for l in &mut self.levels {
            l.location = location;
            l.index = codec;
        }
        self
    }

    pub fn encoding(mut self, e: ChunkKeyEncoding) -> Self {
        self.encoding = e;
        self
    }

    pub fn gap(mut self, gap: usize) -> Self {
        self.gap = gap;
        self
    }

    pub fn reverse(mut self, reverse: bool) -> Self {
        self.reverse = reverse;
        self
    }

    /// Add a nested level: the current inner chunks become sub-shards cut into `chunk_shape`.
    pub fn nest(mut self, chunk_shape: &[u64], location: IndexLocation, codec: IndexCodec) -> Self {
        self.levels.push(Level {
            chunk_shape: chunk_shape.to_vec(),
            index: codec,
            location,
        });
        self
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    pub fn inner_chunk_shape(&self) -> &[u64] {
        &self.levels.last().expect("at least one level").chunk_shape
    }

    /// The view's chunk grid.
    pub fn inner_grid(&self) -> Vec<u64> {
        ceil_div(&self.shape, self.inner_chunk_shape())
    }

    /// The stored chunk grid.
    pub fn shard_grid(&self) -> Vec<u64> {
        ceil_div(&self.shape, &self.shard_shape)
    }

    pub fn per_shard(&self) -> Vec<u64> {
        div_each(&self.shard_shape, self.inner_chunk_shape())
    }

    /// Every inner coordinate covered by some shard of the stored grid (edge shards reach
    /// past the array's inner grid).
    pub fn covered_coords(&self) -> Vec<Coords> {
        all_coords(&mul_each(&self.shard_grid(), &self.per_shard()))
    }

    pub fn in_grid(&self, coords: &[u64]) -> bool {
        coords.len() == self.ndim() && coords.iter().zip(self.inner_grid()).all(|(c, g)| *c < g)
    }

    pub fn shard_of(&self, coords: &[u64]) -> Coords {
        div_each(coords, &self.per_shard())
    }

    fn sharding_codec(&self, level: usize) -> Value {
        let l = &self.levels[level];
        let codecs = if level + 1 < self.levels.len() {
            json!([self.sharding_codec(level + 1)])
        } else {
            self.inner_codecs.clone()
        };
        let location = match l.location {
            IndexLocation::Start => "start",
            IndexLocation::End => "end",
        };
        json!({"name": "sharding_indexed", "configuration": {
            "chunk_shape": l.chunk_shape,
            "codecs": codecs,
            "index_codecs": index_codecs_json(l.index),
            "index_location": location,
        }})
    }

    /// The stored `zarr.json`.
    pub fn zarr_json(&self) -> Value {
        let names: Vec<Value> = (0..self.ndim()).map(|d| json!(format!("d{d}"))).collect();
        json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": self.shape,
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": self.shard_shape}},
            "chunk_key_encoding": encoding_json(self.encoding),
            "fill_value": 0,
            "codecs": [self.sharding_codec(0)],
            "attributes": self.attributes,
            "dimension_names": names,
            "zz_extension": {"must_understand": false, "kept": true},
        })
    }

    /// What the unsharded view's `zarr.json` must say.
    pub fn rewritten_json(&self) -> Value {
        let mut v = self.zarr_json();
        v["chunk_grid"] = json!({"name": "regular", "configuration": {"chunk_shape": self.inner_chunk_shape()}});
        v["codecs"] = self.inner_codecs.clone();
        v
    }

    /// Encode one (sub-)shard of `level` whose first element is `origin`; `None` when none of
    /// its chunks is present (writers omit such sub-shards) unless `keep_empty`.
    fn encode_level(&self, level: usize, origin: &[u64], chunks: &Chunks, keep_empty: bool) -> Option<Vec<u8>> {
        let l = &self.levels[level];
        let shard_shape = if level == 0 {
            &self.shard_shape
        } else {
            &self.levels[level - 1].chunk_shape
        };
        let per = div_each(shard_shape, &l.chunk_shape);
        let n = product(&per);
        let mut pieces = Vec::new();
        for i in 0..n {
            let within = c_order(i, &per);
            let o: Vec<u64> = origin
                .iter()
                .zip(mul_each(&within, &l.chunk_shape))
                .map(|(a, b)| a + b)
                .collect();
            let bytes = if level + 1 == self.levels.len() {
                chunks.get(&div_each(&o, self.inner_chunk_shape())).cloned()
            } else {
                self.encode_level(level + 1, &o, chunks, false)
            };
            if let Some(b) = bytes {
                pieces.push((i, b));
            }
        }
        if pieces.is_empty() && !keep_empty {
            return None;
        }
        if self.reverse {
            pieces.reverse();
        }
        let index_size = ShardIndex::encoded_size(n, l.index).unwrap();
        let base = match l.location {
            IndexLocation::Start => index_size,
            IndexLocation::End => 0,
        };
        let mut index = ShardIndex::empty(n).unwrap();
        let mut data = Vec::new();
        for (i, b) in pieces {
            data.extend(std::iter::repeat_n(JUNK, self.gap));
            let range = ChunkRange {
                offset: base + data.len() as u64,
                nbytes: b.len() as u64,
            };
            index.set(i, Some(range)).unwrap();
            data.extend(b);
        }
        data.extend(std::iter::repeat_n(JUNK, self.gap));
        let encoded = index.encode(l.index);
        assert_eq!(encoded.len() as u64, index_size);
        Some(match l.location {
            IndexLocation::Start => [encoded, data].concat(),
            IndexLocation::End => [data, encoded].concat(),
        })
    }

    /// The bytes of the stored shard at `shard` (always returned, even when all entries are
    /// empty).
    pub fn shard_bytes(&self, shard: &[u64], chunks: &Chunks) -> Vec<u8> {
        let origin = mul_each(shard, &self.shard_shape);
        self.encode_level(0, &origin, chunks, true).unwrap()
    }

    /// Shards holding at least one of `chunks` (in or out of the grid), keyed by shard coords.
    pub fn shards(&self, chunks: &Chunks) -> BTreeMap<Coords, Vec<u8>> {
        let coords: BTreeSet<Coords> = chunks.keys().map(|c| self.shard_of(c)).collect();
        coords
            .into_iter()
            .map(|s| {
                let b = self.shard_bytes(&s, chunks);
                (s, b)
            })
            .collect()
    }

    /// Store the array under `prefix` (`""` or ending in `/`). `chunks` may hold chunks outside
    /// the inner grid (in edge shards); they are stored but not expected in the view.
    pub fn build(&self, prefix: &str, chunks: &Chunks) -> Built {
        let mut files = BTreeMap::new();
        files.insert(
            format!("{prefix}zarr.json"),
            serde_json::to_vec_pretty(&self.zarr_json()).unwrap(),
        );
        for (s, bytes) in self.shards(chunks) {
            files.insert(format!("{prefix}{}", self.encoding.encode(&s)), bytes);
        }
        let expected = chunks
            .iter()
            .filter(|(c, _)| self.in_grid(c))
            .map(|(c, b)| (c.clone(), b.clone()))
            .collect();
        Built {
            spec: self.clone(),
            prefix: prefix.to_string(),
            files,
            expected,
        }
    }

    /// Random chunks over the covered region: each present with probability `p` percent,
    /// lengths in `0..=max_len` (0 included: a present, empty chunk is a legal entry).
    pub fn random_chunks(&self, seed: u64, p: u64, max_len: usize) -> Chunks {
        let mut rng = Rng::new(seed);
        let mut out = Chunks::new();
        for c in self.covered_coords() {
            if rng.percent(p) {
                let len = rng.range(0, max_len as u64 + 1) as usize;
                out.insert(c.clone(), chunk_bytes(&c, len, seed));
            }
        }
        out
    }

    /// Every covered chunk present, with lengths `min_len..=max_len`.
    pub fn full_chunks(&self, seed: u64, min_len: usize, max_len: usize) -> Chunks {
        let mut rng = Rng::new(seed);
        self.covered_coords()
            .into_iter()
            .map(|c| {
                let len = rng.range(min_len as u64, max_len as u64 + 1) as usize;
                let b = chunk_bytes(&c, len, seed);
                (c, b)
            })
            .collect()
    }
}

/// A stored array and what the view must show of it.
#[derive(Debug, Clone)]
pub struct Built {
    pub spec: ArraySpec,
    pub prefix: String,
    /// Store key -> bytes: `zarr.json` and every shard.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Present inner chunks inside the grid -> bytes.
    pub expected: Chunks,
}

impl Built {
    pub fn shard_key(&self, shard: &[u64]) -> String {
        format!("{}{}", self.prefix, self.spec.encoding.encode(shard))
    }

    pub fn zarr_json_key(&self) -> String {
        format!("{}zarr.json", self.prefix)
    }

    /// Chunk key relative to the array -> bytes.
    pub fn expected_keys(&self) -> BTreeMap<String, Vec<u8>> {
        self.expected
            .iter()
            .map(|(c, b)| (self.spec.encoding.encode(c), b.clone()))
            .collect()
    }

    /// View path (from the store root) of every chunk file -> bytes.
    pub fn view_chunk_files(&self) -> BTreeMap<String, Vec<u8>> {
        self.expected_keys()
            .into_iter()
            .map(|(k, b)| (format!("{}{k}", self.prefix), b))
            .collect()
    }

    pub fn put(&self, store: &MemoryStore) {
        for (k, v) in &self.files {
            store.insert(k, v.clone());
        }
    }

    pub fn write_dir(&self, root: &Path) {
        write_files(root, &self.files);
    }

    /// A `ShardedArray` over `store` (which must hold this array).
    pub fn open(&self, store: Arc<dyn Store>, options: ShardOptions) -> ShardedArray {
        open_array(store, &self.prefix, &self.files[&self.zarr_json_key()], options)
    }
}

pub fn write_files(root: &Path, files: &BTreeMap<String, Vec<u8>>) {
    for (k, v) in files {
        let path = root.join(k);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, v).unwrap();
    }
}

pub fn memory_store(files: &BTreeMap<String, Vec<u8>>) -> Arc<MemoryStore> {
    let store = MemoryStore::new();
    for (k, v) in files {
        store.insert(k, v.clone());
    }
    Arc::new(store)
}

/// Open the sharded array whose `zarr.json` is `doc` at `prefix` of `store`.
pub fn open_array(store: Arc<dyn Store>, prefix: &str, doc: &[u8], options: ShardOptions) -> ShardedArray {
    let meta = match parse_zarr_json(doc).expect("zarr.json parses") {
        NodeMetadata::Array(a) => a,
        NodeMetadata::Group { .. } => panic!("not an array"),
    };
    let layout = match analyse(&meta) {
        Sharding::Sharded(l) => l,
        other => panic!("not unshardable: {other:?}"),
    };
    ShardedArray::new(
        store,
        prefix.to_string(),
        &meta,
        layout,
        Arc::new(IndexCache::new(64 << 20)),
        options,
    )
    .expect("ShardedArray::new")
}

/// Options that never revalidate during a test (so request counts are deterministic).
pub fn sticky() -> ShardOptions {
    ShardOptions {
        revalidate_after: std::time::Duration::from_secs(3600),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// A sample hierarchy: group, sharded arrays, an unsharded array, non-Zarr files.

/// What the mounted view must show at one path.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// Exactly these bytes.
    Bytes(Vec<u8>),
    /// A JSON document equal (as a value) to this one.
    Json(Value),
}

#[derive(Debug, Clone)]
pub struct Hierarchy {
    /// What is stored: key -> bytes.
    pub store: BTreeMap<String, Vec<u8>>,
    /// Every file of the unsharded view: path -> content.
    pub files: BTreeMap<String, Expect>,
    /// Every directory of the unsharded view (excluding the root).
    pub dirs: BTreeSet<String>,
    pub arrays: Vec<Built>,
}

impl Hierarchy {
    pub fn memory_store(&self) -> Arc<MemoryStore> {
        memory_store(&self.store)
    }

    pub fn write_dir(&self, root: &Path) {
        write_files(root, &self.store);
    }
}

pub fn group_json(title: &str) -> Vec<u8> {
    serde_json::to_vec_pretty(&json!({"zarr_format": 3, "node_type": "group", "attributes": {"title": title}})).unwrap()
}

pub fn plain_array_json() -> Value {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": [10, 7], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {"kind": "unsharded"}
    })
}

/// Every parent directory of `path` (not the root).
pub fn parents(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = path;
    while let Some(i) = p.rfind('/') {
        p = &p[..i];
        out.push(p.to_string());
    }
    out
}

/// The hierarchy used by the fs-layer and mount tests:
///
/// ```text
/// zarr.json                 group
/// notes.txt                 not Zarr
/// data/zarr.json            group
/// data/sharded/             2-D, shape [10, 7], shard [4, 4], inner [2, 2], `/` keys, end index
///                           (some chunks missing, some stored outside the grid), + README
/// data/dotted/              2-D, `.` keys, start index, big endian, no crc, nested two levels
/// data/v2/                  3-D, v2 `/` keys, gaps and reversed chunk order
/// data/plain/               unsharded array (passes through)
/// ```
pub fn sample_hierarchy() -> Hierarchy {
    let mut store = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut arrays = Vec::new();

    let mut put = |k: &str, v: Vec<u8>, files: &mut BTreeMap<String, Expect>| {
        store.insert(k.to_string(), v.clone());
        files.insert(k.to_string(), Expect::Bytes(v));
    };
    put("zarr.json", group_json("root"), &mut files);
    put("notes.txt", b"hello, not zarr\n".to_vec(), &mut files);
    put("data/zarr.json", group_json("data"), &mut files);
    put(
        "data/plain/zarr.json",
        serde_json::to_vec_pretty(&plain_array_json()).unwrap(),
        &mut files,
    );
    for c in all_coords(&[2, 2]) {
        let key = format!("data/plain/c/{}/{}", c[0], c[1]);
        put(&key, chunk_bytes(&c, 20, 99), &mut files);
    }
    put(
        "data/sharded/README",
        b"stray file inside a sharded array\n".to_vec(),
        &mut files,
    );

    // data/sharded: shard grid [3, 2], inner grid [5, 4]; covered [6, 4].
    let spec = ArraySpec::new(&[10, 7], &[4, 4], &[2, 2]);
    let mut chunks = spec.full_chunks(1, 1, 40);
    chunks.remove(&vec![0, 1]); // an empty entry
                                // Shard (1, 1) is missing altogether.
    for c in spec.covered_coords() {
        if spec.shard_of(&c) == vec![1, 1] {
            chunks.remove(&c);
        }
    }
    // Shard (2, 0) exists but holds only chunks of row 5, outside the grid (rows 0..5).
    chunks.remove(&vec![4, 0]);
    chunks.remove(&vec![4, 1]);
    assert!(chunks.contains_key(&vec![5, 0]), "outside-grid chunk is stored");
    arrays.push(spec.build("data/sharded/", &chunks));

    let spec = ArraySpec::new(&[9, 8], &[6, 8], &[3, 4])
        .index(IndexLocation::Start, BE)
        .nest(&[1, 2], IndexLocation::End, LE_CRC)
        .encoding(DEF_DOT);
    let chunks = spec.random_chunks(2, 70, 12);
    arrays.push(spec.build("data/dotted/", &chunks));

    let spec = ArraySpec::new(&[4, 6, 5], &[2, 4, 4], &[1, 2, 2])
        .encoding(V2_SLASH)
        .gap(3)
        .reverse(true);
    let chunks = spec.random_chunks(3, 60, 16);
    arrays.push(spec.build("data/v2/", &chunks));

    for a in &arrays {
        store.extend(a.files.clone());
        files.insert(a.zarr_json_key(), Expect::Json(a.spec.rewritten_json()));
        for (k, b) in a.view_chunk_files() {
            files.insert(k, Expect::Bytes(b));
        }
    }
    let dirs = files.keys().flat_map(|k| parents(k)).collect();
    Hierarchy {
        store,
        files,
        dirs,
        arrays,
    }
}

// ---------------------------------------------------------------------------------------------
// A store decorator that records every request.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Get {
        key: String,
        range: Option<ByteRange>,
        pinned: bool,
    },
    Head(String),
    Set(String),
    Erase(String),
    ListPrefix(String),
    ListDir(String),
}

#[derive(Debug)]
pub struct RecordingStore {
    inner: Arc<dyn Store>,
    log: Mutex<Vec<Op>>,
}

impl RecordingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        RecordingStore {
            inner,
            log: Mutex::new(Vec::new()),
        }
    }

    pub fn take(&self) -> Vec<Op> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    fn push(&self, op: Op) {
        self.log.lock().unwrap().push(op);
    }
}

#[async_trait]
impl Store for RecordingStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.push(Op::Get {
            key: key.to_string(),
            range: opts.range,
            pinned: opts.if_version.is_some(),
        });
        self.inner.get(key, opts).await
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.push(Op::Head(key.to_string()));
        self.inner.head(key).await
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.push(Op::Set(key.to_string()));
        self.inner.set(key, value).await
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.push(Op::Erase(key.to_string()));
        self.inner.erase(key).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.push(Op::ListPrefix(prefix.to_string()));
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.push(Op::ListDir(prefix.to_string()));
        self.inner.list_dir(prefix).await
    }
}

/// Exclusive upper bounds of a random array.
pub struct Bounds {
    /// Dimensions: 1 .. ndim.
    pub ndim: u64,
    /// Inner chunk side: 1 .. inner.
    pub inner: u64,
    /// Shards per dimension: 1 .. shards(ndim).
    pub shards: fn(usize) -> u64,
    /// Chance (percent) of two levels of sharding.
    pub nest_percent: u64,
}

/// A random sharded array: 1-3 dimensions, edge shards cut short, optional nesting, random
/// index location, endianness, checksum and key encoding.
pub fn random_spec(seed: u64) -> ArraySpec {
    random_spec_within(
        seed,
        &Bounds {
            ndim: 4,
            inner: 4,
            shards: |_| 4,
            nest_percent: 40,
        },
    )
}

/// A random sharded array within `bounds`, stored with gaps between chunks or in reverse
/// order (so the first rewrite of a shard changes its layout).
pub fn random_spec_within(seed: u64, bounds: &Bounds) -> ArraySpec {
    let mut rng = Rng::new(seed);
    let ndim = rng.range(1, bounds.ndim) as usize;
    let (mut shape, mut shard, mut mid, mut inner) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ndim {
        let c = rng.range(1, bounds.inner);
        let b = rng.range(1, 3);
        let a = rng.range(1, 3);
        let s = c * b * a;
        let shards = rng.range(1, (bounds.shards)(ndim));
        shape.push((shards - 1) * s + rng.range(1, s + 1));
        shard.push(s);
        mid.push(c * b);
        inner.push(c);
    }
    let loc = |r: &mut Rng| {
        if r.percent(50) {
            IndexLocation::Start
        } else {
            IndexLocation::End
        }
    };
    let codec = |r: &mut Rng| ALL_INDEX_CODECS[r.range(0, 4) as usize];
    let (l0, c0) = (loc(&mut rng), codec(&mut rng));
    let spec = if rng.percent(bounds.nest_percent) {
        let (l1, c1) = (loc(&mut rng), codec(&mut rng));
        ArraySpec::new(&shape, &shard, &mid).index(l0, c0).nest(&inner, l1, c1)
    } else {
        ArraySpec::new(&shape, &shard, &inner).index(l0, c0)
    };
    let enc = ALL_ENCODINGS[rng.range(0, 4) as usize];
    let gap = rng.range(0, 3) as usize;
    let reverse = rng.percent(50);
    spec.encoding(enc).gap(gap).reverse(reverse)
}

// ---------------------------------------------------------------------------------------------
// Driving an `Fs` without a mount (the write-path tests).

pub const FS_UID: u32 = 4321;
pub const FS_GID: u32 = 8765;

/// An unsharded view of `store` with writes allowed.
pub fn writable_fs(store: Arc<dyn Store>) -> zarrfs::fs::Fs {
    let mut config = zarrfs::fs::FsConfig::read_only(FS_UID, FS_GID, std::time::Duration::from_secs(1));
    config.writable = true;
    let view = zarrfs::view::View::new(store, &zarrfs::view::ViewOptions::default());
    zarrfs::fs::Fs::new(view, config)
}

/// Resolve a path from the root by successive lookups.
pub async fn fs_resolve(fs: &zarrfs::fs::Fs, path: &str) -> Result<zarrfs::fs::Attr, zarrfs::fs::FsError> {
    let mut attr = fs.getattr(zarrfs::fs::inodes::ROOT_INO).await?;
    for name in path.split('/').filter(|n| !n.is_empty()) {
        attr = fs.lookup(attr.ino, name).await?;
    }
    Ok(attr)
}

/// Open a file by path for writing as the kernel does: an ESTALE (a cached inode is never
/// written through, see `fs/inodes/caching.rs`) makes it look the path up again and retry
/// once. Returns the inode opened and the handle.
pub async fn fs_open_write(fs: &zarrfs::fs::Fs, path: &str, truncate: bool) -> Result<(u64, u64), zarrfs::fs::FsError> {
    let attr = fs_resolve(fs, path).await?;
    match fs.open(attr.ino, true, truncate).await {
        Err(zarrfs::fs::FsError::Replaced) => {
            let attr = fs_resolve(fs, path).await?;
            Ok((attr.ino, fs.open(attr.ino, true, truncate).await?))
        }
        opened => Ok((attr.ino, opened?)),
    }
}

/// Truncate a file by path as the kernel does (see [`fs_open_write`]).
pub async fn fs_truncate(fs: &zarrfs::fs::Fs, path: &str, size: u64) -> Result<zarrfs::fs::Attr, zarrfs::fs::FsError> {
    let attr = fs_resolve(fs, path).await?;
    match fs.truncate(attr.ino, size, None).await {
        Err(zarrfs::fs::FsError::Replaced) => {
            let attr = fs_resolve(fs, path).await?;
            fs.truncate(attr.ino, size, None).await
        }
        done => done,
    }
}

/// Read a whole file through a fresh read handle.
pub async fn fs_read(fs: &zarrfs::fs::Fs, ino: u64) -> Result<Vec<u8>, zarrfs::fs::FsError> {
    let fh = fs.open(ino, false, false).await?;
    let mut out = Vec::new();
    loop {
        match fs.read(fh, out.len() as u64, 4096).await {
            Ok(b) if b.is_empty() => break,
            Ok(b) => out.extend_from_slice(&b),
            Err(e) => {
                fs.release(fh).await;
                return Err(e);
            }
        }
    }
    fs.release(fh).await;
    Ok(out)
}

/// The bytes of the file at `path`, checking that its size agrees.
pub async fn fs_read_path(fs: &zarrfs::fs::Fs, path: &str) -> Result<Vec<u8>, zarrfs::fs::FsError> {
    let attr = fs_resolve(fs, path).await?;
    let bytes = fs_read(fs, attr.ino).await?;
    assert_eq!(bytes.len() as u64, attr.size, "size of {path}");
    Ok(bytes)
}

/// The listing of a directory (without `.` and `..`).
pub async fn fs_list(fs: &zarrfs::fs::Fs, ino: u64) -> Result<Vec<zarrfs::fs::DirItem>, zarrfs::fs::FsError> {
    let fh = fs.opendir(ino).await?;
    let items = fs.readdir(ino, fh, 0).await;
    fs.releasedir(fh);
    Ok(items?.into_iter().skip(2).collect())
}

/// Every file the Fs shows (path -> bytes) and every directory, walked with readdir + lookup +
/// read; listed sizes and kinds are checked against lookup and the bytes read.
pub async fn fs_walk(fs: &zarrfs::fs::Fs) -> (BTreeMap<String, Vec<u8>>, BTreeSet<String>) {
    use zarrfs::fs::FileKind;
    let (mut files, mut dirs) = (BTreeMap::new(), BTreeSet::new());
    let mut stack = vec![(String::new(), zarrfs::fs::inodes::ROOT_INO)];
    while let Some((dir, ino)) = stack.pop() {
        let items = fs_list(fs, ino)
            .await
            .unwrap_or_else(|e| panic!("listing {dir:?}: {e}"));
        for item in items {
            let path = item.path();
            let attr = fs
                .lookup(ino, &item.name)
                .await
                .unwrap_or_else(|e| panic!("{path} listed but lookup fails: {e}"));
            assert_eq!(attr.kind, item.kind, "kind of {path}");
            if let Some(node) = &item.node {
                assert_eq!(node.size, attr.size, "listed size of {path}");
            }
            match attr.kind {
                FileKind::File => {
                    let bytes = fs_read(fs, attr.ino)
                        .await
                        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
                    assert_eq!(bytes.len() as u64, attr.size, "bytes read from {path}");
                    assert!(files.insert(path.clone(), bytes).is_none(), "{path} listed twice");
                }
                FileKind::Dir => {
                    assert!(dirs.insert(path.clone()), "{path} listed twice");
                    stack.push((path, attr.ino));
                }
            }
        }
    }
    (files, dirs)
}

/// The inode of directory `path`, making the missing directories on the way (`mkdir -p`).
pub async fn fs_mkdir_p(fs: &zarrfs::fs::Fs, path: &str) -> Result<u64, zarrfs::fs::FsError> {
    let mut ino = zarrfs::fs::inodes::ROOT_INO;
    for name in path.split('/').filter(|n| !n.is_empty()) {
        ino = match fs.lookup(ino, name).await {
            Ok(attr) => attr.ino,
            Err(e) if e.errno() == libc::ENOENT => match fs.mkdir(ino, name).await {
                Ok(attr) => attr.ino,
                // Made meanwhile by a concurrent writer.
                Err(e) if e.errno() == libc::EEXIST => fs.lookup(ino, name).await?.ino,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
    }
    Ok(ino)
}

/// Write a whole file: create (truncating), write `data`, flush, release.
pub async fn fs_write_file(fs: &zarrfs::fs::Fs, path: &str, data: &[u8]) -> Result<(), zarrfs::fs::FsError> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let parent = fs_mkdir_p(fs, dir).await?;
    let (_, fh) = fs.create(parent, name, true).await?;
    let written = fs.write(fh, 0, data).await;
    let flushed = fs.flush(fh).await;
    fs.release(fh).await;
    assert_eq!(written? as usize, data.len());
    flushed
}

/// The sharding levels of the array whose stored `zarr.json` is `doc`.
pub fn levels_of(doc: &[u8]) -> Vec<zarrfs::zarr::sharding::ShardLevel> {
    let meta = match parse_zarr_json(doc).expect("zarr.json parses") {
        NodeMetadata::Array(a) => a,
        NodeMetadata::Group { .. } => panic!("not an array"),
    };
    match analyse(&meta) {
        Sharding::Sharded(l) => l.levels,
        other => panic!("not unshardable: {other:?}"),
    }
}

/// Every key of `store` with its bytes.
pub async fn dump_store(store: &dyn Store) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for key in store.list_prefix("").await.unwrap() {
        let got = store.get(&key, GetOptions::default()).await.unwrap().unwrap();
        out.insert(key, got.bytes.to_vec());
    }
    out
}

/// The stored shard holding inner chunk `coords` and the chunk's C-order index at each level
/// (computed here from the levels, independently of the crate's own locating).
pub fn per_level_index(levels: &[zarrfs::zarr::sharding::ShardLevel], coords: &[u64]) -> (Coords, Vec<u64>) {
    let inner = &levels.last().expect("a level").chunk_shape;
    let origin = mul_each(coords, inner);
    let shard = div_each(&origin, &levels[0].shard_shape);
    let path = levels
        .iter()
        .map(|l| {
            let within: Vec<u64> = origin
                .iter()
                .zip(&l.shard_shape)
                .zip(&l.chunk_shape)
                .map(|((o, s), c)| (o % s) / c)
                .collect();
            within
                .iter()
                .zip(&l.chunks_per_shard)
                .fold(0, |acc, (w, n)| acc * n + w)
        })
        .collect();
    (shard, path)
}

/// Check the stored shards of `built`'s array against `chunks` (every inner chunk the store
/// must hold, in or out of the grid): a shard is stored exactly when it holds a chunk; each
/// parses with the levels of the stored `zarr.json` (index location and checksum verified)
/// and holds exactly its chunks; and it is either as first stored or packed canonically
/// (chunks back to back in index order, index where the metadata says).
pub async fn check_shards(store: &dyn Store, built: &Built, chunks: &Chunks) {
    let doc = store
        .get(&built.zarr_json_key(), GetOptions::default())
        .await
        .unwrap()
        .expect("zarr.json stored");
    let levels = levels_of(&doc.bytes);
    let canonical = built.spec.clone().gap(0).reverse(false);
    let mut by_shard: BTreeMap<Coords, Chunks> = BTreeMap::new();
    for (c, b) in chunks {
        by_shard
            .entry(built.spec.shard_of(c))
            .or_default()
            .insert(c.clone(), b.clone());
    }
    for s in all_coords(&built.spec.shard_grid()) {
        let key = built.shard_key(&s);
        let stored = store.get(&key, GetOptions::default()).await.unwrap();
        let Some(want) = by_shard.get(&s) else {
            assert!(stored.is_none(), "shard {key} holds no chunk but is stored");
            continue;
        };
        let stored = stored.unwrap_or_else(|| panic!("shard {key} missing ({} chunks)", want.len()));
        let bytes = stored.bytes.to_vec();
        let content = zarrfs::zarr::shard_pack::unpack(&bytes, &levels)
            .unwrap_or_else(|e| panic!("shard {key} does not parse: {e}"));
        assert_eq!(content.count(), want.len() as u64, "chunks in shard {key}");
        for (c, b) in want {
            let (shard, path) = per_level_index(&levels, c);
            assert_eq!(shard, s);
            let got = content
                .get(&path)
                .unwrap_or_else(|| panic!("chunk {c:?} missing from {key}"));
            assert!(got[..] == b[..], "bytes of chunk {c:?} in shard {key}");
        }
        let untouched = built.files.get(&key) == Some(&bytes);
        assert!(
            untouched || bytes == canonical.shard_bytes(&s, chunks),
            "shard {key} is neither as stored nor canonically packed"
        );
    }
}
