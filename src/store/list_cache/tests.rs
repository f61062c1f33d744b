use super::*;
use crate::store::counting::CountingStore;
use crate::store::memory::MemoryStore;
use crate::store::Precondition;
use bytes::Bytes;

async fn setup(ttl: Duration, max_entries: usize) -> (Arc<CountingStore>, ListCache) {
    let memory = Arc::new(MemoryStore::new());
    for key in ["a/b/0", "a/b/1", "a/c", "x/0"] {
        memory.set(key, Bytes::from_static(b"v")).await.unwrap();
    }
    let counting = Arc::new(CountingStore::new(memory));
    let cache = ListCache::with_capacity(counting.clone(), ttl, max_entries);
    (counting, cache)
}

fn names(entries: &[DirEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.name.as_str()).collect()
}

#[tokio::test]
async fn listings_are_kept_for_the_ttl() {
    let (counting, cache) = setup(Duration::from_millis(200), MAX_ENTRIES).await;
    assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b", "c"]);
    assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b", "c"]);
    assert!(cache.dir_exists("a/").await.unwrap());
    assert_eq!(cache.list_prefix("a/b").await.unwrap(), ["a/b/0", "a/b/1"]);
    assert_eq!(cache.list_prefix("a/b").await.unwrap(), ["a/b/0", "a/b/1"]);
    let counts = counting.counts();
    assert_eq!((counts.list_dir, counts.list, counts.head), (1, 1, 0));
    tokio::time::sleep(Duration::from_millis(250)).await;
    cache.list_dir("a/").await.unwrap();
    cache.list_prefix("a/b").await.unwrap();
    assert_eq!((counting.counts().list_dir, counting.counts().list), (2, 2));
}

#[tokio::test]
async fn a_zero_ttl_keeps_nothing() {
    let (counting, cache) = setup(Duration::ZERO, MAX_ENTRIES).await;
    cache.list_dir("a/").await.unwrap();
    cache.list_dir("a/").await.unwrap();
    assert_eq!(counting.counts().list_dir, 2);
}

#[tokio::test]
async fn writes_drop_the_listings_above_them() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    for dir in ["", "a/", "a/b/", "x/"] {
        cache.list_dir(dir).await.unwrap();
    }
    cache.list_prefix("a/").await.unwrap();
    cache.list_prefix("x").await.unwrap();
    let before = counting.counts();
    cache.set("a/b/2", Bytes::from_static(b"new")).await.unwrap();
    assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["0", "1", "2"]); // up to date
    cache.list_dir("a/").await.unwrap(); // shows a/b/ already: kept
    cache.list_dir("").await.unwrap(); // shows a/ already: kept
    cache.list_dir("x/").await.unwrap(); // untouched: still kept
    assert_eq!(
        cache.list_prefix("a/").await.unwrap(),
        ["a/b/0", "a/b/1", "a/b/2", "a/c"]
    );
    cache.list_prefix("x").await.unwrap(); // untouched
    let after = counting.counts();
    assert_eq!((after.list_dir - before.list_dir, after.list - before.list), (0, 1));

    cache.erase_if("a/b/0", Precondition::Any).await.unwrap();
    cache.rename("a/c", "x/1").await.unwrap();
    assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["1", "2"]);
    assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b"]);
    assert_eq!(names(&cache.list_dir("x/").await.unwrap()), ["0", "1"]);
    assert!(!cache.dir_exists("q/").await.unwrap());
}

#[tokio::test]
async fn a_kept_listing_answers_lookups() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    cache.list_dir("a/").await.unwrap();
    let before = counting.counts();
    assert!(cache.head("a/nothing").await.unwrap().is_none());
    assert!(cache.head("a/b").await.unwrap().is_none(), "a directory is not a key");
    assert!(cache.dir_exists("a/b/").await.unwrap());
    assert!(!cache.dir_exists("a/c/").await.unwrap(), "a key is not a directory");
    assert!(!cache.dir_exists("a/zz/").await.unwrap());
    assert_eq!(counting.counts(), before, "answered from the listing");
    assert_eq!(cache.head("a/c").await.unwrap().map(|m| m.size), Some(1));
    assert!(cache.head("x/0").await.unwrap().is_some(), "not listed: asked");
    assert_eq!(counting.counts().head - before.head, 2);
    cache.set("a/new", Bytes::from_static(b"n")).await.unwrap();
    assert!(
        cache.head("a/new").await.unwrap().is_some(),
        "written through the cache"
    );

    let cache = cache.incomplete_listings();
    assert!(cache.head("a/nothing").await.unwrap().is_none());
    assert!(cache.dir_exists("a/b/").await.unwrap());
    // Asked: "a/c", "x/0", "a/new" (listed: its size and version come from the store), and
    // "a/nothing"; "a/b/" is answered by a/'s listing, which the write kept up to date.
    let after = counting.counts();
    assert_eq!(
        (after.head - before.head, after.list_dir - before.list_dir),
        (4, 0),
        "incomplete listings: asked"
    );
}

