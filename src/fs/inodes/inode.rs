//! What the inode table keeps of one inode: 64 bytes (see `tree.rs` for what the tables
//! around it add), its flags, and what is known of its attributes.

use compact_str::CompactString;

use super::slab::Slab;

/// Flags of an inode.
pub(super) const ATTACHED: u8 = 1;
/// Its name was removed through this mount (see [`Tables::detach`]).
pub(super) const UNLINKED: u8 = 2;
/// It holds the attributes the kernel was first given (see `sizes.rs`).
pub(super) const SHOWN: u8 = 4;
/// A reader was given it with the kernel's page cache (see `caching.rs`).
pub(super) const CACHED: u8 = 8;
/// Written through this mount: every handle of it is direct I/O (see `caching.rs`).
pub(super) const DIRECT: u8 = 16;
/// Its name was given another inode so that its size never changes (see `caching.rs`).
pub(super) const RETIRED: u8 = 32;
/// Unlinked by a rename that then failed: the kernel, told it failed, still leads the name
/// here (see [`InodeTable::kernel_still_names`](super::InodeTable::kernel_still_names)).
pub(super) const STILL_NAMED: u8 = 64;

/// What one inode takes in the tables: its slot in the slab, and its slot number in the index
/// with the hash table's control byte.
pub(super) const BYTES_PER_INODE: usize = std::mem::size_of::<Inode>() + std::mem::size_of::<u32>() + 1;
const _: () = assert!(BYTES_PER_INODE <= 72);
/// The same with the index at its emptiest (7/16 full, just grown) and the slab's heap of free
/// slots.
pub(super) const MAX_BYTES_PER_INODE: usize = std::mem::size_of::<Inode>() + 16 * 5 / 7 + 4;

#[derive(Debug)]
pub(super) struct Inode {
    /// The slot of the parent (alive while this inode is: see [`Slab::number_at`]).
    pub(super) parent: u32,
    /// The slab's generation of this inode's slot (the high half of its number).
    pub(super) generation: u32,
    /// When it was made, in inodes made by the mount (wrapping): the oldest go first.
    pub(super) born: u32,
    pub(super) name: CompactString,
    /// Lookups the kernel holds (saturating: a count that cannot go higher never drops it).
    pub(super) lookups: u32,
    /// Inodes naming this one as their parent (attached or not).
    pub(super) children: u32,
    /// The size and time (ns since the epoch) the kernel was first shown, if `SHOWN`.
    pub(super) shown_size: u64,
    pub(super) shown_mtime_ns: i64,
    pub(super) flags: u8,
}

impl Inode {
    /// A new inode named `name` in directory `parent`, not attached, with no lookup.
    pub(super) fn new(parent: u64, name: &str) -> Self {
        Inode {
            parent: Slab::slot_of(parent),
            generation: 0,
            born: 0,
            name: CompactString::from(name),
            lookups: 0,
            children: 0,
            shown_size: 0,
            shown_mtime_ns: 0,
            flags: 0,
        }
    }

    pub(super) fn unlinked(&self) -> bool {
        self.flags & UNLINKED != 0
    }

    pub(super) fn shown(&self) -> bool {
        self.flags & SHOWN != 0
    }

    pub(super) fn set_shown(&mut self, size: u64, mtime_ns: i64) {
        if !self.shown() {
            (self.shown_size, self.shown_mtime_ns) = (size, mtime_ns);
            self.flags |= SHOWN;
        }
    }

    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    pub(super) fn set(&mut self, flag: u8) {
        self.flags |= flag;
    }

    pub(super) fn is_attached(&self) -> bool {
        self.flags & ATTACHED != 0
    }

    /// No inode names this one as its parent.
    pub(super) fn is_leaf(&self) -> bool {
        self.children == 0
    }

    pub(super) fn children(&self) -> u32 {
        self.children
    }

    pub(super) fn relink(&mut self) {
        self.flags &= !(UNLINKED | STILL_NAMED);
    }
}
