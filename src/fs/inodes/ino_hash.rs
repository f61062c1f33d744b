//! How the inode table places inodes by number: in order, so that neighbours in number are
//! neighbours in memory.
//!
//! A listing hands the kernel its entries one after another, and the inodes of one directory's
//! entries were made one after another, so their numbers follow each other. With a mixing hash
//! each of them is a random place in a table of millions (a cache and TLB miss each, about
//! 0.2 µs on this kind of machine, most of what a listing of a million entries cost the daemon);
//! placed by number they share cache lines and pages. The low bits of the hash are the number
//! itself (the table's slot), and the top seven bits, which the table compares to tell keys
//! apart within a group of slots, are mixed from it. The numbers are the mount's own, made in
//! sequence: nothing outside chooses them.

use std::hash::{BuildHasher, Hasher};

/// Builds [`InoHasher`]s.
#[derive(Debug, Clone, Copy, Default)]
pub struct InoHash;

impl BuildHasher for InoHash {
    type Hasher = InoHasher;

    fn build_hasher(&self) -> InoHasher {
        InoHasher(0)
    }
}

/// Hashes one inode number (see the module's documentation).
#[derive(Debug, Default)]
pub struct InoHasher(u64);

const TOP: u64 = 0xFE00_0000_0000_0000;

impl Hasher for InoHasher {
    fn finish(&self) -> u64 {
        (self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) & TOP) | (self.0 & !TOP)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only numbers are hashed here; anything else is folded in, to stay a hash.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_in_number_are_neighbours_in_the_table_and_told_apart_by_the_top_bits() {
        let h = |n: u64| InoHash.hash_one(n);
        assert_eq!(h(1001) & 0xFFFF, (h(1000) & 0xFFFF) + 1);
        let tops: std::collections::HashSet<u64> = (0..1000).map(|n| h(n) >> 57).collect();
        assert!(tops.len() > 100, "{} different top bits", tops.len());
    }
}
