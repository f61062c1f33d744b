use super::*;
use crate::store::counting::CountingStore;
use crate::store::memory::MemoryStore;

const TTL: Duration = Duration::from_secs(60);

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A store with one 600 KiB object, counted, and the cache over it in `dir`.
struct Setup {
    memory: Arc<MemoryStore>,
    counted: Arc<CountingStore>,
    cached: DiskCachedStore,
}

fn over(memory: Arc<MemoryStore>, dir: &std::path::Path, ttl: Duration) -> Setup {
    let counted = Arc::new(CountingStore::new(memory.clone()));
    let cached = DiskCachedStore::open(counted.clone(), dir, 64 << 20, "mem://x", ttl).unwrap();
    Setup {
        memory,
        counted,
        cached,
    }
}

fn fixture(dir: &std::path::Path, ttl: Duration) -> Setup {
    let memory = Arc::new(MemoryStore::new());
    memory.insert("a/c/0", pattern(600 << 10, 1));
    memory.insert("a/zarr.json", Bytes::from_static(b"{}"));
    over(memory, dir, ttl)
}

async fn read(s: &Setup, key: &str, range: ByteRange) -> Bytes {
    s.cached
        .get(key, GetOptions::range(range))
        .await
        .unwrap()
        .unwrap()
        .bytes
}

fn requests(s: &Setup) -> (u64, u64) {
    let c = s.counted.counts();
    (c.get, c.head)
}

fn expected(range: ByteRange, seed: u8) -> Bytes {
    let all = pattern(600 << 10, seed);
    let (start, end) = range.resolve(all.len() as u64);
    all.slice(start as usize..end as usize)
}

#[tokio::test]
async fn a_remount_reads_what_was_fetched_from_disk_with_no_request() {
    let tmp = tempfile::tempdir().unwrap();
    let s = fixture(tmp.path(), TTL);
    let index = ByteRange::Suffix(4100);
    assert_eq!(read(&s, "a/c/0", index).await, expected(index, 1));
    assert_eq!(read(&s, "a/c/0", ByteRange::Full).await, expected(ByteRange::Full, 1));
    assert_eq!(
        read(&s, "a/zarr.json", ByteRange::Full).await,
        Bytes::from_static(b"{}")
    );
    assert_eq!(requests(&s), (3, 0));
    s.cached.settle();
    s.cached.close();
    let memory = s.memory.clone();
    drop(s);
    let s = over(memory, tmp.path(), TTL);
    for range in [
        index,
        ByteRange::Full,
        ByteRange::Range {
            offset: 300 << 10,
            length: 10,
        },
        ByteRange::Range {
            offset: (256 << 10) - 5,
            length: 10,
        },
        ByteRange::From(599 << 10),
    ] {
        assert_eq!(read(&s, "a/c/0", range).await, expected(range, 1), "{range:?}");
    }
    assert_eq!(
        read(&s, "a/zarr.json", ByteRange::Full).await,
        Bytes::from_static(b"{}")
    );
    assert_eq!(requests(&s), (0, 0), "nothing asked of the store");
    let counts = s.cached.counts();
    assert_eq!((counts.disk_cache_hits, counts.disk_cache_misses), (6, 0));
}

#[tokio::test]
async fn a_small_read_fetches_whole_blocks_and_a_suffix_keeps_the_end_of_its_block() {
    let tmp = tempfile::tempdir().unwrap();
    let s = fixture(tmp.path(), TTL);
    let index = ByteRange::Suffix(4100);
    read(&s, "a/c/0", index).await;
    s.cached.settle();
    // The suffix's own bytes, and any read inside them, now come from disk.
    let inside = ByteRange::Suffix(100);
    assert_eq!(read(&s, "a/c/0", inside).await, expected(inside, 1));
    assert_eq!(requests(&s), (1, 0));
    // A chunk in the first block: that whole block is fetched once.
    let chunk = |offset| ByteRange::Range { offset, length: 8192 };
    assert_eq!(read(&s, "a/c/0", chunk(8192)).await, expected(chunk(8192), 1));
    s.cached.settle();
    assert_eq!(read(&s, "a/c/0", chunk(100 << 10)).await, expected(chunk(100 << 10), 1));
    assert_eq!(requests(&s), (2, 0));
    assert_eq!(s.counted.counts().get_bytes, 4100 + (256 << 10));
}

