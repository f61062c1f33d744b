//! Directory listings the kernel keeps (`FOPEN_CACHE_DIR`), and when it may go on using them.
//!
//! A directory opened with `FOPEN_CACHE_DIR` has its entries kept by the kernel, with the
//! directory's pages; a later `opendir` answered with `FOPEN_KEEP_CACHE` as well is then listed
//! from them, with no READDIR to the daemon (`find` and `ls -R` of a tree they walked before
//! cost one OPENDIR per directory). An `opendir` without `FOPEN_KEEP_CACHE` drops them, and the
//! next listing from the start fills them again. The kernel also drops them by itself when the
//! directory changes through this mount (a create, unlink, rename or mkdir in it).
//!
//! So every `opendir` takes the listing as the daemon does anyway, and lets the kernel keep
//! what it holds only when it is exactly that listing (the same names and kinds: a kept entry
//! carries nothing else) *and* was given less than the metadata TTL ago. The second condition
//! is what makes it pay: the entries of a listing handed over with READDIRPLUS come with their
//! attributes, valid for the TTL; a kept listing comes without, so a walker that stats entries
//! whose attributes expired would send a LOOKUP per entry where a fresh READDIRPLUS answers a
//! page of them at once. What the kernel holds is known from what was handed to it: the
//! listing of the last `opendir` that dropped the kernel's copy, unless a listing from the
//! start was since served from another handle (two opens racing on a changing directory), which
//! the kernel may have kept instead: then nothing is known, and the next `opendir` drops it.
//!
//! With `--metadata-ttl indefinite` the view never asks the source again about what it has, so
//! while the mount changed nothing the listing is not even taken: the kernel lists from what it
//! kept, with no work in the daemon at all (`still_kept`).
//!
//! Used when `--metadata-ttl` is at least [`MIN_TTL`] and the source can be listed (see
//! `FsConfig::kernel_listings`): on one that cannot, a listing shows what lookups found so far.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::view::Node;

/// Shortest metadata TTL for which the kernel keeps listings. Below it a listing would rarely
/// be listed again while its entries are still valid, and the default of local sources (1 s)
/// keeps the behaviour it always had; remote sources (60 s by default) and `indefinite` get it.
pub const MIN_TTL: Duration = Duration::from_secs(10);

/// Directories whose kernel listings are tracked, at most. One forgotten here is dropped by the
/// kernel at its next `opendir`, which is always safe.
const TRACKED: usize = 1 << 16;

/// The listing handed to the kernel for one directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Given {
    /// Of the names and kinds; `None`: the kernel may hold another listing.
    fingerprint: Option<u64>,
    at: Instant,
    /// The mount's change generation when the listing was last taken and found the same.
    generation: u64,
    /// Handed without its entries' attributes (to a walker guessed to want names only, see
    /// `walkers.rs`): kept only for walkers that still do.
    bare: bool,
}

/// What the kernel holds of each directory's listing (see the module's documentation).
#[derive(Debug)]
pub struct KernelListings {
    ttl: Duration,
    given: Mutex<LruCache<String, Given>>,
}

impl KernelListings {
    /// Listings kept for `ttl` at most (the metadata TTL).
    pub fn new(ttl: Duration) -> Self {
        KernelListings {
            ttl,
            given: Mutex::new(LruCache::new(NonZeroUsize::new(TRACKED).unwrap_or(NonZeroUsize::MIN))),
        }
    }

    fn given(&self) -> std::sync::MutexGuard<'_, LruCache<String, Given>> {
        self.given.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `dir` is opened with a listing of `fingerprint`, taken at the mount's change
    /// `generation`: whether the kernel may keep what it holds. When it may not, the kernel
    /// drops it and this listing is what it will hold.
    /// A listing handed without attributes is not kept for a walker that `stats` (each of its
    /// stats would cost a LOOKUP; the listing taken again comes with them).
    pub fn open(&self, dir: &str, fingerprint: u64, generation: u64, stats: bool) -> bool {
        let now = Instant::now();
        let mut given = self.given();
        if let Some(g) = given.get_mut(dir) {
            if g.fingerprint == Some(fingerprint)
                && now.saturating_duration_since(g.at) < self.ttl
                && !(g.bare && stats)
            {
                g.generation = generation;
                return true;
            }
        }
        given.put(
            dir.to_string(),
            Given {
                fingerprint: Some(fingerprint),
                at: now,
                generation,
                bare: false,
            },
        );
        false
    }

