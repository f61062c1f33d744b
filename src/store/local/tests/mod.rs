//! Tests of the local store: keys, versions and pinned reads, conditional writes and their
//! fallbacks, concurrent writers losing nothing.

use super::*;
use crate::store::ByteRange;

#[tokio::test]
async fn keys_stay_inside_the_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), b"outside").unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let store = LocalStore::new(&root, true).unwrap();
    for key in ["../secret", "a/../../secret", "/etc/passwd", ""] {
        assert!(
            matches!(
                store.get(key, GetOptions::default()).await,
                Err(StoreError::InvalidKey { .. })
            ),
            "{key}"
        );
        assert!(store.set(key, Bytes::from_static(b"x")).await.is_err(), "{key}");
    }
    assert!(store.list_dir("../").await.is_err());
}

#[tokio::test]
async fn atomic_replace_changes_version_and_pins_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    let v1 = store.set("a/b", Bytes::from_static(b"first value")).await.unwrap();
    let got = store
        .get("a/b", GetOptions::pinned(ByteRange::Suffix(5), v1.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got.bytes[..], b"value");
    let v2 = store.set("a/b", Bytes::from_static(b"other bytes")).await.unwrap();
    assert_ne!(v1, v2, "a replaced value kept its version");
    // The old version is still open in the cache, but it is replaced: never served.
    let stale = store.get("a/b", GetOptions::pinned(ByteRange::Full, v1)).await;
    assert!(matches!(stale, Err(StoreError::VersionMismatch { .. })));
    let got = store
        .get("a/b", GetOptions::pinned(ByteRange::Full, v2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got.bytes[..], b"other bytes");
    store
        .set_partial_values(&[("a/b".into(), 0, Bytes::from_static(b"FIRST"))])
        .await
        .unwrap();
    let got = store.get("a/b", GetOptions::default()).await.unwrap().unwrap();
    assert_eq!(&got.bytes[..], b"FIRST bytes");
    assert!(store.dir_exists("a/").await.unwrap());
    assert!(!store.dir_exists("zz/").await.unwrap());
    let listed = store.list_dir("").await.unwrap();
    assert_eq!(listed.len(), 1, "temporary files must not be listed: {listed:?}");
    store.erase("a/b").await.unwrap();
    store.erase("a/b").await.unwrap();
    assert!(store.get("a/b", GetOptions::default()).await.unwrap().is_none());
    let ro = LocalStore::new(dir.path(), false).unwrap();
    assert!(matches!(ro.set("x", Bytes::new()).await, Err(StoreError::ReadOnly)));
}

// ---- conditional writes ----

fn b(bytes: &'static [u8]) -> Bytes {
    Bytes::from_static(bytes)
}

async fn value(store: &LocalStore, key: &str) -> Option<Bytes> {
    store.get(key, GetOptions::default()).await.unwrap().map(|r| r.bytes)
}

async fn version(store: &LocalStore, key: &str) -> Version {
    store.head(key).await.unwrap().unwrap().version
}

fn is_conflict<T: std::fmt::Debug>(r: &StoreResult<T>) -> bool {
    matches!(r, Err(StoreError::Conflict { .. }))
}

/// Every file under `dir` whose name marks it as temporary.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(temp_files(&path));
        } else if path.file_name().unwrap().to_str().unwrap().starts_with(TEMP_MARKER) {
            out.push(path);
        }
    }
    out
}

/// What a foreign writer such as zarr-python does: write a temporary file, rename it over.
fn foreign_replace(target: &Path, bytes: &[u8]) {
    let temp = target.with_file_name("foreign.tmp");
    fs::write(&temp, bytes).unwrap();
    fs::rename(&temp, target).unwrap();
}

/// Run a test hook once, at `point`.
fn hook_once(point: Point, f: impl FnOnce() + 'static) {
    let mut f = Some(f);
    hook::set(move |p| {
        if p == point {
            if let Some(f) = f.take() {
                f();
            }
        }
    });
}

