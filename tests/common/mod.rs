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

/// A random sharded array: 1-3 dimensions, edge shards cut short, optional nesting, random
/// index location, endianness, checksum and key encoding.
pub fn random_spec(seed: u64) -> ArraySpec {
    let mut rng = Rng::new(seed);
    let ndim = rng.range(1, 4) as usize;
    let (mut shape, mut shard, mut mid, mut inner) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ndim {
        let c = rng.range(1, 4);
        let b = rng.range(1, 3);
        let a = rng.range(1, 3);
        let s = c * b * a;
        let shards = rng.range(1, 4);
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
    let spec = if rng.percent(40) {
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