    /// Whether the kernel may go on using what it kept of `dir` without the listing being taken
    /// again: only with an indefinite TTL (the view then never looks at the source again for
    /// what it has, so a listing can change only through this mount), and when the mount
    /// changed nothing since the listing was last taken. With a finite TTL the listing is taken
    /// at every `opendir`: the view may have learnt of a change since (a shard index reloaded
    /// by a read), which must show at the next listing.
    /// Whether listings are kept for good (an indefinite TTL): the view then changes only with
    /// the mount's change generation, so a listing too large to take whole at `opendir` can be
    /// kept by the generation it was taken at ([`open_paged`](Self::open_paged)).
    pub fn indefinite(&self) -> bool {
        self.ttl >= super::INDEFINITE_TTL
    }

    /// `dir` is opened with a listing taken a page at a time (its fingerprint is not known) at
    /// `generation`: the kernel drops what it holds, and may keep this listing while the
    /// generation holds ([`still_kept`](Self::still_kept)).
    pub fn open_paged(&self, dir: &str, generation: u64) -> bool {
        self.given().put(
            dir.to_string(),
            Given {
                fingerprint: Some(paged_mark(generation)),
                at: Instant::now(),
                generation,
                bare: false,
            },
        );
        false
    }

    /// A listing of `dir` taken a page at a time at `generation` is served from its start.
    pub fn served_paged_from_start(&self, dir: &str, generation: u64) {
        if let Some(g) = self.given().get_mut(dir) {
            if g.fingerprint != Some(paged_mark(generation)) {
                g.fingerprint = None;
            }
        }
    }

    /// Not for a walker that `stats` if it was handed without attributes (as [`open`](Self::open)).
    pub fn still_kept(&self, dir: &str, generation: u64, stats: bool) -> bool {
        if self.ttl < super::INDEFINITE_TTL {
            return false;
        }
        let mut given = self.given();
        given
            .get(dir)
            .is_some_and(|g| g.fingerprint.is_some() && g.generation == generation && !(g.bare && stats))
    }

    /// A listing of `dir` of `fingerprint` is served from its start: if it is not the one the
    /// kernel was last given, the kernel may be keeping it instead.
    pub fn served_from_start(&self, dir: &str, fingerprint: u64) {
        let mut given = self.given();
        if let Some(g) = given.get_mut(dir) {
            if g.fingerprint != Some(fingerprint) {
                g.fingerprint = None;
            }
        }
    }

    /// The listing of `dir` served from its start went with its entries' attributes (or the
    /// kernel has them: a file of it was looked up).
    pub fn handed_attributes(&self, dir: &str) {
        if let Some(g) = self.given().get_mut(dir) {
            g.bare = false;
        }
    }

    /// The listing of `dir` served from its start went with names only (`walkers.rs`).
    pub fn handed_names_only(&self, dir: &str) {
        if let Some(g) = self.given().get_mut(dir) {
            g.bare = true;
        }
    }
}

/// What stands for the fingerprint of a listing taken a page at a time at `generation`.
fn paged_mark(generation: u64) -> u64 {
    0x9e37_79b9_7f4a_7c15 ^ generation.rotate_left(17)
}