async fn semantics(store: &LocalStore, root: &Path) {
    assert!(store.capabilities().conditional_writes);
    for key in ["k", "deep/er/k"] {
        let v1 = store.set_if(key, b(b"one"), Precondition::Absent).await.unwrap();
        assert_eq!(version(store, key).await, v1, "returned version is the stored one");
        let again = store.set_if(key, b(b"two"), Precondition::Absent).await;
        assert!(is_conflict(&again), "{again:?}");
        assert_eq!(value(store, key).await.unwrap(), b(b"one"));

        // Same size, within the same timestamp tick: the version must still change.
        let v2 = store
            .set_if(key, b(b"two"), Precondition::Version(v1.clone()))
            .await
            .unwrap();
        assert_ne!(v1, v2);
        assert_eq!(version(store, key).await, v2);
        assert_eq!(value(store, key).await.unwrap(), b(b"two"));
        let stale = store.set_if(key, b(b"three"), Precondition::Version(v1.clone())).await;
        assert!(is_conflict(&stale), "{stale:?}");
        assert_eq!(value(store, key).await.unwrap(), b(b"two"));

        let v3 = store.set_if(key, b(b"any"), Precondition::Any).await.unwrap();
        assert!(v3 != v1 && v3 != v2);
        assert_eq!(version(store, key).await, v3);

        assert!(is_conflict(&store.erase_if(key, Precondition::Absent).await));
        assert!(is_conflict(
            &store.erase_if(key, Precondition::Version(v2.clone())).await
        ));
        assert_eq!(value(store, key).await.unwrap(), b(b"any"));
        store.erase_if(key, Precondition::Version(v3.clone())).await.unwrap();
        assert!(value(store, key).await.is_none());
        store.erase_if(key, Precondition::Absent).await.unwrap();
        assert!(is_conflict(
            &store.erase_if(key, Precondition::Version(v3.clone())).await
        ));
        let missing = store.set_if(key, b(b"x"), Precondition::Version(v3)).await;
        assert!(is_conflict(&missing), "{missing:?}");
        assert!(value(store, key).await.is_none());
        store.set_if(key, b(b"back"), Precondition::Any).await.unwrap();
        store.erase_if(key, Precondition::Any).await.unwrap();
        assert!(value(store, key).await.is_none());
    }
    // A missing directory: no such value, and nothing is created for a refused write.
    let v = store.set_if("other", b(b"o"), Precondition::Any).await.unwrap();
    let r = store.set_if("nodir/k", b(b"x"), Precondition::Version(v.clone())).await;
    assert!(is_conflict(&r), "{r:?}");
    assert!(is_conflict(&store.erase_if("nodir/k", Precondition::Version(v)).await));
    store.erase_if("nodir/k", Precondition::Absent).await.unwrap();
    assert!(!root.join("nodir").exists());
    // A directory under the key is not a value.
    let r = store.set_if("deep", b(b"x"), Precondition::Absent).await;
    assert!(matches!(r, Err(StoreError::IsDirectory { .. })), "{r:?}");
    store.erase_if("deep", Precondition::Absent).await.unwrap();
    assert!(store.set_if("../x", b(b"x"), Precondition::Absent).await.is_err());
    assert_eq!(temp_files(root), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn conditional_writes_check_the_precondition() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    semantics(&store, dir.path()).await;
}

#[tokio::test]
async fn conditional_writes_without_renameat2_flags() {
    hook::set_no_rename_flags(true);
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    semantics(&store, dir.path()).await;
    // Nor hard links: check and rename under the lock.
    hook::set_no_links(true);
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    semantics(&store, dir.path()).await;
    hook::clear();
}

#[tokio::test]
async fn read_only_store_refuses_conditional_writes() {
    let dir = tempfile::tempdir().unwrap();
    let ro = LocalStore::new(dir.path(), false).unwrap();
    assert!(matches!(
        ro.set_if("x", b(b"x"), Precondition::Absent).await,
        Err(StoreError::ReadOnly)
    ));
    assert!(matches!(
        ro.erase_if("x", Precondition::Absent).await,
        Err(StoreError::ReadOnly)
    ));
}

fn increments(no_rename_flags_nor_links: bool) {
    let dir = tempfile::tempdir().unwrap();
    let stores = [
        Arc::new(LocalStore::new(dir.path(), true).unwrap()),
        Arc::new(LocalStore::new(dir.path(), true).unwrap()),
    ];
    let (threads, per_thread) = (8, 40);
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let store = stores[i % 2].clone();
            std::thread::spawn(move || {
                hook::set_no_rename_flags(no_rename_flags_nor_links);
                hook::set_no_links(no_rename_flags_nor_links);
                futures::executor::block_on(async {
                    let mut conflicts = 0u64;
                    for _ in 0..per_thread {
                        loop {
                            let got = store.get("c/counter", GetOptions::default()).await.unwrap();
                            let (n, condition) = match got {
                                Some(r) => (
                                    std::str::from_utf8(&r.bytes).unwrap().parse::<u64>().unwrap(),
                                    Precondition::Version(r.meta.version),
                                ),
                                None => (0, Precondition::Absent),
                            };
                            let next = Bytes::from((n + 1).to_string());
                            match store.set_if("c/counter", next, condition).await {
                                Ok(_) => break,
                                Err(StoreError::Conflict { .. }) => conflicts += 1,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    conflicts
                })
            })
        })
        .collect();
    let conflicts: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let total = fs::read_to_string(dir.path().join("c/counter")).unwrap();
    assert_eq!(total, (threads * per_thread).to_string(), "{conflicts} conflicts");
    assert!(conflicts > 0, "the writers never raced; the test proves nothing");
    assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
}

#[test]
fn concurrent_increments_lose_nothing() {
    increments(false);
}

#[test]
fn concurrent_increments_lose_nothing_without_renameat2_flags() {
    increments(true);
}

/// Quick same-size rewrites of one key (inode numbers get reused, timestamps are coarse):
/// no version may come back.
#[tokio::test]
async fn versions_never_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut v = store.set_if("k", b(b"0"), Precondition::Absent).await.unwrap();
    seen.insert(v.clone());
    for i in 0..500u32 {
        let value = Bytes::from((i % 10).to_string());
        v = store.set_if("k", value, Precondition::Version(v)).await.unwrap();
        assert!(seen.insert(v.clone()), "version {v:?} repeated after {i} rewrites");
    }
}

/// The mtime of a conditionally written value is above the one it replaced, even one from
/// the future (clock skew, a restored backup): what keeps versions from repeating where the
/// filesystem's timestamps are coarse and inode numbers are reused.
#[tokio::test]
async fn mtimes_of_a_key_strictly_increase() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path(), true).unwrap();
    store.set("k", b(b"old")).await.unwrap();
    let future = SystemTime::now() + std::time::Duration::from_secs(3600);
    File::options()
        .write(true)
        .open(dir.path().join("k"))
        .unwrap()
        .set_modified(future)
        .unwrap();
    let old = store.head("k").await.unwrap().unwrap();
    let v = store
        .set_if("k", b(b"new"), Precondition::Version(old.version.clone()))
        .await
        .unwrap();
    let new = store.head("k").await.unwrap().unwrap();
    assert_eq!(new.version, v);
    assert_eq!(new.mtime_ns.unwrap(), old.mtime_ns.unwrap() + 1);
    let v2 = store.set_if("k", b(b"any"), Precondition::Any).await.unwrap();
    let newer = store.head("k").await.unwrap().unwrap();
    assert_eq!(newer.version, v2);
    assert!(newer.mtime_ns > new.mtime_ns);
}

/// Foreign renames keep replacing the value between our exchanges: after a bounded number
/// of exchanges the newest foreign value is put back plainly.
// Races with writers that know nothing of the lock (replace by rename, remove, create).
mod foreign;
