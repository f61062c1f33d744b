//! A model check of the kept listings over the known keys: the mount's own changes mixed at
//! random with lookups, listings and reads, every answer compared with the store's.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::ListCache;
use crate::store::known_keys::KnownKeys;
use crate::store::memory::MemoryStore;
use crate::store::{ByteRange, DirEntry, GetOptions, GetResult, Store};

/// The mount's own writes, erases and removals of directories, mixed at random with lookups and
/// listings: with no other writer, what the kept listings and known keys answer is always what
/// the store holds (names, kinds, sizes, versions, bytes), whatever was kept or updated in place.
#[tokio::test]
async fn a_random_mix_of_the_mounts_own_changes_and_lookups_always_agrees_with_the_store() {
    const DIRS: [&str; 6] = ["", "a/", "a/b/", "a/b/c/", "d/", "d/e/"];
    const NAMES: [&str; 3] = ["0", "zarr.json", "x.0123456789abcdef0123456789abcdef.partial"];
    for seed in 1..=40u64 {
        let memory = Arc::new(MemoryStore::new());
        let cache = ListCache::new(
            Arc::new(KnownKeys::new(memory.clone(), Duration::from_secs(600))),
            Duration::from_secs(600),
        );
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for step in 0..400 {
            let dir = DIRS[next(DIRS.len())];
            let key = format!("{dir}{}", NAMES[next(NAMES.len())]);
            let at = format!("seed {seed} step {step}");
            match next(10) {
                0 | 1 => {
                    let value = Bytes::from((0..next(6)).map(|i| b'a' + i as u8).collect::<Vec<u8>>());
                    cache.set(&key, value).await.unwrap();
                }
                2 => cache.erase(&key).await.unwrap(),
                3 if !dir.is_empty() && memory.list_prefix(dir).await.unwrap().is_empty() => {
                    cache.remove_dir(dir).await.unwrap()
                }
                3 if !dir.is_empty() && next(4) == 0 => cache.erase_prefix(dir).await.unwrap(),
                4 | 5 => {
                    let got = cache.list_dir(dir).await.unwrap();
                    let want = memory.list_dir(dir).await.unwrap();
                    let kinds = |l: &[DirEntry]| l.iter().map(|e| (e.name.clone(), e.kind.clone())).collect::<Vec<_>>();
                    assert_eq!(kinds(&got), kinds(&want), "{at}: list_dir({dir:?})");
                }
                6 | 7 => {
                    let got = cache.head(&key).await.unwrap().map(|m| (m.size, m.version));
                    let want = memory.head(&key).await.unwrap().map(|m| (m.size, m.version));
                    assert_eq!(got, want, "{at}: head({key:?})");
                }
                8 => {
                    let range = match next(3) {
                        0 => ByteRange::Full,
                        1 => ByteRange::Range {
                            offset: next(4) as u64,
                            length: next(4) as u64,
                        },
                        _ => ByteRange::Suffix(next(4) as u64),
                    };
                    let got = cache.get(&key, GetOptions::range(range)).await.unwrap();
                    let want = memory.get(&key, GetOptions::range(range)).await.unwrap();
                    let seen = |g: Option<GetResult>| g.map(|g| (g.bytes, g.offset, g.meta.size, g.meta.version));
                    assert_eq!(seen(got), seen(want), "{at}: get({key:?}, {range:?})");
                }
                _ => {
                    let got = cache.dir_exists(dir).await.unwrap();
                    let want = memory.dir_exists(dir).await.unwrap();
                    assert_eq!(got, want, "{at}: dir_exists({dir:?})");
                }
            }
        }
    }
}