#[tokio::test]
async fn a_listing_that_raced_a_write_is_not_kept() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    let started = (Instant::now(), cache.generation());
    let listed = counting.list_dir("a/b/").await.unwrap(); // read before the write landed
    cache.set("a/b/2", Bytes::from_static(b"new")).await.unwrap();
    cache.keep_dir("a/b/", started, listed);
    assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["0", "1", "2"]);
}

#[tokio::test]
async fn entries_held_are_bounded() {
    let (counting, cache) = setup(Duration::from_secs(600), 3).await;
    cache.list_dir("a/b/").await.unwrap(); // 2 entries
    cache.list_dir("a/").await.unwrap(); // 2 more: "a/b/" is dropped
    assert!(cache.state().entries() <= 3);
    cache.list_dir("a/").await.unwrap();
    assert_eq!(counting.counts().list_dir, 2, "the most recent listing stays");
    cache.list_dir("a/b/").await.unwrap();
    assert_eq!(counting.counts().list_dir, 3, "the oldest was dropped");
    assert_eq!(cache.list_prefix("").await.unwrap().len(), 4); // more than fit: not kept
    assert!(cache.state().entries() <= 3);
}

/// A list cache over a memory store whose reads take `rtt`, the requests logged.
async fn slow(ttl: Duration, rtt: Duration) -> (Arc<crate::store::latency::LatencyStore>, ListCache) {
    let memory = Arc::new(MemoryStore::new());
    for key in ["a/b/0", "a/b/1", "a/c", "x/0"] {
        memory.set(key, Bytes::from_static(b"v")).await.unwrap();
    }
    let latency = Arc::new(crate::store::latency::LatencyStore::new(memory, rtt));
    (latency.clone(), ListCache::new(latency, ttl))
}

#[tokio::test]
async fn a_listing_in_flight_is_waited_for_not_sent_again() {
    let stats = Arc::new(PrefetchStats::default());
    let (latency, cache) = slow(Duration::from_secs(600), Duration::from_millis(40)).await;
    let cache = cache.with_prefetch_stats(stats.clone());
    let warm_up = crate::store::prefetch::scope(cache.list_dir("a/"));
    let lookup = async {
        // Starts while the warm-up's listing is in flight.
        tokio::time::sleep(Duration::from_millis(10)).await;
        (cache.dir_exists("a/b/").await, cache.list_dir("a/").await)
    };
    let (warmed, (exists, listed)) = tokio::join!(warm_up, lookup);
    assert_eq!(names(&warmed.unwrap()), ["b", "c"]);
    assert!(exists.unwrap());
    assert_eq!(names(&listed.unwrap()), ["b", "c"]);
    assert_eq!(latency.requests(0), ["list_dir a/"], "one listing for all three");
    let c = stats.counts();
    assert_eq!(
        (c.prefetch_listings, c.requests_joined, c.prefetch_used),
        (1, 1, 1),
        "{c:?}"
    );

    // A TTL of zero keeps nothing to wait for: each caller lists for itself.
    let (latency, cache) = slow(Duration::ZERO, Duration::from_millis(20)).await;
    let (a, b) = tokio::join!(cache.list_dir("a/"), cache.list_dir("a/"));
    assert_eq!(names(&a.unwrap()), names(&b.unwrap()));
    assert_eq!(latency.requests(0).len(), 2);
}

#[tokio::test]
async fn a_listing_that_may_leave_names_out_answers_for_the_names_it_shows() {
    let (latency, cache) = slow(Duration::from_secs(600), Duration::from_millis(1)).await;
    let cache = cache.incomplete_listings();
    cache.list_dir("a/").await.unwrap();
    let before = latency.sent().len();
    assert!(cache.head("a/b").await.unwrap().is_none(), "listed as a directory");
    assert!(cache.get("a/b", GetOptions::default()).await.unwrap().is_none());
    assert!(cache.dir_exists("a/b/").await.unwrap());
    assert!(!cache.dir_exists("a/c/").await.unwrap(), "listed as a file");
    assert_eq!(latency.sent().len(), before, "answered from the listing");
    // Names it does not show may be hidden (dot files): asked.
    assert!(cache.head("a/.zarray").await.unwrap().is_none());
    assert!(cache.head("a/c").await.unwrap().is_some());
    assert_eq!(latency.requests(before), ["head a/.zarray", "head a/c"]);
}

