//! One suite of the abstract store's semantics, run against every backend and every decorator:
//! the memory store, the local filesystem store, the object-store adapter over object_store's
//! in-memory store, and the counting and listing-cache decorators over them. What a caller of
//! `Store` relies on — missing keys, ranges, versions and pinned reads, conditional writes,
//! listings that reflect writes, erasing values and prefixes, renames — holds for all of them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use zarrfs::store::counting::CountingStore;
use zarrfs::store::list_cache::ListCache;
use zarrfs::store::local::LocalStore;
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::object::{Flavor, ObjectBackend};
use zarrfs::store::{ByteRange, EntryKind, GetOptions, Precondition, Store, StoreError};

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

async fn value(store: &dyn Store, key: &str) -> Option<Bytes> {
    store.get(key, GetOptions::default()).await.unwrap().map(|g| g.bytes)
}

async fn read(store: &dyn Store, key: &str, range: ByteRange) -> Bytes {
    store.get(key, GetOptions::range(range)).await.unwrap().unwrap().bytes
}

/// The whole suite; `name` says which store failed.
async fn conformance(name: &str, store: Arc<dyn Store>) {
    let s = store.as_ref();
    assert!(
        s.capabilities().readable && s.capabilities().writable,
        "{name}: capabilities"
    );

    // Missing keys are None, never errors.
    assert!(value(s, "none/k").await.is_none(), "{name}: get of a missing key");
    assert!(
        s.head("none/k").await.unwrap().is_none(),
        "{name}: head of a missing key"
    );
    assert!(!s.dir_exists("none/").await.unwrap(), "{name}: a missing prefix");

    // A value, its size and version; a new value gets a new version.
    let v1 = s.set("a/b/k", b("0123456789")).await.unwrap();
    let got = s.get("a/b/k", GetOptions::default()).await.unwrap().unwrap();
    assert_eq!(
        (got.bytes.as_ref(), got.meta.size),
        (&b"0123456789"[..], 10),
        "{name}: get"
    );
    assert_eq!(got.meta.version, v1, "{name}: the version set returned");
    assert_eq!(s.head("a/b/k").await.unwrap().unwrap().size, 10, "{name}: head");

    // Ranges, clamped to the value.
    assert_eq!(
        read(s, "a/b/k", ByteRange::Range { offset: 2, length: 3 }).await,
        b("234"),
        "{name}"
    );
    assert_eq!(
        read(s, "a/b/k", ByteRange::Range { offset: 8, length: 9 }).await,
        b("89"),
        "{name}"
    );
    assert_eq!(
        read(s, "a/b/k", ByteRange::Range { offset: 12, length: 3 }).await,
        b(""),
        "{name}"
    );
    assert_eq!(read(s, "a/b/k", ByteRange::From(7)).await, b("789"), "{name}");
    assert_eq!(
        read(s, "a/b/k", ByteRange::Suffix(4)).await,
        b("6789"),
        "{name}: suffix"
    );
    assert_eq!(
        read(s, "a/b/k", ByteRange::Suffix(40)).await,
        b("0123456789"),
        "{name}: long suffix"
    );

    // Pinned reads: the pinned version or an error, never other bytes.
    let pinned = GetOptions::pinned(ByteRange::Range { offset: 0, length: 4 }, v1.clone());
    assert_eq!(
        s.get("a/b/k", pinned.clone()).await.unwrap().unwrap().bytes,
        b("0123"),
        "{name}"
    );
    let v2 = s.set("a/b/k", b("abcdefghij")).await.unwrap();
    assert_ne!(v1, v2, "{name}: a new value keeps its version");
    match s.get("a/b/k", pinned).await {
        Err(StoreError::VersionMismatch { .. }) => {}
        other => panic!("{name}: a read pinned to a replaced version gave {other:?}"),
    }

    // Several reads at once, in request order.
    s.set("a/other", b("xyz")).await.unwrap();
    let many = s
        .get_partial_values(&[
            ("a/other".into(), ByteRange::Suffix(1)),
            ("none/k".into(), ByteRange::Full),
            ("a/b/k".into(), ByteRange::Range { offset: 1, length: 2 }),
        ])
        .await
        .unwrap();
    let bytes: Vec<Option<Bytes>> = many.into_iter().map(|g| g.map(|g| g.bytes)).collect();
    assert_eq!(bytes, [Some(b("z")), None, Some(b("bc"))], "{name}: get_partial_values");

    // Conditional writes, where the store enforces them.
    if s.capabilities().conditional_writes {
        let stale = Precondition::Version(v1.clone());
        assert!(
            matches!(
                s.set_if("a/b/k", b("no"), Precondition::Absent).await,
                Err(StoreError::Conflict { .. })
            ),
            "{name}"
        );
        assert!(
            matches!(
                s.set_if("a/b/k", b("no"), stale.clone()).await,
                Err(StoreError::Conflict { .. })
            ),
            "{name}"
        );
        assert!(
            matches!(s.erase_if("a/b/k", stale).await, Err(StoreError::Conflict { .. })),
            "{name}"
        );
        assert_eq!(
            value(s, "a/b/k").await,
            Some(b("abcdefghij")),
            "{name}: nothing changed on conflicts"
        );
        let v3 = s.set_if("a/b/k", b("yes"), Precondition::Version(v2)).await.unwrap();
        s.set_if("a/new", b("new"), Precondition::Absent).await.unwrap();
        s.erase_if(
            "a/new",
            Precondition::Version(s.head("a/new").await.unwrap().unwrap().version),
        )
        .await
        .unwrap();
        assert!(value(s, "a/new").await.is_none(), "{name}: erase_if");
        assert_eq!(s.head("a/b/k").await.unwrap().unwrap().version, v3, "{name}");
    } else {
        s.set("a/b/k", b("yes")).await.unwrap();
    }

    // Listings reflect every write at once (through caches too).
    s.set("a/b/c/deep", b("d")).await.unwrap();
    s.set("a/z", b("zz")).await.unwrap();
    let listed = s.list_prefix("a/").await.unwrap();
    assert_eq!(listed, ["a/b/c/deep", "a/b/k", "a/other", "a/z"], "{name}: list_prefix");
    assert_eq!(
        s.list_prefix("a/o").await.unwrap(),
        ["a/other"],
        "{name}: a partial name"
    );
    let dir = s.list_dir("a/").await.unwrap();
    let names: Vec<(String, bool)> = dir.iter().map(|e| (e.name.clone(), e.kind == EntryKind::Dir)).collect();
    assert_eq!(
        names,
        [("b".into(), true), ("other".into(), false), ("z".into(), false)],
        "{name}: list_dir"
    );
    assert!(
        dir.iter()
            .any(|e| e.name == "z" && e.kind == EntryKind::File { size: 2 }),
        "{name}: sizes"
    );
    assert!(s.dir_exists("a/b/").await.unwrap(), "{name}: dir_exists");
    assert!(s.list().await.unwrap().contains(&"a/z".to_string()), "{name}: list");

    // Erasing: a missing key is fine; several keys; a whole prefix, seen by the next listing.
    s.erase("a/never").await.unwrap();
    s.erase("a/z").await.unwrap();
    assert!(value(s, "a/z").await.is_none(), "{name}: erase");
    s.erase_values(&["a/other".into(), "a/never".into()]).await.unwrap();
    assert_eq!(
        s.list_prefix("a/").await.unwrap(),
        ["a/b/c/deep", "a/b/k"],
        "{name}: erase_values"
    );
    s.set("keep/k", b("kept")).await.unwrap();
    s.erase_prefix("a/b/").await.unwrap();
    assert!(s.list_prefix("a/").await.unwrap().is_empty(), "{name}: erase_prefix");
    // (A local store may keep the empty directories; no value is left in them.)
    let left = s.list_dir("a/b/").await.unwrap();
    assert!(
        left.iter().all(|e| e.kind == EntryKind::Dir),
        "{name}: erase_prefix and list_dir: {left:?}"
    );
    assert_eq!(
        value(s, "keep/k").await,
        Some(b("kept")),
        "{name}: erase_prefix kept others"
    );

    // Renames move the value.
    s.rename("keep/k", "moved/k").await.unwrap();
    assert!(value(s, "keep/k").await.is_none(), "{name}: rename source");
    assert_eq!(value(s, "moved/k").await, Some(b("kept")), "{name}: rename target");
}

