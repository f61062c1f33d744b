//! The sharding transformer (`shard/`) against in-memory stores, no mount: exact bytes of every
//! inner chunk, absent chunks, request counts, rewritten shards, corrupt shards, listings of
//! every key encoding from 1-D to 4-D and nested sharding, and a property test against a model.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use zarrfs::shard::{ShardError, ShardOptions, ShardedArray};
use zarrfs::store::counting::{CountingStore, Counts};
use zarrfs::store::local::LocalStore;
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::{ByteRange, EntryKind, GetOptions, Store, StoreError};
use zarrfs::zarr::key_encoding::ChunkPath;
use zarrfs::zarr::shard_index::{ChunkRange, ShardIndex};
use zarrfs::zarr::sharding::IndexLocation;

struct Setup {
    memory: Arc<MemoryStore>,
    recorder: Arc<RecordingStore>,
    counting: Arc<CountingStore>,
    array: ShardedArray,
}

/// `CountingStore(RecordingStore(MemoryStore))` holding `built`, and the array over it.
fn setup(built: &Built, options: ShardOptions) -> Setup {
    let memory = memory_store(&built.files);
    let recorder = Arc::new(RecordingStore::new(memory.clone()));
    let counting = Arc::new(CountingStore::new(recorder.clone()));
    let array = built.open(counting.clone(), options);
    counting.reset();
    recorder.take();
    Setup {
        memory,
        recorder,
        counting,
        array,
    }
}

fn counts(get: u64, get_bytes: u64, head: u64, list_dir: u64) -> Counts {
    Counts {
        get,
        get_bytes,
        head,
        list_dir,
        ..Counts::default()
    }
}

/// Every covered coordinate (and a few beyond) reads back exactly as the model says, through
/// `locate`, `read_chunk` and the `Store` interface, whole and in ranges.
async fn check_reads(array: &ShardedArray, built: &Built) {
    let spec = &built.spec;
    let enc = spec.encoding;
    let mut coords = spec.covered_coords();
    let grid = spec.inner_grid();
    coords.push(grid.clone()); // one past the grid in every dimension
    coords.push(grid.iter().map(|g| g + 100).collect());
    for c in &coords {
        let key = enc.encode(c);
        let expected = built.expected.get(c);
        let loc = array.locate(c).await.unwrap();
        assert_eq!(
            loc.as_ref().map(|l| l.nbytes),
            expected.map(|b| b.len() as u64),
            "locate {c:?}"
        );
        let got = array.read_chunk(c, 0, u64::MAX).await.unwrap();
        assert_eq!(
            got.as_ref().map(|(_, b)| b.to_vec()),
            expected.cloned(),
            "read_chunk {c:?}"
        );
        let via_store = array.get(&key, GetOptions::default()).await.unwrap();
        assert_eq!(
            via_store.as_ref().map(|r| r.bytes.to_vec()),
            expected.cloned(),
            "Store::get {key}"
        );
        let head = array.head(&key).await.unwrap();
        assert_eq!(head.map(|m| m.size), expected.map(|b| b.len() as u64), "head {key}");
        if let Some(b) = expected {
            // Ranges: middle, past the end, suffix.
            let (_, part) = array.read_chunk(c, 1, 3).await.unwrap().unwrap();
            let lo = 1.min(b.len());
            let hi = 4.min(b.len());
            assert_eq!(&part[..], &b[lo..hi], "read_chunk {c:?} 1+3");
            let (_, past) = array.read_chunk(c, b.len() as u64 + 5, 10).await.unwrap().unwrap();
            assert!(past.is_empty(), "read past the end of {c:?}");
            let suffix = array
                .get(&key, GetOptions::range(ByteRange::Suffix(2)))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&suffix.bytes[..], &b[b.len().saturating_sub(2)..]);
            assert_eq!(suffix.offset, b.len().saturating_sub(2) as u64);
        }
    }
}

/// Walk the transformer's listing from the array directory: chunk key -> size, and the chunk
/// directories seen.
async fn walk(array: &ShardedArray) -> (BTreeMap<String, u64>, BTreeSet<String>) {
    let (enc, ndim) = (array.encoding(), array.ndim());
    let mut files = BTreeMap::new();
    let mut dirs = BTreeSet::new();
    let mut stack = vec![(String::new(), array.list_array_dir().await.unwrap())];
    while let Some((rel, entries)) = stack.pop() {
        for e in entries {
            let path = if rel.is_empty() {
                e.name.clone()
            } else {
                format!("{rel}/{}", e.name)
            };
            match e.kind {
                EntryKind::File { size } => {
                    assert!(
                        matches!(enc.classify(&path, ndim), ChunkPath::Chunk(_)),
                        "listed file {path} is not a chunk key"
                    );
                    assert!(files.insert(path.clone(), size).is_none(), "{path} twice");
                }
                EntryKind::Dir => {
                    let ChunkPath::Dir(prefix) = enc.classify(&path, ndim) else {
                        panic!("listed directory {path} is not a chunk directory");
                    };
                    assert!(dirs.insert(path.clone()), "{path} twice");
                    assert!(
                        array.dir_exists(&prefix).await.unwrap(),
                        "listed dir {path} does not exist"
                    );
                    stack.push((path, array.list_chunk_dir(&prefix).await.unwrap()));
                }
            }
        }
    }
    (files, dirs)
}