#[tokio::test]
async fn a_complete_listing_answers_reads_of_missing_keys_and_dir_exists_keeps_one() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    assert!(cache.dir_exists("a/b/").await.unwrap());
    assert!(!cache.dir_exists("q/").await.unwrap());
    let c = counting.counts();
    assert_eq!(
        (c.list_dir, c.head),
        (2, 0),
        "dir_exists lists (and keeps) the directory"
    );
    assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["0", "1"]);
    assert!(cache
        .get("a/b/zarr.json", GetOptions::default())
        .await
        .unwrap()
        .is_none());
    assert!(cache.get("a/b/1", GetOptions::default()).await.unwrap().is_some());
    let c = counting.counts();
    assert_eq!((c.list_dir, c.get), (2, 1), "the missing key cost nothing: {c:?}");
}

#[tokio::test]
async fn a_listing_further_up_answers_reads_below_a_directory_it_does_not_show() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    cache.list_dir("a/").await.unwrap(); // b/ and c: no z/
    let before = counting.counts().get;
    assert!(cache.get("a/z/0/1", GetOptions::default()).await.unwrap().is_none());
    assert!(cache.head("a/z/0").await.unwrap().is_none());
    assert_eq!(
        counting.counts().get,
        before,
        "a/z/ is not in a/'s listing: nothing sent"
    );
    assert_eq!(counting.counts().head, 0);
    let lists = counting.counts().list_dir;
    assert!(cache.list_dir("a/z/0/").await.unwrap().is_empty());
    assert!(!cache.dir_exists("a/z/").await.unwrap());
    assert_eq!(counting.counts().list_dir, lists, "nor for listing what is below a/z/");
    // Below a directory it does show, it cannot say: asked.
    assert!(cache.get("a/b/9/9", GetOptions::default()).await.unwrap().is_none());
    assert_eq!(counting.counts().get, before + 1);
    // A write below drops the listing above it: then the store is asked.
    cache.set("a/z/0/1", Bytes::from_static(b"new")).await.unwrap();
    assert!(cache.get("a/z/0/1", GetOptions::default()).await.unwrap().is_some());
    // A source whose listings may leave names out never answers so.
    let cache = cache.incomplete_listings();
    cache.list_dir("x/").await.unwrap();
    let before = counting.counts().get;
    assert!(cache.get("x/q/0", GetOptions::default()).await.unwrap().is_none());
    assert_eq!(counting.counts().get, before + 1);
}

#[tokio::test]
async fn a_value_written_is_added_to_the_listings_kept_and_an_erase_drops_them() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    for dir in ["", "a/", "a/b/"] {
        cache.list_dir(dir).await.unwrap();
    }
    cache.set("a/b/2", Bytes::from_static(b"new")).await.unwrap();
    let before = counting.counts().list_dir;
    cache.list_dir("").await.unwrap();
    cache.list_dir("a/").await.unwrap();
    assert_eq!(
        counting.counts().list_dir,
        before,
        "the root and a/ show a/b/ already: kept"
    );
    let listed = cache.list_dir("a/b/").await.unwrap();
    assert_eq!(names(&listed), ["0", "1", "2"]);
    assert_eq!(listed[2].kind, EntryKind::File { size: 3 });
    assert_eq!(counting.counts().list_dir, before, "a/b/ shows the new value in place");
    // A missing key elsewhere is still answered from a/'s listing.
    let gets = counting.counts().get;
    assert!(cache.get("a/q/0", GetOptions::default()).await.unwrap().is_none());
    assert_eq!(counting.counts().get, gets);
    // A write in a new directory changes the listing above it.
    cache.set("a/q/0", Bytes::from_static(b"new")).await.unwrap();
    assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b", "c", "q"]);
    assert!(cache.get("a/q/0", GetOptions::default()).await.unwrap().is_some());
    // An erase takes the value out of its directory's kept listing; a directory left empty
    // goes from the one above, and so on up.
    let before = counting.counts();
    cache.erase("a/b/2").await.unwrap();
    assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["0", "1"]);
    cache
        .erase_values(&["a/b/0".to_string(), "a/b/1".to_string()])
        .await
        .unwrap();
    assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["c", "q"]);
    assert!(!cache.dir_exists("a/b/").await.unwrap());
    assert!(cache.head("a/b/0").await.unwrap().is_none());
    cache.erase_if("a/q/0", Precondition::Any).await.unwrap();
    cache.erase("a/c").await.unwrap();
    assert!(cache.list_dir("a/").await.unwrap().is_empty());
    assert!(!names(&cache.list_dir("").await.unwrap()).contains(&"a"));
    let after = counting.counts();
    assert_eq!(
        (after.list_dir, after.head),
        (before.list_dir, before.head),
        "all answered from what was kept"
    );
    // Where a directory's listing is not kept, whether it is left empty is not known: the
    // listings above it are dropped (x/ is not kept: the root's listing goes).
    cache.erase("x/0").await.unwrap();
    cache.list_dir("").await.unwrap();
    assert_eq!(counting.counts().list_dir, before.list_dir + 1);
}

