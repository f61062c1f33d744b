//! The metadata warm-up of a remote view (`view::warm_up`) and the single flight of the caches
//! it fills, without mounting: the view over the caches a remote mount stacks (missing names,
//! listings) over a memory store whose every read takes one round trip and is logged
//! (`LatencyStore`), so a test counts what went out and how many round trips of wall time
//! a workload took.
//!
//! - once warmed up, looking up a chunk file level by level and reading it takes one round
//!   trip (the shard), where a cold view takes one per level and more;
//! - lookups that run while the warm-up is in flight wait for what it fetches: nothing is
//!   sent twice;
//! - the warm-up stays within its directory budget, and does not list directories below a
//!   root without a `zarr.json` (perhaps Zarr v2 arrays of countless chunk files).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use zarrfs::store::known_keys::KnownKeys;
use zarrfs::store::latency::LatencyStore;
use zarrfs::store::list_cache::ListCache;
use zarrfs::store::prefetch::PrefetchStats;
use zarrfs::store::Store;
use zarrfs::view::{View, ViewOptions, WarmUpLimits};

const RTT: Duration = Duration::from_millis(30);
const TTL: Duration = Duration::from_secs(600);

/// A group `bench` holding two sharded arrays (`small`: 4 × 4 shards, `large`: 6 × 2), under a
/// root group.
fn hierarchy() -> (BTreeMap<String, Vec<u8>>, Chunks) {
    let group = serde_json::to_vec(&json!({"zarr_format": 3, "node_type": "group"})).unwrap();
    let mut files = BTreeMap::from([
        ("zarr.json".to_string(), group.clone()),
        ("bench/zarr.json".into(), group),
    ]);
    let small = ArraySpec::new(&[8, 8], &[2, 2], &[1, 1]);
    let built = small.build("bench/small/", &small.full_chunks(1, 4, 8));
    files.extend(built.files.clone());
    let large = ArraySpec::new(&[12, 4], &[2, 2], &[1, 1]);
    files.extend(large.build("bench/large/", &large.full_chunks(2, 4, 8)).files);
    (files, built.expected)
}

/// A view over `files` as a remote mount sees them: (the view, the logged store, the counters).
fn remote_view(files: &BTreeMap<String, Vec<u8>>) -> (View, Arc<LatencyStore>, Arc<PrefetchStats>) {
    remote_view_for(files, TTL)
}

/// [`remote_view`] with metadata trusted for `ttl`.
fn remote_view_for(files: &BTreeMap<String, Vec<u8>>, ttl: Duration) -> (View, Arc<LatencyStore>, Arc<PrefetchStats>) {
    let latency = Arc::new(LatencyStore::new(memory_store(files), RTT));
    let stats = Arc::new(PrefetchStats::default());
    let missing = Arc::new(KnownKeys::new(latency.clone(), ttl));
    let store: Arc<dyn Store> = Arc::new(ListCache::new(missing, ttl).with_prefetch_stats(stats.clone()));
    let options = ViewOptions {
        remote: true,
        metadata_ttl: ttl,
        // As a remote mount: shard bytes cached, read along with each index.
        data_cache_bytes: 48 << 20,
        prefetch_bytes: 1 << 20,
        prefetch_stats: stats.clone(),
        ..ViewOptions::default()
    };
    let view = View::new(store, &options);
    assert!(view.warms_up());
    (view, latency, stats)
}

/// What a mount does before going live: the root listed (the reachability check) while its
/// document is read, then the walk.
async fn mount_time_warm_up(view: &View, limits: WarmUpLimits) -> zarrfs::view::WarmedUp {
    let store = view.store().clone();
    let (listed, ()) = tokio::join!(store.list_dir(""), view.warm_up_root());
    listed.unwrap();
    view.warm_up(limits).await
}

/// Look `path` up level by level, as the kernel does, and read the file at its end.
async fn look_up_and_read(view: &View, path: &str) -> Vec<u8> {
    let mut at = String::new();
    for name in path.split('/') {
        at = if at.is_empty() {
            name.to_string()
        } else {
            format!("{at}/{name}")
        };
        assert!(view.lookup(&at).await.unwrap().is_some(), "{at} not found");
    }
    let node = view.lookup(path).await.unwrap().unwrap();
    view.read(&node, 0, node.size).await.unwrap().to_vec()
}

