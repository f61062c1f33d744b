//! The filesystem layer listing a large last-level chunk directory a page at a time: its first
//! answer needs the first shard's index only, its entries come in the order of coordinates,
//! and offsets stay stable however the listing is read: continued, resumed at an offset it
//! gave, or continued after names were removed and made meanwhile (none twice, none skipped).

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use zarrfs::fs::{DirItem, Fs};
use zarrfs::store::counting::CountingStore;
use zarrfs::store::memory::MemoryStore;

/// Shards along the one dimension, and chunks per shard: a directory of 32,768 chunk files,
/// each shard more than one answer holds.
const SHARDS: u64 = 4;
const PER_SHARD: u64 = 8192;
const N: u64 = SHARDS * PER_SHARD;

fn setup() -> (Arc<MemoryStore>, Arc<CountingStore>, Fs) {
    let spec = ArraySpec::new(&[N], &[PER_SHARD], &[1]);
    let built = spec.build("", &spec.full_chunks(5, 1, 1));
    let mem = memory_store(&built.files);
    let counts = Arc::new(CountingStore::new(mem.clone()));
    let fs = writable_fs(counts.clone());
    (mem, counts, fs)
}

fn names(items: &[DirItem]) -> Vec<String> {
    items.iter().map(|i| i.name.to_string()).collect()
}

/// Every entry from `offset` on, read as the kernel does: an answer at a time, `take` entries
/// of each (what its buffer held), going on from the offset of the last one taken.
async fn read_on(fs: &Fs, ino: u64, fh: u64, mut offset: u64, take: usize) -> Vec<DirItem> {
    let mut out = Vec::new();
    loop {
        let got: Vec<DirItem> = fs.dir_items(ino, fh, offset).await.unwrap().take(take).collect();
        let Some(last) = got.last() else {
            return out;
        };
        offset = last.offset;
        out.extend(got);
    }
}

#[tokio::test]
async fn the_first_answer_reads_one_shard_index_and_entries_come_by_coordinate() {
    let (_, counts, fs) = setup();
    let dir = fs_resolve(&fs, "c").await.unwrap();
    let before = counts.counts().get;
    let fh = fs.opendir(dir.ino).await.unwrap();
    let first: Vec<DirItem> = fs.dir_items(dir.ino, fh, 0).await.unwrap().take(100).collect();
    let gets = counts.counts().get - before;
    assert!(
        gets <= 1,
        "{gets} requests before the first answer: one shard index at most"
    );
    assert_eq!(names(&first[..5]), [".", "..", "0", "1", "2"]);
    // The rest, read on from there: every name once, in the order of coordinates.
    let rest = read_on(&fs, dir.ino, fh, first.last().unwrap().offset, 1000).await;
    let all: Vec<String> = names(&first[2..]).into_iter().chain(names(&rest)).collect();
    let want: Vec<String> = (0..N).map(|c| c.to_string()).collect();
    assert_eq!(all, want);
    let gets = counts.counts().get - before;
    assert!(gets <= SHARDS, "{gets} requests: each shard's index once at most");
    fs.releasedir(fh);
}

#[tokio::test]
async fn offsets_resume_the_same_listing_however_it_is_read() {
    let (_, _, fs) = setup();
    let dir = fs_resolve(&fs, "c").await.unwrap();
    let fh = fs.opendir(dir.ino).await.unwrap();
    let whole = fs.readdir(dir.ino, fh, 0).await.unwrap();
    assert_eq!(whole.len() as u64, N + 2);
    let offsets: Vec<u64> = whole.iter().map(|i| i.offset).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "offsets increase");
    // Resumed (`seekdir` to what `telldir` gave) on a handle that has taken only its first
    // page, and on one that has taken everything: the same entries with the same offsets.
    let keyed =
        |items: &[DirItem]| -> Vec<(String, u64)> { items.iter().map(|i| (i.name.to_string(), i.offset)).collect() };
    for k in [1, 2, 3, 4097, 8193, 16000, 24578, whole.len() - 1, whole.len()] {
        let from = whole[k - 1].offset;
        let fresh = fs.opendir(dir.ino).await.unwrap();
        let got = read_on(&fs, dir.ino, fresh, from, 700).await;
        assert_eq!(keyed(&got), keyed(&whole[k..]), "fresh handle from offset {from}");
        fs.releasedir(fresh);
        let got = read_on(&fs, dir.ino, fh, from, 5000).await;
        assert_eq!(keyed(&got), keyed(&whole[k..]), "read handle from offset {from}");
    }
    fs.releasedir(fh);
}

#[tokio::test]
async fn a_listing_continued_after_changes_repeats_and_skips_nothing() {
    let (_, _, fs) = setup();
    let dir = fs_resolve(&fs, "c").await.unwrap();
    fs.unlink(dir.ino, "30000").await.unwrap();
    let fh = fs.opendir(dir.ino).await.unwrap();
    // Up to "4999", into the first shard's pages only.
    let first: Vec<DirItem> = fs.dir_items(dir.ino, fh, 0).await.unwrap().take(5002).collect();
    assert_eq!(first.len(), 5002, "one answer holds 4096 entries at least");
    assert_eq!(first.last().unwrap().name.as_str(), "4999");
    // Meanwhile: one returned and one not returned yet go, one after the last returned comes.
    fs.unlink(dir.ino, "100").await.unwrap();
    fs.unlink(dir.ino, "20000").await.unwrap();
    let (_, wfh) = fs.create(dir.ino, "30000", false).await.unwrap();
    fs.write(wfh, 0, b"x").await.unwrap();
    let rest = read_on(&fs, dir.ino, fh, first.last().unwrap().offset, 900).await;
    let rest = names(&rest);
    let want: Vec<String> = (5000..N).filter(|&c| c != 20000).map(|c| c.to_string()).collect();
    assert_eq!(rest, want, "after the last name returned, in order");
    let seen: BTreeSet<&String> = rest.iter().collect();
    assert_eq!(seen.len(), rest.len(), "none twice");
    fs.release(wfh).await;
    fs.releasedir(fh);
}