#[tokio::test]
async fn a_directory_a_write_makes_is_listed_as_holding_only_what_is_written_there() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    cache.list_dir("a/").await.unwrap(); // b/ and c: no n/
    cache.set("a/n/m/zarr.json", Bytes::from_static(b"{}")).await.unwrap();
    let before = counting.counts();
    assert!(cache.head("a/n/m/zarr.0123.partial").await.unwrap().is_none());
    assert!(cache.head("a/n/zarr.json").await.unwrap().is_none());
    assert!(!cache.dir_exists("a/n/m/c/").await.unwrap());
    assert_eq!(names(&cache.list_dir("a/n/").await.unwrap()), ["m"]);
    let listed = cache.list_dir("a/n/m/").await.unwrap();
    assert_eq!(names(&listed), ["zarr.json"]);
    assert_eq!(listed[0].kind, EntryKind::File { size: 2 });
    let after = counting.counts();
    assert_eq!(
        (after.head, after.list_dir, after.get),
        (before.head, before.list_dir, before.get),
        "a/n/ was not in a/'s listing: it holds only a/n/m/zarr.json, nothing sent"
    );
    let got = cache.get("a/n/m/zarr.json", GetOptions::default()).await.unwrap();
    assert_eq!(got.map(|g| g.bytes), Some(Bytes::from_static(b"{}")));
    cache.set("a/n/m/c/0", Bytes::from_static(b"0")).await.unwrap();
    assert_eq!(names(&cache.list_dir("a/n/m/").await.unwrap()), ["c", "zarr.json"]);
    assert_eq!(names(&cache.list_dir("a/n/m/c/").await.unwrap()), ["0"]);
    assert_eq!(counting.counts().list_dir, before.list_dir);

    // A directory the listing showed already is not known whole: asked.
    cache.set("a/b/2", Bytes::from_static(b"new")).await.unwrap();
    let heads = counting.counts().head;
    assert!(cache.head("a/b/x/y").await.unwrap().is_none());
    assert_eq!(counting.counts().head, heads + 1);
    // Nor under a listing that may leave names out.
    let cache = cache.incomplete_listings();
    cache.list_dir("x/").await.unwrap();
    cache.set("x/new/zarr.json", Bytes::from_static(b"{}")).await.unwrap();
    let heads = counting.counts().head;
    assert!(cache.head("x/new/tmp").await.unwrap().is_none());
    assert_eq!(counting.counts().head, heads + 1);
}

#[tokio::test]
async fn a_directory_removed_goes_from_the_listing_above_when_it_is_known_empty() {
    let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
    for dir in ["", "a/", "a/b/"] {
        cache.list_dir(dir).await.unwrap();
    }
    // A directory made by the mount (an object store keeps none), emptied, removed.
    cache.set("a/n/0", Bytes::from_static(b"x")).await.unwrap();
    cache.erase("a/n/0").await.unwrap();
    let before = counting.counts();
    cache.remove_dir("a/n/").await.unwrap();
    assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b", "c"]);
    assert!(!cache.dir_exists("a/n/").await.unwrap());
    assert_eq!(names(&cache.list_dir("").await.unwrap()), ["a", "x"]);
    let after = counting.counts();
    assert_eq!(
        (after.list_dir, after.head),
        (before.list_dir, before.head),
        "answered from what was kept"
    );
    // A directory whose kept listing still shows names is not known to be gone: the listings
    // above it are dropped (erase_prefix erases below it in the store itself).
    cache.erase_prefix("a/b/").await.unwrap();
    assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["c"]);
    assert_eq!(counting.counts().list_dir, before.list_dir + 1);
    // The last name of a/ goes: so does a/, from the root's listing.
    cache.list_dir("").await.unwrap();
    let lists = counting.counts().list_dir;
    cache.erase("a/c").await.unwrap();
    assert_eq!(names(&cache.list_dir("").await.unwrap()), ["x"]);
    assert_eq!(counting.counts().list_dir, lists);
}