/// Requests sent more than once, with how often.
fn duplicates(requests: &[String]) -> Vec<(String, usize)> {
    let mut seen = BTreeMap::new();
    for r in requests {
        *seen.entry(r.clone()).or_insert(0) += 1;
    }
    seen.into_iter().filter(|(_, n)| *n > 1).collect()
}

#[tokio::test]
async fn a_warmed_up_view_reads_a_chunk_in_one_round_trip() {
    let (files, expected) = hierarchy();
    let chunk = &expected[&vec![0, 0]];

    // Cold: one round trip per level at least (documents, listings), then the shard.
    let (cold, latency, _) = remote_view(&files);
    assert_eq!(&look_up_and_read(&cold, "bench/small/c/0/0").await, chunk);
    let cold_waves = latency.waves(0);
    assert!(cold_waves >= 5, "a cold lookup took {cold_waves} round trips");

    let (view, latency, stats) = remote_view(&files);
    let warmed = mount_time_warm_up(&view, WarmUpLimits::default()).await;
    assert_eq!(
        (warmed.nodes, warmed.sharded_arrays, warmed.failures),
        (4, 2, 0),
        "{warmed:?}"
    );
    assert!(!warmed.budget_reached);
    // Root and its document; bench; small and large; their c/; their shard directories.
    let at_mount = latency.waves(0);
    assert!(
        at_mount <= 5,
        "the warm-up took {at_mount} round trips: {:?}",
        latency.requests(0)
    );
    let mark = latency.sent().len();
    assert_eq!(&look_up_and_read(&view, "bench/small/c/0/0").await, chunk);
    let after = latency.requests(mark);
    assert_eq!(latency.waves(mark), 1, "after the warm-up: {after:?}");
    assert!(
        after.iter().all(|r| r.starts_with("get bench/small/c/0/0")),
        "{after:?}"
    );
    assert!(duplicates(&latency.requests(0)).is_empty(), "{:?}", latency.requests(0));
    let c = stats.counts();
    assert!(c.prefetch_used >= 4, "the lookups used what was fetched ahead: {c:?}");
    assert_eq!(c.prefetch_documents, 4, "the root's, bench's, small's, large's: {c:?}");
    // bench, small and large; their chunk roots; their shard directories (4 and 6): the root's
    // listing is the reachability check's.
    assert_eq!(c.prefetch_listings, 15, "{c:?}");
}

#[tokio::test]
async fn lookups_during_the_warm_up_wait_for_it_and_send_nothing_twice() {
    let (files, expected) = hierarchy();
    let (view, latency, stats) = remote_view(&files);
    let store = view.store().clone();
    let (listed, ()) = tokio::join!(store.list_dir(""), view.warm_up_root());
    listed.unwrap();
    let lookups = async {
        let mut read = Vec::new();
        for key in ["c/1/1", "c/3/2"] {
            read.push(look_up_and_read(&view, &format!("bench/small/{key}")).await);
        }
        read
    };
    let (warmed, read) = tokio::join!(view.warm_up(WarmUpLimits::default()), lookups);
    assert_eq!(warmed.failures, 0);
    assert_eq!(read, [expected[&vec![1, 1]].clone(), expected[&vec![3, 2]].clone()]);
    let requests = latency.requests(0);
    assert!(
        duplicates(&requests).is_empty(),
        "sent twice: {:?}",
        duplicates(&requests)
    );
    assert!(stats.counts().requests_joined > 0, "{:?}", stats.counts());
    // The shards are the only requests of the lookups' own.
    let shard_gets = requests.iter().filter(|r| r.starts_with("get bench/small/c/")).count();
    assert!(shard_gets <= 2, "{requests:?}");
}

#[tokio::test]
async fn concurrent_cold_lookups_read_each_document_and_listing_once() {
    let (files, _) = hierarchy();
    let (view, latency, stats) = remote_view(&files);
    let (a, b, c) = tokio::join!(
        view.lookup("bench/small/c/0"),
        view.lookup("bench/small/c/0"),
        view.lookup("bench/large/c/5")
    );
    assert!(a.unwrap().is_some() && b.unwrap().is_some() && c.unwrap().is_some());
    let requests = latency.requests(0);
    assert!(
        duplicates(&requests).is_empty(),
        "sent twice: {:?}",
        duplicates(&requests)
    );
    assert!(stats.counts().requests_joined > 0);
    assert_eq!(stats.counts().prefetch_documents, 0, "no warm-up here");
}