#[tokio::test]
async fn a_directory_read_to_its_end_keeps_its_last_pages_and_takes_earlier_ones_again() {
    // Ten shards of 16,384 chunks: ten pages, more than a listing keeps. `du` reads a
    // directory of millions of chunk files to its end with the handle open: a listing that
    // kept every page held a few hundred bytes per entry until the close (350 MB for a
    // million). Offsets into the pages let go still mean the same entries.
    const PER: u64 = zarrfs::shard::PAGE_CHUNKS;
    let n = 10 * PER;
    let spec = ArraySpec::new(&[n], &[PER], &[1]);
    let built = spec.build("", &spec.full_chunks(5, 1, 1));
    let fs = writable_fs(memory_store(&built.files));
    let dir = fs_resolve(&fs, "c").await.unwrap();
    let fh = fs.opendir(dir.ino).await.unwrap();
    let all = read_on(&fs, dir.ino, fh, 0, 4096).await;
    let want: Vec<String> = (0..n).map(|c| c.to_string()).collect();
    assert_eq!(names(&all[2..]), want);
    let kept = fs.listing_entries_kept(fh).unwrap();
    let bound = zarrfs::fs::KEPT_ENTRIES + PER as usize;
    assert!(
        kept <= bound,
        "{kept} entries kept after the whole listing, at most {bound}"
    );
    // What it keeps is counted.
    assert_eq!(fs.listing_bytes_kept(), kept * zarrfs::fs::ENTRY_BYTES);
    assert!(zarrfs::fs::ENTRY_BYTES >= std::mem::size_of::<(String, zarrfs::view::Node)>());
    // Back to the start (rewinddir) and to an offset telldir gave in the first page.
    let again = read_on(&fs, dir.ino, fh, 0, 4096).await;
    assert_eq!(names(&again), names(&all));
    let at = all[1000].offset;
    let resumed: Vec<DirItem> = fs.dir_items(dir.ino, fh, at).await.unwrap().take(3).collect();
    assert_eq!(names(&resumed), names(&all[1001..1004]));
    assert!(fs.listing_entries_kept(fh).unwrap() <= bound);
    // The inode table does without what the listing keeps while it is open.
    let (open_fitting, listed) = (fs.inodes_fitting(), fs.listing_bytes_kept());
    fs.releasedir(fh);
    assert_eq!(fs.listing_bytes_kept(), 0, "nothing kept once closed");
    let per_inode = zarrfs::fs::inodes::InodeTable::MAX_BYTES_PER_INODE;
    let given_back = fs.inodes_fitting() - open_fitting;
    assert!(
        (listed / per_inode..=listed.div_ceil(per_inode)).contains(&given_back),
        "{given_back} inodes given back for {listed} bytes"
    );
}

#[tokio::test]
async fn with_listings_kept_for_a_ttl_a_large_directory_is_paged_and_a_small_one_whole() {
    // The kernel keeps a listing for a finite TTL by its fingerprint, which needs it whole;
    // one larger than a paged listing keeps is paged instead, and the kernel keeps none of it.
    const PER: u64 = zarrfs::shard::PAGE_CHUNKS;
    let n = 10 * PER;
    let large = ArraySpec::new(&[n], &[PER], &[1]);
    let small = ArraySpec::new(&[64], &[32], &[1]);
    let mut files = large.build("big/", &large.full_chunks(5, 1, 1)).files;
    files.extend(small.build("small/", &small.full_chunks(6, 1, 1)).files);
    let store = memory_store(&files);
    store.insert("zarr.json", group_json("root"));
    let mut config = zarrfs::fs::FsConfig::read_only(FS_UID, FS_GID, std::time::Duration::from_secs(1));
    config.kernel_listings = true;
    let fs = Fs::new(
        zarrfs::view::View::new(store, &zarrfs::view::ViewOptions::default()),
        config,
    );
    let dir = fs_resolve(&fs, "big/c").await.unwrap();
    let opened = fs.open_dir(dir.ino).await.unwrap();
    assert!(!opened.keep_cache);
    let all = read_on(&fs, dir.ino, opened.fh, 0, 4096).await;
    assert_eq!(all.len() as u64, n + 2);
    let kept = fs.listing_entries_kept(opened.fh).unwrap();
    assert!(kept <= zarrfs::fs::KEPT_ENTRIES + PER as usize, "{kept} entries kept");
    fs.releasedir(opened.fh);
    // The small one, opened twice: the kernel may keep the second (same fingerprint).
    let dir = fs_resolve(&fs, "small/c").await.unwrap();
    let first = fs.open_dir(dir.ino).await.unwrap();
    assert_eq!(read_on(&fs, dir.ino, first.fh, 0, 4096).await.len(), 64 + 2);
    fs.releasedir(first.fh);
    let second = fs.open_dir(dir.ino).await.unwrap();
    assert!(second.keep_cache, "a small listing is kept by its fingerprint");
    fs.releasedir(second.fh);
}
