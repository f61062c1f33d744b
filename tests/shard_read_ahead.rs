//! The sharding layer at latency: a store whose every request takes a round trip, and what
//! goes out concurrently, once each, and ahead of a walk (src/shard/read_ahead.rs).

mod common;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use zarrfs::shard::{DataCache, ShardOptions, ShardStats};
use zarrfs::store::{Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreResult, Version};

const RTT: Duration = Duration::from_millis(30);

/// A store that answers each request after a round trip, counting requests and the most in
/// flight at once.
#[derive(Debug)]
struct Latent {
    inner: Arc<dyn Store>,
    gets: AtomicU64,
    lists: AtomicU64,
    in_flight: AtomicU64,
    peak: AtomicU64,
}

impl Latent {
    fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Latent {
            inner,
            gets: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        })
    }

    async fn trip(&self) {
        let now = self.in_flight.fetch_add(1, Relaxed) + 1;
        self.peak.fetch_max(now, Relaxed);
        tokio::time::sleep(RTT).await;
        self.in_flight.fetch_sub(1, Relaxed);
    }
}

#[async_trait]
impl Store for Latent {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.gets.fetch_add(1, Relaxed);
        self.trip().await;
        self.inner.get(key, opts).await
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.trip().await;
        self.inner.head(key).await
    }
    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.inner.set(key, value).await
    }
    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.inner.erase(key).await
    }
    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.trip().await;
        self.inner.list_prefix(prefix).await
    }
    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.lists.fetch_add(1, Relaxed);
        self.trip().await;
        self.inner.list_dir(prefix).await
    }
}

/// An object-store mount's options: a data cache of `cache` bytes, windows of 1 MiB.
fn remote(cache: usize, stats: &Arc<ShardStats>) -> ShardOptions {
    ShardOptions {
        revalidate_after: Duration::from_secs(3600),
        prefetch_bytes: 1 << 20,
        data_cache: Some(Arc::new(DataCache::new(cache, stats.clone()))),
        revalidate_on_open: false,
        exact_prefix_dirs: false,
        stats: stats.clone(),
        ..Default::default()
    }
}

struct Setup {
    latent: Arc<Latent>,
    array: Arc<zarrfs::shard::ShardedArray>,
    stats: Arc<ShardStats>,
    built: Built,
    spec: ArraySpec,
}

fn setup(spec: ArraySpec, cache: usize) -> Setup {
    let built = spec.build("a/", &spec.full_chunks(3, 40, 60));
    let latent = Latent::new(memory_store(&built.files));
    let stats = Arc::new(ShardStats::default());
    let array = built.open(latent.clone(), remote(cache, &stats)).shared();
    Setup {
        latent,
        array,
        stats,
        built,
        spec,
    }
}

fn name(c: u64) -> String {
    c.to_string()
}

#[tokio::test]
async fn a_listing_fetches_the_indexes_of_its_shards_concurrently_and_once_each() {
    // One row of 16 shards: the leaf directory c/0 spans all of them.
    let s = setup(ArraySpec::new(&[2, 64], &[2, 4], &[2, 2]), 64 << 20);
    let listed = s.array.list_chunk_dir(&[0]).await.unwrap();
    assert_eq!(listed.len(), 32, "every chunk of the row: {listed:?}");
    let names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
    let by_number: Vec<String> = (0..32).map(name).collect();
    assert_eq!(
        names, by_number,
        "listed in the order of coordinates (\"9\" before \"10\")"
    );
    assert_eq!(s.latent.gets.load(Relaxed), 16, "one request per shard");
    let peak = s.latent.peak.load(Relaxed);
    assert!(peak >= 8, "the 16 index reads went out {peak} at a time");
}

#[tokio::test]
async fn concurrent_readers_of_one_shard_send_one_request() {
    let s = setup(ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]), 64 << 20);
    let reads = (0..4u64).map(|i| {
        let array = s.array.clone();
        async move { array.read_chunk(&[i / 2, i % 2], 0, u64::MAX).await }
    });
    for (i, got) in futures::future::join_all(reads).await.into_iter().enumerate() {
        let coords = vec![i as u64 / 2, i as u64 % 2];
        let (_, bytes) = got.unwrap().expect("present");
        assert_eq!(&bytes[..], &s.built.expected[&coords][..]);
    }
    assert_eq!(
        s.latent.gets.load(Relaxed),
        1,
        "four readers of shard (0, 0): one request"
    );
}