/// What a kept listing shows of entries: their names and kinds, in order.
pub fn fingerprint(entries: &[(String, Node)]) -> u64 {
    let mut h = DefaultHasher::new();
    entries.len().hash(&mut h);
    for (name, node) in entries {
        name.hash(&mut h);
        node.is_dir().hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(names: &[&str]) -> Vec<(String, Node)> {
        names.iter().map(|n| (n.to_string(), Node::dir())).collect()
    }

    #[test]
    fn kept_while_unchanged_and_within_the_ttl() {
        let k = KernelListings::new(Duration::from_secs(60));
        let a = fingerprint(&listing(&["0", "1"]));
        assert!(!k.open("c", a, 0, false), "nothing given yet");
        assert!(k.open("c", a, 0, false), "the same listing, just given");
        assert!(k.open("c", a, 0, false));
        let b = fingerprint(&listing(&["0", "1", "2"]));
        assert!(!k.open("c", b, 0, false), "changed: dropped");
        assert!(k.open("c", b, 0, false), "and the new one kept from then on");
        assert!(!k.open("d", b, 0, false), "per directory");
    }

    #[test]
    fn not_kept_once_its_entries_expired() {
        let k = KernelListings::new(Duration::from_millis(30));
        let a = fingerprint(&listing(&["0"]));
        assert!(!k.open("c", a, 0, false));
        std::thread::sleep(Duration::from_millis(40));
        assert!(!k.open("c", a, 0, false), "given over a TTL ago: handed over afresh");
        assert!(k.open("c", a, 0, false));
    }

    #[test]
    fn another_listing_served_from_the_start_is_never_kept_after() {
        let k = KernelListings::new(Duration::from_secs(60));
        let (old, new) = (fingerprint(&listing(&["0"])), fingerprint(&listing(&["0", "1"])));
        assert!(!k.open("c", old, 0, false));
        assert!(!k.open("c", new, 0, false), "a second open, the listing changed");
        // The first handle lists from the start after the second open dropped the kernel's
        // copy: the kernel may now hold the old listing.
        k.served_from_start("c", old);
        assert!(!k.open("c", new, 0, false), "unknown: dropped");
        k.served_from_start("c", new);
        assert!(k.open("c", new, 0, false));
    }

    #[test]
    fn still_kept_without_listing_while_the_mount_changed_nothing() {
        let k = KernelListings::new(crate::fs::INDEFINITE_TTL);
        let a = fingerprint(&listing(&["0"]));
        assert!(!k.still_kept("c", 3, false), "nothing given");
        assert!(!k.open("c", a, 3, false));
        assert!(k.still_kept("c", 3, false));
        assert!(!k.still_kept("c", 4, false), "the mount changed something: taken again");
        assert!(k.open("c", a, 4, false), "the same listing");
        assert!(k.still_kept("c", 4, false));
        k.served_from_start("c", fingerprint(&listing(&["1"])));
        assert!(!k.still_kept("c", 4, false), "the kernel may hold another listing");
        assert!(!k.open("c", a, 4, false));
        let finite = KernelListings::new(Duration::from_secs(3600));
        assert!(!finite.open("c", a, 4, false));
        assert!(finite.open("c", a, 4, false));
        assert!(
            !finite.still_kept("c", 4, false),
            "with a finite TTL the listing is always taken"
        );
    }

    #[test]
    fn a_listing_handed_without_attributes_is_not_kept_for_a_walker_that_stats() {
        for k in [
            KernelListings::new(Duration::from_secs(60)),
            KernelListings::new(crate::fs::INDEFINITE_TTL),
        ] {
            let a = fingerprint(&listing(&["0"]));
            assert!(!k.open("c", a, 0, false));
            k.served_from_start("c", a);
            k.handed_names_only("c");
            assert!(k.open("c", a, 0, false), "kept for a walker that wants names");
            assert!(!k.open("c", a, 0, true), "not for one that stats");
            k.served_from_start("c", a);
            k.handed_attributes("c");
            assert!(k.open("c", a, 0, true), "handed with attributes: kept for both");
            assert!(k.open("c", a, 0, false));
        }
    }

    #[test]
    fn a_listing_taken_a_page_at_a_time_is_kept_while_the_generation_holds() {
        let k = KernelListings::new(crate::fs::INDEFINITE_TTL);
        assert!(k.indefinite());
        assert!(!k.open_paged("c", 7), "what the kernel holds is not known: dropped");
        k.served_paged_from_start("c", 7);
        k.handed_names_only("c");
        assert!(!k.still_kept("c", 7, true), "names only, for a walker that stats");
        k.handed_attributes("c");
        assert!(k.still_kept("c", 7, true));
        assert!(!k.still_kept("c", 8, false), "the mount changed something");
        assert!(!k.open_paged("c", 8));
        k.served_paged_from_start("c", 7); // an older handle served its listing
        assert!(!k.still_kept("c", 8, false), "the kernel may hold the older one");
        assert!(!KernelListings::new(Duration::from_secs(60)).indefinite());
    }

    #[test]
    fn names_and_kinds_make_the_fingerprint() {
        let a = listing(&["0", "1"]);
        let mut files = a.clone();
        files[1].1 = Node::unstored(5);
        assert_ne!(fingerprint(&a), fingerprint(&files));
        assert_ne!(fingerprint(&a), fingerprint(&listing(&["0", "2"])));
        let mut resized = files.clone();
        resized[1].1 = Node::unstored(7);
        assert_eq!(
            fingerprint(&files),
            fingerprint(&resized),
            "sizes are not kept with names"
        );
    }
}