#[tokio::test]
async fn after_the_ttl_a_head_confirms_the_version_and_a_changed_object_is_read_anew() {
    let tmp = tempfile::tempdir().unwrap();
    let s = fixture(tmp.path(), Duration::ZERO);
    read(&s, "a/c/0", ByteRange::Full).await;
    s.cached.settle();
    assert_eq!(read(&s, "a/c/0", ByteRange::Full).await, expected(ByteRange::Full, 1));
    assert_eq!(requests(&s), (1, 1), "confirmed by a HEAD, read from disk");
    // Another writer replaces it: its new bytes, never the cached ones.
    s.memory.insert("a/c/0", pattern(600 << 10, 2));
    assert_eq!(read(&s, "a/c/0", ByteRange::Full).await, expected(ByteRange::Full, 2));
    let chunk = ByteRange::Range { offset: 5, length: 7 };
    assert_eq!(read(&s, "a/c/0", chunk).await, expected(chunk, 2));
    s.cached.settle();
    // Gone: a miss, not cached bytes.
    s.memory.erase("a/c/0").await.unwrap();
    assert!(s.cached.get("a/c/0", GetOptions::default()).await.unwrap().is_none());
}

#[tokio::test]
async fn after_a_crash_every_record_is_confirmed_before_its_blocks_are_served() {
    let tmp = tempfile::tempdir().unwrap();
    let s = fixture(tmp.path(), TTL);
    read(&s, "a/c/0", ByteRange::Full).await;
    s.cached.settle();
    // What the mount saves every SAVE_EVERY while mounted.
    s.cached.versions.save_if_changed().unwrap();
    let memory = s.memory.clone();
    // No close: the mount died. Meanwhile the object changed.
    drop(s);
    memory.insert("a/c/0", pattern(600 << 10, 3));
    let s = over(memory, tmp.path(), TTL);
    assert_eq!(read(&s, "a/c/0", ByteRange::Full).await, expected(ByteRange::Full, 3));
    assert_eq!(s.counted.counts().head, 1, "checked first");
}

#[tokio::test]
async fn the_mounts_own_writes_are_read_back_not_the_cached_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let s = fixture(tmp.path(), TTL);
    read(&s, "a/c/0", ByteRange::Full).await;
    s.cached.settle();
    s.cached.set("a/c/0", pattern(600 << 10, 4)).await.unwrap();
    assert_eq!(read(&s, "a/c/0", ByteRange::Full).await, expected(ByteRange::Full, 4));
    s.cached.erase("a/c/0").await.unwrap();
    assert!(s.cached.get("a/c/0", GetOptions::default()).await.unwrap().is_none());
    assert!(s.cached.head("a/c/0").await.unwrap().is_none());
}

#[tokio::test]
async fn a_read_pinned_to_another_version_is_refused_by_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let s = fixture(tmp.path(), TTL);
    let got = s.cached.get("a/c/0", GetOptions::default()).await.unwrap().unwrap();
    s.cached.settle();
    let pinned = |v: &str| GetOptions::pinned(ByteRange::Full, Version(v.into()));
    let hit = s
        .cached
        .get("a/c/0", pinned(&got.meta.version.0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hit.bytes, expected(ByteRange::Full, 1));
    assert_eq!(requests(&s), (1, 0));
    let other = s.cached.get("a/c/0", pinned("no-such-version")).await;
    assert!(matches!(other, Err(StoreError::VersionMismatch { .. })), "{other:?}");
}

#[tokio::test]
async fn a_damaged_block_is_fetched_again_never_served() {
    let tmp = tempfile::tempdir().unwrap();
    let s = fixture(tmp.path(), TTL);
    read(&s, "a/c/0", ByteRange::Full).await;
    s.cached.settle();
    let mut damaged = 0;
    for sub in std::fs::read_dir(tmp.path().join("blocks")).unwrap() {
        for file in std::fs::read_dir(sub.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 0xff;
            std::fs::write(&path, bytes).unwrap();
            damaged += 1;
        }
    }
    assert_eq!(damaged, 3, "the shard's three blocks");
    assert_eq!(read(&s, "a/c/0", ByteRange::Full).await, expected(ByteRange::Full, 1));
    assert_eq!(requests(&s), (2, 0));
    assert!(s.cached.counts().disk_cache_torn >= 1);
}