/// The listing shows exactly the expected chunk files with their sizes, every directory
/// leading to them, and no directory outside the stored shards.
async fn check_listing(array: &ShardedArray, built: &Built) {
    let (files, dirs) = walk(array).await;
    let expected: BTreeMap<String, u64> = built
        .expected_keys()
        .into_iter()
        .map(|(k, b)| (k, b.len() as u64))
        .collect();
    assert_eq!(files, expected, "listed chunk files and sizes");
    for k in expected.keys() {
        for p in parents(k) {
            assert!(dirs.contains(&p), "directory {p} of {k} not listed");
        }
    }
    // Extra (empty) prefix directories are allowed only where a stored shard covers them.
    let spec = &built.spec;
    let shards: Vec<Coords> = all_coords(&spec.shard_grid())
        .into_iter()
        .filter(|s| built.files.contains_key(&built.shard_key(s)))
        .collect();
    for d in &dirs {
        let ChunkPath::Dir(prefix) = spec.encoding.classify(d, spec.ndim()) else {
            unreachable!()
        };
        let sp = div_each(&prefix, &spec.per_shard()[..prefix.len()]);
        assert!(
            shards.iter().any(|s| s[..sp.len()] == sp[..]),
            "directory {d} listed without a shard under it"
        );
        assert!(prefix.iter().zip(spec.inner_grid()).all(|(p, g)| *p < g));
    }
    // The Store interface agrees.
    let keys = array.list_prefix("").await.unwrap();
    assert_eq!(keys, expected.keys().cloned().collect::<Vec<_>>(), "list_prefix");
    let top = array.list_dir("").await.unwrap();
    assert_eq!(top, array.list_array_dir().await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// Reading.

#[tokio::test]
async fn every_inner_chunk_reads_back_in_every_index_form() {
    for location in [IndexLocation::End, IndexLocation::Start] {
        for codec in ALL_INDEX_CODECS {
            for enc in ALL_ENCODINGS {
                let spec = ArraySpec::new(&[10, 7], &[4, 4], &[2, 2])
                    .index(location, codec)
                    .encoding(enc)
                    .gap(2);
                let chunks = spec.random_chunks(7, 75, 30);
                let built = spec.build("a/b/", &chunks);
                let s = setup(&built, sticky());
                check_reads(&s.array, &built).await;
                check_listing(&s.array, &built).await;
            }
        }
    }
}

#[tokio::test]
async fn absent_chunks_are_absent() {
    // Shape [10, 7], shard [4, 4], inner [2, 2]: inner grid [5, 4], covered [6, 4].
    let spec = ArraySpec::new(&[10, 7], &[4, 4], &[2, 2]);
    let mut chunks = spec.full_chunks(11, 1, 9);
    chunks.remove(&vec![0, 1]); // empty index entry
    chunks.retain(|c, _| spec.shard_of(c) != vec![1, 1]); // missing shard
    let built = spec.build("", &chunks);
    assert!(chunks.contains_key(&vec![5, 2]), "stored outside the grid");
    assert!(!built.files.contains_key("c/1/1"));
    let s = setup(&built, sticky());
    let a = &s.array;
    for c in [
        vec![0, 1],        // empty entry
        vec![5, 0],        // edge shard, outside the grid (row 5 of 5 rows)
        vec![5, 3],        // edge shard, outside in both dims
        vec![2, 2],        // missing shard
        vec![3, 3],        // missing shard
        vec![6, 0],        // beyond every shard
        vec![0, 4],        // beyond the grid
        vec![u64::MAX, 0], // absurd
        vec![0],           // wrong rank
        vec![0, 0, 0],     // wrong rank
    ] {
        assert_eq!(a.locate(&c).await.unwrap(), None, "locate {c:?}");
        assert!(a.read_chunk(&c, 0, 10).await.unwrap().is_none(), "{c:?}");
    }
    for key in ["c/0/1", "c/5/0", "c/2/2", "c/0/4", "c/00/0", "c/0", "c", "zarr.json"] {
        assert!(a.get(key, GetOptions::default()).await.unwrap().is_none(), "{key}");
        assert!(a.head(key).await.unwrap().is_none(), "{key}");
    }
    // Present neighbours do read.
    assert_eq!(
        a.read_chunk(&[0, 0], 0, 100).await.unwrap().unwrap().1.to_vec(),
        built.expected[&vec![0, 0]]
    );
    // Listing: row 5 does not exist, row 0 lacks column 1, rows 2 and 3 lack columns 2, 3.
    let names = |v: Vec<zarrfs::store::DirEntry>| -> Vec<String> { v.into_iter().map(|e| e.name).collect() };
    assert_eq!(names(a.list_chunk_dir(&[0]).await.unwrap()), ["0", "2", "3"]);
    assert_eq!(names(a.list_chunk_dir(&[2]).await.unwrap()), ["0", "1"]);
    assert_eq!(names(a.list_chunk_dir(&[4]).await.unwrap()), ["0", "1", "2", "3"]);
    assert!(a.list_chunk_dir(&[5]).await.unwrap().is_empty());
    assert!(!a.dir_exists(&[5]).await.unwrap());
    assert_eq!(names(a.list_chunk_dir(&[]).await.unwrap()), ["0", "1", "2", "3", "4"]);
    check_listing(a, &built).await;
}

#[tokio::test]
async fn zero_length_chunk_is_present_and_empty() {
    let spec = ArraySpec::new(&[4], &[4], &[1]);
    let mut chunks = Chunks::new();
    chunks.insert(vec![1], Vec::new());
    chunks.insert(vec![2], b"xyz".to_vec());
    let built = spec.build("", &chunks);
    let s = setup(&built, sticky());
    let (loc, bytes) = s.array.read_chunk(&[1], 0, 10).await.unwrap().unwrap();
    assert_eq!((loc.nbytes, bytes.len()), (0, 0));
    check_listing(&s.array, &built).await;
}

// ---------------------------------------------------------------------------------------------
// Request counts.

fn index_size(n: u64, codec: zarrfs::zarr::sharding::IndexCodec) -> u64 {
    ShardIndex::encoded_size(n, codec).unwrap()
}

#[tokio::test]
async fn cold_read_is_two_gets_with_end_index() {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).gap(1);
    let built = spec.build("arr/", &spec.full_chunks(5, 3, 20));
    let s = setup(&built, sticky());
    let isz = index_size(4, LE_CRC);
    assert_eq!(isz, 68);
    let len = built.expected[&vec![1, 1]].len() as u64;

    let (loc, bytes) = s.array.read_chunk(&[1, 1], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(bytes.to_vec(), built.expected[&vec![1, 1]]);
    assert_eq!(s.counting.counts(), counts(2, isz + len, 0, 0));
    let ops = s.recorder.take();
    assert_eq!(
        ops,
        vec![
            Op::Get {
                key: "arr/c/0/0".into(),
                range: Some(ByteRange::Suffix(isz)),
                pinned: false
            },
            Op::Get {
                key: "arr/c/0/0".into(),
                range: Some(ByteRange::Range {
                    offset: loc.offset,
                    length: len
                }),
                pinned: true
            },
        ],
        "index by suffix range, then the chunk pinned to its version"
    );

    // A second chunk of the same shard: one request.
    s.counting.reset();
    let (_, b) = s.array.read_chunk(&[0, 1], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(b.to_vec(), built.expected[&vec![0, 1]]);
    assert_eq!(s.counting.counts(), counts(1, b.len() as u64, 0, 0));

    // Locating a chunk of a cached shard costs nothing; another shard costs its index.
    s.counting.reset();
    s.array.locate(&[1, 0]).await.unwrap().unwrap();
    assert_eq!(s.counting.counts(), Counts::default());
    s.array.locate(&[3, 3]).await.unwrap().unwrap();
    assert_eq!(s.counting.counts(), counts(1, isz, 0, 0));
}

#[tokio::test]
async fn cold_read_is_two_gets_with_start_index() {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(IndexLocation::Start, BE);
    let built = spec.build("", &spec.full_chunks(6, 3, 20));
    let s = setup(&built, sticky());
    let isz = index_size(4, BE);
    let (loc, b) = s.array.read_chunk(&[2, 3], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(b.to_vec(), built.expected[&vec![2, 3]]);
    assert!(loc.offset >= isz, "chunk offset {} inside the index", loc.offset);
    assert_eq!(s.counting.counts(), counts(2, isz + b.len() as u64, 0, 0));
    let ops = s.recorder.take();
    assert_eq!(
        ops[0],
        Op::Get {
            key: "c/1/1".into(),
            range: Some(ByteRange::Range { offset: 0, length: isz }),
            pinned: false
        }
    );
    s.counting.reset();
    s.array.read_chunk(&[3, 2], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(s.counting.counts().get, 1);
}

#[tokio::test]
async fn cold_read_of_nested_chunk_is_one_get_per_level_plus_one() {
    let spec = ArraySpec::new(&[8, 8], &[8, 8], &[4, 4]).nest(&[2, 2], IndexLocation::Start, LE);
    let built = spec.build("", &spec.full_chunks(8, 2, 10));
    let s = setup(&built, sticky());
    s.array.read_chunk(&[3, 1], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(s.counting.counts().get, 3);
    // Same sub-shard: one more get; another sub-shard of the same shard: two.
    s.counting.reset();
    s.array.read_chunk(&[2, 0], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(s.counting.counts().get, 1);
    s.counting.reset();
    s.array.read_chunk(&[0, 3], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(s.counting.counts().get, 2);
}

#[tokio::test]
async fn leaf_listing_costs_one_list_dir_and_one_get_per_uncached_shard() {
    // Inner grid [4, 6]; shard grid [2, 3]; each shard 2 x 2 inner chunks.
    let spec = ArraySpec::new(&[8, 12], &[4, 4], &[2, 2]);
    let mut chunks = spec.full_chunks(9, 1, 5);
    chunks.retain(|c, _| spec.shard_of(c) != vec![0, 2]); // shard row 0 has 2 shards
    let built = spec.build("", &chunks);
    let s = setup(&built, sticky());

    let listed = s.array.list_chunk_dir(&[0]).await.unwrap();
    assert_eq!(listed.len(), 4);
    assert_eq!(s.counting.counts().list_dir, 1);
    assert_eq!(s.counting.counts().get, 2, "one index per existing shard");
    assert_eq!(s.counting.counts().head, 0);

    // Row 1 lies in the same shards: no index fetched again.
    s.counting.reset();
    let listed = s.array.list_chunk_dir(&[1]).await.unwrap();
    assert_eq!(listed.len(), 4);
    assert_eq!(s.counting.counts(), counts(0, 0, 0, 1));

    // After one chunk of shard row 1 was read, listing row 2 fetches the other two indexes.
    s.array.read_chunk(&[2, 5], 0, 1).await.unwrap().unwrap();
    s.counting.reset();
    let listed = s.array.list_chunk_dir(&[2]).await.unwrap();
    assert_eq!(listed.len(), 6);
    assert_eq!(s.counting.counts().list_dir, 1);
    assert_eq!(s.counting.counts().get, 2);

    // Reading a listed chunk: only the chunk.
    s.counting.reset();
    s.array.read_chunk(&[3, 0], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(s.counting.counts().get, 1);

    // Prefix directories are exact: read from the indexes of the shards below, stopping at the
    // first chunk found for each row (here the first shard of each shard row), then cached.
    let s = setup(&built, sticky());
    assert_eq!(s.array.list_chunk_dir(&[]).await.unwrap().len(), 4);
    assert_eq!(s.counting.counts().get, 2, "one index per shard row");
    s.counting.reset();
    assert_eq!(s.array.list_array_dir().await.unwrap().len(), 1);
    assert_eq!(s.counting.counts().get, 0, "indexes are cached");
}

#[tokio::test]
async fn a_prefix_directory_exists_only_with_a_chunk_below_it() {
    // Inner grid [4, 6]; each shard holds inner rows 2s and 2s+1. Only row 0 has chunks, so
    // row 1 shares the shards of row 0 but must not exist (a client creating it must not
    // find it "already there").
    let spec = ArraySpec::new(&[8, 12], &[4, 4], &[2, 2]);
    let mut chunks = spec.full_chunks(3, 1, 5);
    chunks.retain(|c, _| c[0] == 0);
    let built = spec.build("", &chunks);
    let s = setup(&built, sticky());
    assert!(s.array.dir_exists(&[0]).await.unwrap());
    assert!(!s.array.dir_exists(&[1]).await.unwrap());
    assert!(!s.array.dir_exists(&[2]).await.unwrap());
    let names: Vec<String> = s
        .array
        .list_chunk_dir(&[])
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["0".to_string()]);
    assert!(s.array.list_chunk_dir(&[1]).await.unwrap().is_empty());
}

#[tokio::test]
async fn flat_listing_costs_one_list_dir_and_one_get_per_shard() {
    for enc in [DEF_DOT, V2_DOT] {
        let spec = ArraySpec::new(&[8, 12], &[4, 4], &[2, 2]).encoding(enc);
        let mut chunks = spec.full_chunks(10, 1, 5);
        chunks.retain(|c, _| spec.shard_of(c) != vec![1, 1]);
        let built = spec.build("x/", &chunks);
        let s = setup(&built, sticky());
        let listed = s.array.list_array_dir().await.unwrap();
        assert_eq!(listed.len(), 20);
        let c = s.counting.counts();
        assert_eq!((c.list_dir, c.get, c.head, c.list), (1, 5, 0, 0), "{enc:?}");
        s.counting.reset();
        s.array.read_chunk(&[3, 5], 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(s.counting.counts().get, 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Rewritten shards.

/// New contents for every chunk of shard (0, 0): same layout and sizes (the dangerous case: a
/// stale index would still point at plausible bytes), chunk (0, 1) dropped.
fn rewrite(spec: &ArraySpec, old: &Chunks) -> Chunks {
    let mut new = old.clone();
    for (c, b) in new.iter_mut() {
        if spec.shard_of(c) == vec![0, 0] {
            *b = chunk_bytes(c, b.len(), 4242);
        }
    }
    new.remove(&vec![0, 1]);
    new
}

async fn check_rewrite(options: ShardOptions) {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let old = spec.full_chunks(12, 8, 8);
    let built = spec.build("", &old);
    let s = setup(&built, options);
    let a = &s.array;
    for c in [vec![0, 0], vec![0, 1], vec![1, 1]] {
        assert_eq!(
            a.read_chunk(&c, 0, u64::MAX).await.unwrap().unwrap().1.to_vec(),
            old[&c]
        );
    }
    let new = rewrite(&spec, &old);
    s.memory
        .set("c/0/0", spec.shard_bytes(&[0, 0], &new).into())
        .await
        .unwrap();
    for c in [vec![0, 0], vec![1, 1], vec![1, 0]] {
        let got = a.read_chunk(&c, 0, u64::MAX).await.unwrap().unwrap().1;
        assert_eq!(got.to_vec(), new[&c], "chunk {c:?} after rewrite");
        assert_ne!(got.to_vec(), old[&c]);
        // Partial reads too.
        let part = a.read_chunk(&c, 2, 3).await.unwrap().unwrap().1;
        assert_eq!(part.to_vec(), new[&c][2..5].to_vec());
    }
    assert!(a.read_chunk(&[0, 1], 0, u64::MAX).await.unwrap().is_none());
    // Rewrite once more and read through the Store interface: new bytes or a refusal, never
    // the old bytes.
    let newer: Chunks = new
        .iter()
        .map(|(c, b)| (c.clone(), chunk_bytes(c, b.len(), 777)))
        .collect();
    s.memory
        .set("c/0/0", spec.shard_bytes(&[0, 0], &newer).into())
        .await
        .unwrap();
    match a.get("c/1/1", GetOptions::default()).await {
        Ok(Some(r)) => assert_eq!(r.bytes.to_vec(), newer[&vec![1, 1]]),
        Err(StoreError::VersionMismatch { .. }) => {}
        other => panic!("Store::get after rewrite: {other:?}"),
    }
    let got = a.read_chunk(&[1, 1], 0, u64::MAX).await.unwrap().unwrap().1;
    assert_eq!(got.to_vec(), newer[&vec![1, 1]]);
    // Erased shard: its chunks disappear.
    s.memory.erase("c/0/0").await.unwrap();
    assert!(a.read_chunk(&[1, 1], 0, u64::MAX).await.unwrap().is_none());
    // Other shards were never affected.
    assert_eq!(
        a.read_chunk(&[3, 3], 0, u64::MAX).await.unwrap().unwrap().1.to_vec(),
        old[&vec![3, 3]]
    );
}

#[tokio::test]
async fn rewritten_shard_is_not_stale_with_revalidation_every_time() {
    check_rewrite(ShardOptions {
        revalidate_after: Duration::ZERO,
        ..Default::default()
    })
    .await;
}

#[tokio::test]
async fn rewritten_shard_is_not_stale_with_default_options() {
    check_rewrite(ShardOptions::default()).await;
}

#[tokio::test]
async fn rewritten_shard_is_not_stale_with_a_cached_index_that_never_expires() {
    check_rewrite(sticky()).await;
}

/// A nested shard rewritten after its top index was cached: reading a chunk of a sub-shard
/// whose index is not cached yet must re-read the shard, not fail. (`read_chunk` promises to
/// re-locate when the shard changes; the pinned sub-index read inside `locate` is part of it.)
#[tokio::test]
async fn rewritten_nested_shard_is_reread_not_an_error() {
    for options in [sticky(), ShardOptions::default()] {
        // Shard [4, 4] -> sub-shards [2, 2] -> inner [1, 1].
        let spec = ArraySpec::new(&[4, 4], &[4, 4], &[2, 2]).nest(&[1, 1], IndexLocation::End, LE_CRC);
        let old = spec.full_chunks(21, 6, 6);
        let built = spec.build("", &old);
        let s = setup(&built, options.clone());
        // Caches the top index and sub-shard 0's index.
        let (_, b) = s.array.read_chunk(&[0, 0], 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(b.to_vec(), old[&vec![0, 0]]);
        let new: Chunks = old
            .iter()
            .map(|(c, b)| (c.clone(), chunk_bytes(c, b.len(), 99)))
            .collect();
        s.memory
            .set("c/0/0", spec.shard_bytes(&[0, 0], &new).into())
            .await
            .unwrap();
        // Sub-shard 3 (inner rows 2-3, columns 2-3): its index was never read.
        let got = s.array.read_chunk(&[3, 3], 0, u64::MAX).await;
        match got {
            Ok(Some((_, b))) => assert_eq!(b.to_vec(), new[&vec![3, 3]], "{options:?}"),
            other => panic!("{options:?}: read after rewrite gave {other:?}"),
        }
        let (_, b) = s.array.read_chunk(&[0, 0], 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(b.to_vec(), new[&vec![0, 0]]);
    }
}

#[tokio::test]
async fn revalidation_sees_new_sizes_in_lookups_and_listings() {
    let spec = ArraySpec::new(&[4, 4], &[4, 4], &[2, 2]);
    let old = spec.full_chunks(13, 10, 10);
    let built = spec.build("", &old);
    let s = setup(
        &built,
        ShardOptions {
            revalidate_after: Duration::ZERO,
            ..Default::default()
        },
    );
    assert_eq!(s.array.locate(&[1, 1]).await.unwrap().unwrap().nbytes, 10);
    let mut new = old.clone();
    new.insert(vec![1, 1], b"short".to_vec());
    new.remove(&vec![0, 0]);
    s.memory
        .set("c/0/0", spec.shard_bytes(&[0, 0], &new).into())
        .await
        .unwrap();
    assert_eq!(s.array.locate(&[1, 1]).await.unwrap().unwrap().nbytes, 5);
    assert_eq!(s.array.locate(&[0, 0]).await.unwrap(), None);
    let listed = s.array.list_chunk_dir(&[1]).await.unwrap();
    let sizes: Vec<(String, EntryKind)> = listed.into_iter().map(|e| (e.name, e.kind)).collect();
    assert_eq!(
        sizes,
        [
            ("0".to_string(), EntryKind::File { size: 10 }),
            ("1".to_string(), EntryKind::File { size: 5 })
        ]
    );
}

/// The same with a `LocalStore`, the shard replaced the way writers do it (temp file +
/// rename, here through `LocalStore::set`).
#[tokio::test]
async fn rewritten_shard_in_a_local_store_is_not_stale() {
    for options in [ShardOptions::default(), sticky()] {
        let dir = tempfile::tempdir().unwrap();
        let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(IndexLocation::Start, LE_CRC);
        let old = spec.full_chunks(14, 8, 8);
        let built = spec.build("", &old);
        built.write_dir(dir.path());
        let store = Arc::new(LocalStore::new(dir.path(), true).unwrap());
        let array = built.open(store.clone(), options.clone());
        check_reads(&array, &built).await;
        let new = rewrite(&spec, &old);
        store
            .set("c/0/0", spec.shard_bytes(&[0, 0], &new).into())
            .await
            .unwrap();
        for c in [vec![1, 0], vec![0, 0]] {
            let got = array.read_chunk(&c, 0, u64::MAX).await.unwrap().unwrap().1;
            assert_eq!(
                got.to_vec(),
                new[&c],
                "{options:?}: chunk {c:?} after the shard was replaced (old bytes: {})",
                got.to_vec() == old[&c]
            );
        }
        assert!(array.read_chunk(&[0, 1], 0, u64::MAX).await.unwrap().is_none());
    }
}

// ---------------------------------------------------------------------------------------------
// Corrupt shards.

fn assert_corrupt<T: std::fmt::Debug>(r: Result<T, ShardError>, key: &str, what: &str) {
    match r {
        Err(ShardError::Corrupt { key: k, why, .. }) => {
            assert_eq!(k, key, "{what}: wrong key in {why}");
        }
        other => panic!("{what}: expected Corrupt({key}), got {other:?}"),
    }
}

/// Corrupt shard `c/0/0` of a 2-D array with `bytes` and check that every access to it is a
/// `Corrupt` error naming it, while shard `c/1/1` keeps working.
async fn check_corrupt(spec: &ArraySpec, bytes: Vec<u8>, what: &str) {
    let chunks = spec.full_chunks(15, 4, 12);
    let built = spec.build("g/arr/", &chunks);
    let s = setup(&built, sticky());
    s.memory.insert("g/arr/c/0/0", bytes);
    let key = "g/arr/c/0/0";
    let a = &s.array;
    assert_corrupt(a.locate(&[0, 0]).await, key, what);
    assert_corrupt(a.read_chunk(&[1, 1], 0, 10).await, key, what);
    assert_corrupt(a.list_chunk_dir(&[0]).await, key, what);
    assert_corrupt(a.chunks_of_shard(&[0, 0]).await, key, what);
    match a.get("c/0/0", GetOptions::default()).await {
        Err(e) => assert!(e.to_string().contains(key), "{what}: {e}"),
        Ok(r) => panic!("{what}: Store::get gave {r:?}"),
    }
    // Errors are not cached as absence, and do not poison the other shards.
    assert_corrupt(a.locate(&[0, 1]).await, key, what);
    let p = spec.per_shard()[0];
    for c in [vec![p, p], vec![2 * p - 1, 2 * p - 1], vec![p, 2 * p - 1]] {
        let (_, b) = a.read_chunk(&c, 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(b.to_vec(), built.expected[&c], "{what}: other shard");
    }
    assert_eq!(
        a.list_chunk_dir(&[p]).await.unwrap().len() as u64,
        spec.inner_grid()[1],
        "{what}"
    );
    // Repaired: readable again. (For nested layouts the top index stays cached across the
    // repair; that case is `rewritten_nested_shard_is_reread_not_an_error`.)
    if spec.levels.len() > 1 {
        return;
    }
    s.memory.insert(key, built.files[key].clone());
    let (_, b) = a.read_chunk(&[1, 1], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(b.to_vec(), built.expected[&vec![1, 1]], "{what}: repaired");
}

fn good_shard(spec: &ArraySpec) -> Vec<u8> {
    spec.shard_bytes(&[0, 0], &spec.full_chunks(15, 4, 12))
}

#[tokio::test]
async fn crc_mismatch_is_corrupt() {
    for location in [IndexLocation::End, IndexLocation::Start] {
        for codec in [LE_CRC, BE_CRC] {
            let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(location, codec);
            let mut bytes = good_shard(&spec);
            let isz = index_size(4, codec) as usize;
            let at = match location {
                IndexLocation::Start => 3,
                IndexLocation::End => bytes.len() - isz + 3,
            };
            bytes[at] ^= 0x01;
            check_corrupt(&spec, bytes.clone(), "entry byte flipped").await;
            let last_crc_byte = match location {
                IndexLocation::Start => isz - 1,
                IndexLocation::End => bytes.len() - 1,
            };
            bytes[at] ^= 0x01;
            bytes[last_crc_byte] ^= 0x80;
            check_corrupt(&spec, bytes, "checksum byte flipped").await;
        }
    }
}

#[tokio::test]
async fn truncated_shard_is_corrupt() {
    for location in [IndexLocation::End, IndexLocation::Start] {
        for codec in ALL_INDEX_CODECS {
            let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(location, codec);
            let bytes = good_shard(&spec);
            let isz = index_size(4, codec) as usize;
            check_corrupt(&spec, Vec::new(), "empty shard").await;
            check_corrupt(&spec, bytes[..10].to_vec(), "10 bytes").await;
            check_corrupt(&spec, bytes[..isz - 1].to_vec(), "index minus one").await;
            // Cut the data: the index (kept whole) points past the end.
            let cut = match location {
                IndexLocation::End => [&bytes[..8], &bytes[bytes.len() - isz..]].concat(),
                IndexLocation::Start => bytes[..isz + 8].to_vec(),
            };
            check_corrupt(&spec, cut, "data cut").await;
        }
    }
}

/// A shard whose index (valid checksum) has entry 2 pointing past the end of the data.
fn shard_with_entry(location: IndexLocation, codec: zarrfs::zarr::sharding::IndexCodec, range: ChunkRange) -> Vec<u8> {
    let isz = index_size(4, codec);
    let data = vec![7u8; 40];
    let base = match location {
        IndexLocation::Start => isz,
        IndexLocation::End => 0,
    };
    let mut index = ShardIndex::empty(4).unwrap();
    index
        .set(
            0,
            Some(ChunkRange {
                offset: base,
                nbytes: 10,
            }),
        )
        .unwrap();
    index
        .set(
            2,
            Some(ChunkRange {
                offset: base + range.offset,
                nbytes: range.nbytes,
            }),
        )
        .unwrap();
    let encoded = index.encode(codec);
    match location {
        IndexLocation::Start => [encoded, data].concat(),
        IndexLocation::End => [data, encoded].concat(),
    }
}

#[tokio::test]
async fn index_entry_past_the_end_is_corrupt() {
    for location in [IndexLocation::End, IndexLocation::Start] {
        for codec in ALL_INDEX_CODECS {
            let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(location, codec);
            for (offset, nbytes) in [(35, 6), (40, 1), (0, 41), (1 << 40, 1), (2, u64::MAX - 200)] {
                let bytes = shard_with_entry(location, codec, ChunkRange { offset, nbytes });
                check_corrupt(&spec, bytes, &format!("entry {offset}+{nbytes}")).await;
            }
            // The same entry ending exactly at the end of the data is fine.
            let ok = shard_with_entry(location, codec, ChunkRange { offset: 30, nbytes: 10 });
            let built = spec.build("", &Chunks::new());
            let s = setup(&built, sticky());
            s.memory.insert("c/0/0", ok);
            let (_, b) = s.array.read_chunk(&[1, 0], 0, u64::MAX).await.unwrap().unwrap();
            assert_eq!(b.to_vec(), vec![7u8; 10]);
        }
    }
}

/// With the index at the start, chunk data lies after the index. An entry that points into
/// the index itself is not a chunk (`decode_index` in src/shard/array.rs documents "Chunks
/// must lie inside the (sub-)shard and outside its index").
#[tokio::test]
async fn start_index_entry_overlapping_the_index_is_corrupt() {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).index(IndexLocation::Start, LE);
    let mut index = ShardIndex::empty(4).unwrap();
    index.set(0, Some(ChunkRange { offset: 0, nbytes: 16 })).unwrap();
    let bytes = [index.encode(LE), vec![1u8; 16]].concat();
    check_corrupt(&spec, bytes, "entry inside the start index").await;
}

/// Locate the byte range of sub-shard `sub` inside stored shard bytes (top index at the end).
fn sub_shard_range(bytes: &[u8], n: u64, codec: zarrfs::zarr::sharding::IndexCodec, sub: u64) -> ChunkRange {
    let isz = index_size(n, codec) as usize;
    let idx = ShardIndex::decode(&bytes[bytes.len() - isz..], n, codec, (bytes.len() - isz) as u64).unwrap();
    idx.get(sub).unwrap()
}

#[tokio::test]
async fn corrupt_nested_index_is_corrupt() {
    // Shard [4, 4] -> sub-shards [2, 2] (index at end, crc) -> inner [1, 1].
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]).nest(&[1, 1], IndexLocation::End, LE_CRC);
    let good = good_shard(&spec);
    let r = sub_shard_range(&good, 4, LE_CRC, 0);
    let sub_isz = index_size(4, LE_CRC) as usize;
    let sub_end = (r.offset + r.nbytes) as usize;

    let mut bad_crc = good.clone();
    bad_crc[sub_end - sub_isz + 1] ^= 0x10;
    check_corrupt(&spec, bad_crc, "nested crc").await;

    // A sub-index (valid crc) pointing past the end of its sub-shard.
    let mut idx = ShardIndex::empty(4).unwrap();
    idx.set(
        1,
        Some(ChunkRange {
            offset: 0,
            nbytes: r.nbytes,
        }),
    )
    .unwrap();
    let mut bad_entry = good.clone();
    bad_entry[sub_end - sub_isz..sub_end].copy_from_slice(&idx.encode(LE_CRC));
    check_corrupt(&spec, bad_entry, "nested entry past end").await;

    // A sub-shard entry shorter than the sub-shard's index.
    let top_isz = index_size(4, LE_CRC) as usize;
    let mut top = ShardIndex::decode(&good[good.len() - top_isz..], 4, LE_CRC, (good.len() - top_isz) as u64).unwrap();
    top.set(
        0,
        Some(ChunkRange {
            offset: r.offset,
            nbytes: 5,
        }),
    )
    .unwrap();
    let mut short = good.clone();
    let n = short.len();
    short[n - top_isz..].copy_from_slice(&top.encode(LE_CRC));
    check_corrupt(&spec, short, "sub-shard shorter than its index").await;
}

// ---------------------------------------------------------------------------------------------
// Listing across encodings, dimensions and nesting.

#[tokio::test]
async fn listing_names_and_sizes_1d_to_4d_every_encoding() {
    let shapes: [(&[u64], &[u64], &[u64]); 4] = [
        (&[13], &[6], &[2]),
        (&[5, 9], &[4, 6], &[2, 3]),
        (&[3, 4, 5], &[2, 2, 4], &[1, 2, 2]),
        (&[3, 2, 3, 5], &[2, 2, 2, 4], &[1, 1, 2, 2]),
    ];
    for (i, (shape, shard, inner)) in shapes.into_iter().enumerate() {
        for enc in ALL_ENCODINGS {
            let spec = ArraySpec::new(shape, shard, inner).encoding(enc);
            let chunks = spec.random_chunks(100 + i as u64, 60, 9);
            let built = spec.build("deep/er/", &chunks);
            let s = setup(&built, sticky());
            check_listing(&s.array, &built).await;
            check_reads(&s.array, &built).await;
        }
    }
}

#[tokio::test]
async fn listing_exact_names_for_each_encoding() {
    // 2-D, inner grid [3, 2]; chunk (0, 1) and (2, 0) absent.
    let spec = ArraySpec::new(&[6, 4], &[4, 4], &[2, 2]);
    let mut chunks = Chunks::new();
    for c in [[0, 0], [1, 0], [1, 1], [2, 1]] {
        chunks.insert(c.to_vec(), chunk_bytes(&c, c[0] as usize + 3, 0));
    }
    let names = |v: Vec<zarrfs::store::DirEntry>| -> Vec<(String, Option<u64>)> {
        v.into_iter()
            .map(|e| match e.kind {
                EntryKind::File { size } => (e.name, Some(size)),
                EntryKind::Dir => (e.name, None),
            })
            .collect()
    };
    let f = |n: &str, s: u64| (n.to_string(), Some(s));
    let d = |n: &str| (n.to_string(), None);

    let s = setup(&spec.clone().build("", &chunks), sticky());
    assert_eq!(names(s.array.list_array_dir().await.unwrap()), [d("c")]);
    assert_eq!(
        names(s.array.list_chunk_dir(&[]).await.unwrap()),
        [d("0"), d("1"), d("2")]
    );
    assert_eq!(
        names(s.array.list_chunk_dir(&[1]).await.unwrap()),
        [f("0", 4), f("1", 4)]
    );
    assert_eq!(names(s.array.list_chunk_dir(&[2]).await.unwrap()), [f("1", 5)]);

    let s = setup(&spec.clone().encoding(V2_SLASH).build("", &chunks), sticky());
    assert_eq!(names(s.array.list_array_dir().await.unwrap()), [d("0"), d("1"), d("2")]);
    assert_eq!(names(s.array.list_chunk_dir(&[0]).await.unwrap()), [f("0", 3)]);

    for (enc, expect) in [
        (DEF_DOT, ["c.0.0", "c.1.0", "c.1.1", "c.2.1"]),
        (V2_DOT, ["0.0", "1.0", "1.1", "2.1"]),
    ] {
        let s = setup(&spec.clone().encoding(enc).build("", &chunks), sticky());
        let mut got = names(s.array.list_array_dir().await.unwrap());
        got.sort();
        let sizes = [3, 4, 4, 5];
        let want: Vec<_> = expect.iter().zip(sizes).map(|(n, s)| f(n, s)).collect();
        assert_eq!(got, want, "{enc:?}");
        assert!(s.array.list_chunk_dir(&[]).await.unwrap().is_empty());
        assert!(!s.array.dir_exists(&[]).await.unwrap());
    }
}

#[tokio::test]
async fn nested_sharding_two_levels_lists_and_reads() {
    for enc in ALL_ENCODINGS {
        for (outer, inner) in [
            (IndexLocation::End, IndexLocation::Start),
            (IndexLocation::Start, IndexLocation::End),
        ] {
            // Shard [6, 8] -> sub-shards [3, 4] -> inner [1, 2]; shape leaves edge shards.
            let spec = ArraySpec::new(&[10, 13], &[6, 8], &[3, 4])
                .index(outer, LE_CRC)
                .nest(&[1, 2], inner, BE)
                .encoding(enc)
                .gap(1)
                .reverse(true);
            let chunks = spec.random_chunks(200, 65, 7);
            let built = spec.build("n/", &chunks);
            let s = setup(&built, sticky());
            check_listing(&s.array, &built).await;
            check_reads(&s.array, &built).await;
        }
    }
    // Three levels deep.
    let spec = ArraySpec::new(&[8, 8], &[8, 8], &[4, 4])
        .nest(&[2, 2], IndexLocation::Start, LE_CRC)
        .nest(&[1, 1], IndexLocation::End, BE_CRC);
    let built = spec.build("", &spec.random_chunks(300, 80, 5));
    let s = setup(&built, sticky());
    check_listing(&s.array, &built).await;
    check_reads(&s.array, &built).await;
}

// ---------------------------------------------------------------------------------------------
// Property tests.

#[derive(Debug, Clone)]
struct Case {
    dims: Vec<(u64, u64, u64, u64, u64)>, // (inner, b, a, shards, short) per dim
    nested: bool,
    levels: Vec<(bool, u8)>, // (start?, codec index) per level
    enc: usize,
    seed: u64,
    p: u64,
    max_len: usize,
    gap: usize,
    reverse: bool,
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1u64..=3, 1u64..=2, 1u64..=2, 1u64..=3, 0u64..100), 1..=3),
        any::<bool>(),
        prop::collection::vec((any::<bool>(), 0u8..4), 2),
        0usize..4,
        any::<u64>(),
        0u64..=100,
        0usize..20,
        0usize..3,
        any::<bool>(),
    )
        .prop_map(|(dims, nested, levels, enc, seed, p, max_len, gap, reverse)| Case {
            dims,
            nested,
            levels,
            enc,
            seed,
            p,
            max_len,
            gap,
            reverse,
        })
}

fn spec_of(case: &Case) -> ArraySpec {
    let inner: Vec<u64> = case.dims.iter().map(|d| d.0).collect();
    let mid: Vec<u64> = case.dims.iter().map(|d| d.0 * d.1).collect();
    let shard: Vec<u64> = case.dims.iter().map(|d| d.0 * d.1 * d.2).collect();
    // Shape: `shards` shards, the last one cut short by some amount.
    let shape: Vec<u64> = case
        .dims
        .iter()
        .zip(&shard)
        .map(|(d, s)| (d.3 - 1) * s + 1 + d.4 % s)
        .collect();
    let codec = |i: u8| ALL_INDEX_CODECS[i as usize];
    let loc = |start: bool| {
        if start {
            IndexLocation::Start
        } else {
            IndexLocation::End
        }
    };
    let (l0, l1) = (case.levels[0], case.levels[1]);
    let spec = if case.nested {
        ArraySpec::new(&shape, &shard, &mid)
            .index(loc(l0.0), codec(l0.1))
            .nest(&inner, loc(l1.0), codec(l1.1))
    } else {
        ArraySpec::new(&shape, &shard, &inner).index(loc(l0.0), codec(l0.1))
    };
    spec.encoding(ALL_ENCODINGS[case.enc])
        .gap(case.gap)
        .reverse(case.reverse)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn transformer_equals_model(case in arb_case()) {
        let spec = spec_of(&case);
        let chunks = spec.random_chunks(case.seed, case.p, case.max_len);
        let built = spec.build("p/q/", &chunks);
        runtime().block_on(async {
            let s = setup(&built, sticky());
            check_listing(&s.array, &built).await;
            check_reads(&s.array, &built).await;
            // The same through a fresh array that revalidates on every access.
            let s = setup(&built, ShardOptions { revalidate_after: Duration::ZERO, ..Default::default() });
            check_reads(&s.array, &built).await;
            check_listing(&s.array, &built).await;
        });
    }

    #[test]
    fn garbage_shards_never_panic(
        case in arb_case(),
        garbage in prop::collection::vec(any::<u8>(), 0..400),
        mutate in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        mode in 0u8..3,
    ) {
        let spec = spec_of(&case);
        let chunks = spec.full_chunks(case.seed, 0, 8);
        let built = spec.build("", &chunks);
        let zero = vec![0; spec.ndim()];
        let key = built.shard_key(&zero);
        let mut bytes = built.files[&key].clone();
        match mode {
            0 => bytes = garbage,
            1 => {
                for (i, x) in &mutate {
                    if !bytes.is_empty() {
                        let at = i.index(bytes.len());
                        bytes[at] ^= x | 1;
                    }
                }
            }
            _ => bytes.truncate(cut.index(bytes.len() + 1)),
        }
        runtime().block_on(async {
            let s = setup(&built, sticky());
            s.memory.insert(&key, bytes);
            for c in spec.covered_coords() {
                let in_shard0 = spec.shard_of(&c) == zero;
                match s.array.read_chunk(&c, 0, u64::MAX).await {
                    Ok(Some((loc, b))) => {
                        prop_assert_eq!(b.len() as u64, loc.nbytes);
                        if !in_shard0 {
                            prop_assert_eq!(Some(&b.to_vec()), built.expected.get(&c));
                        }
                    }
                    Ok(None) => {
                        if !in_shard0 {
                            prop_assert!(!built.expected.contains_key(&c));
                        }
                    }
                    Err(ShardError::Corrupt { key: k, .. }) => {
                        prop_assert!(in_shard0, "corrupt outside shard 0: {}", k);
                        prop_assert_eq!(&k, &key);
                    }
                    Err(e) => prop_assert!(false, "unexpected error {}", e),
                }
            }
            let _ = s.array.list_array_dir().await;
            let _ = s.array.list_prefix("").await;
            Ok::<(), TestCaseError>(())
        })?;
    }
}

#[tokio::test]
async fn zero_dimensional_array_has_one_chunk() {
    for enc in ALL_ENCODINGS {
        let spec = ArraySpec::new(&[], &[], &[]).encoding(enc);
        let mut chunks = Chunks::new();
        chunks.insert(vec![], b"scalar".to_vec());
        let built = spec.build("s/", &chunks);
        let key = enc.encode(&[]);
        assert!(built.files.contains_key(&format!("s/{key}")));
        let s = setup(&built, sticky());
        let (_, b) = s.array.read_chunk(&[], 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(&b[..], b"scalar");
        check_listing(&s.array, &built).await;
        check_reads(&s.array, &built).await;
    }
}

/// Options of an object-store mount: a data cache and a prefetch window read with each index.
fn remote_like(prefetch: u64, cache: usize) -> ShardOptions {
    ShardOptions {
        revalidate_after: Duration::from_secs(3600),
        prefetch_bytes: prefetch,
        data_cache: Some(Arc::new(zarrfs::shard::DataCache::new(cache, Default::default()))),
        revalidate_on_open: false,
        exact_prefix_dirs: false,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_shard_within_the_prefetch_window_costs_one_request_in_all() {
    for location in [IndexLocation::End, IndexLocation::Start] {
        let spec = ArraySpec::new(&[8, 12], &[4, 4], &[2, 2]).index(location, LE_CRC);
        let built = spec.build("", &spec.full_chunks(9, 1, 5));
        let s = setup(&built, remote_like(1 << 20, 16 << 20));
        for coords in [[0u64, 0], [0, 1], [1, 0], [1, 1]] {
            let (_, bytes) = s.array.read_chunk(&coords, 0, u64::MAX).await.unwrap().unwrap();
            assert_eq!(
                &bytes[..],
                &built.expected[&coords.to_vec()][..],
                "{location:?} {coords:?}"
            );
        }
        assert_eq!(
            s.counting.counts().get,
            1,
            "{location:?}: index and all four chunks in one request"
        );
        // Warm: nothing more.
        s.array.read_chunk(&[1, 1], 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(s.counting.counts().get, 1);
    }
}

#[tokio::test]
async fn a_reader_walking_a_large_shard_gets_it_in_few_requests() {
    // 16 chunks of 5 bytes per shard; a prefetch window of one index only: a walker's third
    // miss fetches the rest of the shard (small enough to be fetched whole).
    let spec = ArraySpec::new(&[8, 8], &[8, 8], &[2, 2]);
    let built = spec.build("", &spec.full_chunks(5, 5, 5));
    let s = setup(&built, remote_like(0, 16 << 20));
    for coords in spec.covered_coords() {
        let (_, bytes) = s.array.read_chunk(&coords, 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(&bytes[..], &built.expected[&coords][..], "{coords:?}");
    }
    let gets = s.counting.counts().get;
    assert!(
        gets <= 4,
        "16 chunks of one shard cost {gets} requests (index, two misses, the whole shard)"
    );
}

#[tokio::test]
async fn cached_shard_bytes_are_never_served_for_another_version() {
    let spec = ArraySpec::new(&[4, 4], &[4, 4], &[2, 2]);
    let built = spec.build("", &spec.full_chunks(6, 1, 5));
    let s = setup(&built, remote_like(1 << 20, 16 << 20));
    s.array.read_chunk(&[0, 0], 0, u64::MAX).await.unwrap().unwrap();
    // Rewrite the shard with other bytes; the cached index and region are of the old version.
    let mut other = built.expected.clone();
    for bytes in other.values_mut() {
        bytes.iter_mut().for_each(|b| *b = b.wrapping_add(1));
    }
    let rebuilt = spec.build("", &other);
    for (key, bytes) in &rebuilt.files {
        s.memory.insert(key, bytes.clone());
    }
    s.array.forget_shard(&s.array.shard_key(&[0, 0]));
    let (_, bytes) = s.array.read_chunk(&[1, 1], 0, u64::MAX).await.unwrap().unwrap();
    assert_eq!(&bytes[..], &other[&vec![1, 1]][..]);
}

// ---------------------------------------------------------------------------------------------
// The transformer as a store: chunk keys written and erased through the Store interface.

#[tokio::test]
async fn chunk_keys_are_written_and_erased_through_the_store_interface() {
    let spec = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let chunks = spec.full_chunks(3, 1, 9);
    let built = spec.build("a/", &chunks);
    let s = setup(&built, sticky());
    // Over the memory store itself: it has the conditional writes a commit needs.
    let a = &built.open(s.memory.clone(), sticky());
    assert!(a.capabilities().writable);
    a.set("c/1/2", bytes::Bytes::from_static(b"new bytes")).await.unwrap();
    let got = a.get("c/1/2", GetOptions::default()).await.unwrap().unwrap();
    assert_eq!(&got.bytes[..], b"new bytes");
    // The neighbours in the same shard are untouched, and the stored shard holds the change.
    assert_eq!(
        a.get("c/0/2", GetOptions::default())
            .await
            .unwrap()
            .unwrap()
            .bytes
            .to_vec(),
        built.expected[&vec![0, 2]]
    );
    let fresh = built.open(s.memory.clone(), sticky());
    assert_eq!(
        &fresh.read_chunk(&[1, 2], 0, 100).await.unwrap().unwrap().1[..],
        b"new bytes"
    );
    a.erase("c/1/2").await.unwrap();
    assert!(a.get("c/1/2", GetOptions::default()).await.unwrap().is_none());
    let fresh = built.open(s.memory.clone(), sticky());
    assert!(fresh.read_chunk(&[1, 2], 0, 100).await.unwrap().is_none());
    // Keys that are not chunks of the grid cannot be written.
    for key in ["c/4/0", "zarr.json", "c/1", "other"] {
        assert!(
            matches!(
                a.set(key, bytes::Bytes::from_static(b"x")).await,
                Err(zarrfs::store::StoreError::InvalidKey { .. })
            ),
            "{key}"
        );
    }
}