fn object_backend() -> Arc<ObjectBackend> {
    let inner = Arc::new(object_store::memory::InMemory::new());
    Arc::new(ObjectBackend::new(
        inner,
        "prefix/of/source",
        Flavor::S3,
        true,
        "memory://".into(),
    ))
}

/// Makes a fresh store of one backend.
type MakeStore = Box<dyn Fn() -> Arc<dyn Store>>;

/// Every backend, bare and under each decorator.
fn stores(tmp: &std::path::Path) -> Vec<(String, Arc<dyn Store>)> {
    let mut backends: Vec<(&str, MakeStore)> = vec![
        ("memory", Box::new(|| Arc::new(MemoryStore::new()))),
        ("object", Box::new(|| object_backend())),
    ];
    let dirs: Vec<std::path::PathBuf> = (0..3).map(|i| tmp.join(format!("local{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let next = std::sync::Mutex::new(dirs.into_iter());
    backends.push((
        "local",
        Box::new(move || {
            let dir = next.lock().unwrap().next().expect("a directory per local store");
            Arc::new(LocalStore::new(dir, true).unwrap())
        }),
    ));
    let mut out = Vec::new();
    for (name, make) in &backends {
        out.push((name.to_string(), make()));
        out.push((format!("counting({name})"), Arc::new(CountingStore::new(make()))));
        let ttl = Duration::from_secs(3600);
        out.push((format!("list_cache({name})"), Arc::new(ListCache::new(make(), ttl))));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_and_decorator_conforms() {
    let tmp = tempfile::tempdir().unwrap();
    let all = stores(tmp.path());
    assert_eq!(all.len(), 9);
    for (name, store) in all {
        conformance(&name, store).await;
    }
}

#[tokio::test]
async fn every_store_conforms_on_a_current_thread_runtime() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, store) in stores(tmp.path()) {
        conformance(&name, store).await;
    }
}

/// The listing cache erases a prefix from the store's own listing: a key written by another
/// writer after a listing was kept is erased too.
#[tokio::test]
async fn list_cache_erases_a_prefix_it_has_a_stale_listing_of() {
    let inner = Arc::new(MemoryStore::new());
    let cache = ListCache::new(inner.clone(), Duration::from_secs(3600));
    cache.set("p/a", b("a")).await.unwrap();
    assert_eq!(cache.list_prefix("p/").await.unwrap(), ["p/a"]);
    assert_eq!(cache.list_dir("p/").await.unwrap().len(), 1);
    inner.set("p/sub/by-another-writer", b("x")).await.unwrap();
    cache.erase_prefix("p/").await.unwrap();
    assert!(
        inner.list_prefix("p/").await.unwrap().is_empty(),
        "a key the kept listing missed survived"
    );
    assert!(cache.list_prefix("p/").await.unwrap().is_empty());
    assert!(cache.list_dir("p/sub/").await.unwrap().is_empty());
}