#[tokio::test]
async fn the_walk_stays_within_its_budget() {
    let group = serde_json::to_vec(&json!({"zarr_format": 3, "node_type": "group"})).unwrap();
    let mut files = BTreeMap::from([("zarr.json".to_string(), group.clone())]);
    for i in 0..40 {
        files.insert(format!("g{i:02}/zarr.json"), group.clone());
        files.insert(format!("g{i:02}/sub/zarr.json"), group.clone());
    }
    let (view, latency, _) = remote_view(&files);
    let limits = WarmUpLimits {
        max_dirs: 10,
        ..WarmUpLimits::default()
    };
    let warmed = mount_time_warm_up(&view, limits).await;
    assert!(warmed.budget_reached);
    assert_eq!(warmed.nodes, 10, "{warmed:?}");
    let listings = latency.requests(0).iter().filter(|r| r.starts_with("list_dir")).count();
    assert!(listings <= 10, "{:?}", latency.requests(0));
}

#[tokio::test]
async fn below_a_root_without_a_document_only_documents_are_read() {
    // A Zarr v2 hierarchy: an array directory may hold countless chunk files.
    let mut files = BTreeMap::from([(".zgroup".to_string(), b"{\"zarr_format\": 2}".to_vec())]);
    files.insert("v2/.zarray".into(), b"{}".to_vec());
    for i in 0..50 {
        files.insert(format!("v2/{i}.0"), vec![0; 4]);
    }
    let (view, latency, _) = remote_view(&files);
    let warmed = mount_time_warm_up(&view, WarmUpLimits::default()).await;
    assert_eq!((warmed.nodes, warmed.listings), (2, 1), "{warmed:?}");
    let requests = latency.requests(0);
    assert!(!requests.contains(&"list_dir v2/".to_string()), "{requests:?}");
    assert!(requests.contains(&"get v2/zarr.json".to_string()), "{requests:?}");
}

#[tokio::test]
async fn after_the_ttl_a_node_seen_before_costs_one_request_per_level() {
    let (files, expected) = hierarchy();
    let ttl = Duration::from_millis(600);
    let (view, latency, _) = remote_view_for(&files, ttl);
    mount_time_warm_up(&view, WarmUpLimits::default()).await;
    tokio::time::sleep(ttl).await;
    let mark = latency.sent().len();
    assert_eq!(
        look_up_and_read(&view, "bench/small/c/1/0").await,
        expected[&vec![1, 0]]
    );
    let requests = latency.requests(mark);
    // Each node's document is checked (one HEAD each); its name is not asked for again.
    for node in ["zarr.json", "bench/zarr.json", "bench/small/zarr.json"] {
        assert!(requests.contains(&format!("head {node}")), "{requests:?}");
    }
    for name in [
        "head bench",
        "head bench/small",
        "list_dir bench/",
        "list_dir bench/small/",
    ] {
        assert!(!requests.contains(&name.to_string()), "{name}: {requests:?}");
    }
}

#[tokio::test]
async fn a_missing_metadata_document_costs_one_request() {
    // Clients opening a node probe every document name; over HTTP no listing can say that a
    // dot file is missing, so each costs its HEAD, but no second round trip asking whether
    // the name is a directory: Zarr's document names are files.
    let (files, _) = hierarchy();
    let latency = Arc::new(LatencyStore::new(memory_store(&files), RTT));
    let options = ViewOptions {
        remote: true,
        metadata_ttl: TTL,
        ..ViewOptions::default()
    };
    let view = View::new(latency.clone(), &options);
    assert!(view.lookup("bench").await.unwrap().is_some());
    assert!(view.lookup("bench/zarr.json").await.unwrap().is_some());
    for name in [".zattrs", ".zgroup", ".zarray", ".zmetadata"] {
        let mark = latency.sent().len();
        assert!(view.lookup(&format!("bench/{name}")).await.unwrap().is_none());
        assert_eq!(latency.requests(mark), vec![format!("head bench/{name}")]);
    }
    // Other names missing as files may still be directories.
    let mark = latency.sent().len();
    assert!(view.lookup("bench/other").await.unwrap().is_none());
    assert_eq!(latency.requests(mark).len(), 2, "{:?}", latency.requests(mark));
}
