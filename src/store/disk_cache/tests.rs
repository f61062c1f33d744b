use super::*;
use std::fs::OpenOptions;

fn id(key: &str, version: &str, block: u64) -> BlockId {
    BlockId {
        key: key.into(),
        version: version.into(),
        block,
    }
}

fn file_of(dir: &Path, id: &BlockId) -> PathBuf {
    dir.join("blocks").join(id.file_name())
}

#[test]
fn a_block_is_served_for_its_version_only_and_survives_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(tmp.path(), 1 << 20).unwrap();
    let v1 = id("a/c/0/0", "etag-1", 0);
    assert_eq!(cache.get(&v1), None);
    cache.put(&v1, b"version one").unwrap();
    assert_eq!(cache.get(&v1).unwrap(), Bytes::from_static(b"version one"));
    assert_eq!(
        cache.get(&id("a/c/0/0", "etag-2", 0)),
        None,
        "another version is a miss"
    );
    assert_eq!(cache.get(&id("a/c/0/0", "etag-1", 1)), None, "another block is a miss");
    assert_eq!(
        (cache.stats.hits.load(Relaxed), cache.stats.misses.load(Relaxed)),
        (1, 3)
    );
    drop(cache);
    let cache = DiskCache::open(tmp.path(), 1 << 20).unwrap();
    assert_eq!(
        cache.get(&v1).unwrap(),
        Bytes::from_static(b"version one"),
        "kept across mounts"
    );
}

#[test]
fn one_mount_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let _first = DiskCache::open(tmp.path(), 1 << 20).unwrap();
    let second = DiskCache::open(tmp.path(), 1 << 20).unwrap_err();
    assert!(matches!(second, DiskCacheError::InUse { .. }));
    assert!(second.to_string().contains("in use by another mount"), "{second}");
}

#[test]
fn a_torn_block_is_dropped_never_served() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(tmp.path(), 1 << 20).unwrap();
    let a = id("a/c/0/0", "v", 0);
    cache.put(&a, &[9u8; 4096]).unwrap();
    let path = file_of(tmp.path(), &a);
    let len = std::fs::metadata(&path).unwrap().len();
    // A crash while the block was written (or a damaged disk): the file is shorter.
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 100).unwrap();
    assert_eq!(cache.get(&a), None);
    assert_eq!(cache.stats.torn.load(Relaxed), 1);
    assert!(!path.exists(), "the torn file is removed");
    assert_eq!(cache.bytes(), 0);
    // Torn before a remount: the same.
    cache.put(&a, &[9u8; 4096]).unwrap();
    drop(cache);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[200] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let cache = DiskCache::open(tmp.path(), 1 << 20).unwrap();
    assert_eq!(cache.get(&a), None);
    assert!(!path.exists());
}

#[test]
fn the_least_recently_used_go_first_under_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let one = block::encode(&id("k0", "v", 0), &[0u8; 1000]).len() as u64;
    let cache = DiskCache::open(tmp.path(), 3 * one).unwrap();
    let ids: Vec<BlockId> = (0..4).map(|i| id(&format!("k{i}"), "v", 0)).collect();
    for b in &ids[..3] {
        cache.put(b, &[1u8; 1000]).unwrap();
    }
    assert!(cache.get(&ids[0]).is_some(), "k0 used: k1 is now the least recent");
    cache.put(&ids[3], &[1u8; 1000]).unwrap();
    assert_eq!(cache.bytes(), 3 * one);
    assert!(cache.get(&ids[1]).is_none(), "evicted");
    assert!(!file_of(tmp.path(), &ids[1]).exists());
    for i in [0, 2, 3] {
        assert!(cache.get(&ids[i]).is_some(), "k{i} kept");
    }
    assert_eq!(cache.stats.evictions.load(Relaxed), 1);
    // A smaller bound at the next open evicts the oldest written down to it.
    drop(cache);
    let cache = DiskCache::open(tmp.path(), one).unwrap();
    assert_eq!(cache.bytes(), one);
    assert!(cache.get(&ids[3]).is_some(), "the newest stays");
    // A block larger than the whole bound is not kept.
    cache.put(&id("big", "v", 0), &[0u8; 5000]).unwrap();
    assert!(cache.get(&id("big", "v", 0)).is_none());
}

#[test]
fn leftovers_of_interrupted_writes_go_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(tmp.path(), 1 << 20).unwrap();
    let a = id("k", "v", 0);
    cache.put(&a, b"x").unwrap();
    drop(cache);
    let sub = file_of(tmp.path(), &a).parent().unwrap().to_path_buf();
    std::fs::write(sub.join("write-1-0.tmp"), b"half a block").unwrap();
    let cache = DiskCache::open(tmp.path(), 1 << 20).unwrap();
    assert!(!sub.join("write-1-0.tmp").exists());
    assert_eq!(cache.get(&a).unwrap(), Bytes::from_static(b"x"));
}