/// Wait (bounded) until the background read-ahead has loaded `n` indexes.
async fn read_ahead(stats: &ShardStats, n: u64) -> u64 {
    for _ in 0..200 {
        if stats.ahead_indexes.load(Relaxed) >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(RTT * 2).await; // nothing more arrives
    stats.ahead_indexes.load(Relaxed)
}

#[tokio::test]
async fn a_walk_finds_its_shards_fetched_ahead() {
    // 4 × 4 shards of 2 × 2 chunks; listing the chunk root starts the read-ahead of all 16.
    let s = setup(ArraySpec::new(&[16, 16], &[4, 4], &[2, 2]), 64 << 20);
    let top = s.array.list_chunk_dir(&[]).await.unwrap();
    assert_eq!(top.len(), 8, "{top:?}");
    assert_eq!(read_ahead(&s.stats, 16).await, 16);
    let before = s.latent.gets.load(Relaxed);
    assert_eq!(before, 16, "one request per shard, fetched ahead");
    // The walk: every leaf directory, every chunk, as `cp -r` does.
    for row in 0..8 {
        let files = s.array.list_chunk_dir(&[row]).await.unwrap();
        assert_eq!(files.len(), 8);
        for col in 0..8 {
            let (_, bytes) = s.array.read_chunk(&[row, col], 0, u64::MAX).await.unwrap().unwrap();
            assert_eq!(&bytes[..], &s.built.expected[&vec![row, col]][..], "{row}/{col}");
        }
        assert_eq!(
            files.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
            (0..8).map(name).collect::<Vec<_>>()
        );
    }
    assert_eq!(s.latent.gets.load(Relaxed), before, "the walk sent no GET of its own");
    let used = s.stats.ahead_used_bytes.load(Relaxed);
    assert_eq!(
        used,
        s.stats.ahead_bytes.load(Relaxed),
        "every byte fetched ahead was read"
    );
    assert_eq!(s.stats.ahead_wasted_bytes.load(Relaxed), 0);
    let _ = &s.spec;
}

/// 16 shards of 4 chunks of 1,000 bytes (about 4 KiB a shard), windows of 4 KiB (a whole
/// shard each), a data cache of `cache` bytes.
fn four_kib_shards(cache: usize) -> (Arc<Latent>, Arc<zarrfs::shard::ShardedArray>, Arc<ShardStats>, Built) {
    let spec = ArraySpec::new(&[16, 16], &[4, 4], &[2, 2]);
    let built = spec.build("a/", &spec.full_chunks(3, 1000, 1000));
    let latent = Latent::new(memory_store(&built.files));
    let stats = Arc::new(ShardStats::default());
    let options = ShardOptions {
        prefetch_bytes: 4096,
        ..remote(cache, &stats)
    };
    let array = built.open(latent.clone(), options).shared();
    (latent, array, stats, built)
}

#[tokio::test]
async fn read_ahead_for_a_reader_stays_within_a_quarter_of_the_data_cache() {
    // A cache of 32 KiB leaves a budget of 8 KiB: two shards fetched ahead and not read yet
    // fill it.
    let (_, array, stats, _) = four_kib_shards(32 << 10);
    array.read_chunk(&[0, 0], 0, u64::MAX).await.unwrap().unwrap(); // a reader
    array.list_chunk_dir(&[]).await.unwrap();
    let ahead = read_ahead(&stats, 15).await;
    assert!((1..=2).contains(&ahead), "{ahead} shards read ahead with room for 2");
    assert!(stats.ahead_bytes.load(Relaxed) <= 8 << 10);
}

#[tokio::test]
async fn a_walk_that_only_lists_fetches_indexes_alone() {
    // A cache of 128 KiB: before the walk shows what it does, read-ahead may hold 8 KiB.
    let (latent, array, stats, built) = four_kib_shards(128 << 10);
    array.list_chunk_dir(&[]).await.unwrap();
    for row in 0..8 {
        assert_eq!(array.list_chunk_dir(&[row]).await.unwrap().len(), 8);
    }
    read_ahead(&stats, 16).await;
    assert_eq!(latent.gets.load(Relaxed), 16, "every shard's index, once");
    // Windows: the two read ahead at first, and the four shards of the first row, listed
    // before the walk had shown that it reads nothing.
    let windows = stats.ahead_bytes.load(Relaxed);
    assert!(
        windows <= 6 * 4200,
        "{windows} bytes of windows for a walk that reads nothing"
    );
    // Now it reads (rsync lists everything first): one request per shard brings its bytes.
    for row in 0..8 {
        for col in 0..8 {
            let (_, bytes) = array.read_chunk(&[row, col], 0, u64::MAX).await.unwrap().unwrap();
            assert_eq!(&bytes[..], &built.expected[&vec![row, col]][..]);
        }
    }
    let gets = latent.gets.load(Relaxed);
    assert!(
        gets <= 32,
        "{gets} requests: more than one per shard to read what was listed"
    );
}

#[tokio::test]
async fn local_stores_read_nothing_ahead() {
    let spec = ArraySpec::new(&[16, 16], &[4, 4], &[2, 2]);
    let built = spec.build("a/", &spec.full_chunks(3, 40, 60));
    let latent = Latent::new(memory_store(&built.files));
    let stats = Arc::new(ShardStats::default());
    let options = ShardOptions {
        stats: stats.clone(),
        ..Default::default()
    };
    let array = built.open(latent.clone(), options).shared();
    array.list_chunk_dir(&[]).await.unwrap();
    assert_eq!(read_ahead(&stats, 1).await, 0, "no data cache: nothing read ahead");
}

#[tokio::test]
async fn concurrent_readers_of_a_shard_listed_without_its_bytes_send_one_request() {
    let (latent, array, _, built) = four_kib_shards(128 << 10);
    for row in [0, 1, 6] {
        // Rows 0 and 1: a walk that only lists; row 6 (shard row 3) is then listed alone.
        array.list_chunk_dir(&[row]).await.unwrap();
    }
    tokio::time::sleep(RTT * 4).await; // its read-ahead is done
    let before = latent.gets.load(Relaxed);
    let reads = (0..4u64).map(|i| {
        let array = array.clone();
        async move { array.read_chunk(&[6 + i / 2, i % 2], 0, u64::MAX).await }
    });
    for (i, got) in futures::future::join_all(reads).await.into_iter().enumerate() {
        let coords = vec![6 + i as u64 / 2, i as u64 % 2];
        let (_, bytes) = got.unwrap().expect("present");
        assert_eq!(&bytes[..], &built.expected[&coords][..]);
    }
    assert_eq!(
        latent.gets.load(Relaxed) - before,
        1,
        "four readers of shard (3, 0): one request"
    );
}

#[tokio::test]
async fn a_reader_going_in_order_without_listing_finds_shards_fetched_ahead() {
    // As zarr-python reads: every chunk by name, in C order, none listed.
    let s = setup(ArraySpec::new(&[16, 16], &[4, 4], &[2, 2]), 64 << 20);
    for row in 0..8 {
        for col in 0..8 {
            let (_, bytes) = s.array.read_chunk(&[row, col], 0, u64::MAX).await.unwrap().unwrap();
            assert_eq!(&bytes[..], &s.built.expected[&vec![row, col]][..], "{row}/{col}");
        }
    }
    tokio::time::sleep(RTT * 2).await;
    assert_eq!(s.latent.gets.load(Relaxed), 16, "each shard once");
    let ahead = s.stats.ahead_indexes.load(Relaxed);
    assert!(
        ahead >= 13,
        "only {ahead} of 16 shards were fetched ahead of the reader"
    );
    assert_eq!(s.stats.ahead_wasted_bytes.load(Relaxed), 0);
}

#[tokio::test]
async fn a_reader_jumping_around_gets_nothing_read_ahead() {
    let s = setup(ArraySpec::new(&[16, 16], &[4, 4], &[2, 2]), 64 << 20);
    for shard in [[1u64, 1], [0, 0], [3, 2], [0, 3], [2, 0]] {
        s.array
            .read_chunk(&[shard[0] * 2, shard[1] * 2], 0, u64::MAX)
            .await
            .unwrap()
            .unwrap();
    }
    tokio::time::sleep(RTT * 2).await;
    assert_eq!(s.stats.ahead_indexes.load(Relaxed), 0);
    assert_eq!(s.latent.gets.load(Relaxed), 5);
}

#[tokio::test]
async fn a_listing_brings_no_more_windows_than_the_cache_has_room_for() {
    // A cache of 128 KiB: before the walk shows itself, 8 KiB of unread windows, two shards'.
    // The row lists 4 shards: two come with their bytes, two alone.
    let (latent, array, stats, built) = four_kib_shards(128 << 10);
    assert_eq!(array.list_chunk_dir(&[0]).await.unwrap().len(), 8);
    let windows = stats.ahead_bytes.load(Relaxed);
    assert!(
        (4000..=2 * 4200).contains(&windows),
        "{windows} bytes of windows with room for 8 KiB"
    );
    // Every chunk still reads right: a shard listed alone costs its first read one request.
    // (The listing also read ahead the indexes of the next two shard rows: 8 more; reading the
    // row in order fetches ahead of the reader what the budget of 8 KiB holds: 2 shards.)
    for col in 0..8 {
        let (_, bytes) = array.read_chunk(&[0, col], 0, u64::MAX).await.unwrap().unwrap();
        assert_eq!(&bytes[..], &built.expected[&vec![0, col]][..]);
    }
    let gets = latent.gets.load(Relaxed);
    assert!(gets <= 4 + 4 + 8 + 2, "{gets} requests");
}
