//! Where the inode table keeps its entries: in one vector, by slot, a freed slot taken again
//! by the next inode made. An inode's number is its slot, with the slot's generation (how many
//! inodes it held before) in the high 32 bits, so a number is never given twice.
//!
//! A hash table keyed by numbers made in sequence is a poor fit for a table that the kernel
//! empties as fast as a walk fills it: its removals leave tombstones, and a table more than
//! half full of live entries grows to twice its size to get rid of them (at ten million files
//! walked with a million held: 4 million slots, 300 MB), and touches every slot as the numbers
//! go round it. Here a slot is taken again, so the vector is as long as the most inodes held
//! at one time, and only that much of it is ever touched (a grown vector is moved by `mremap`,
//! not copied: there is no moment with the old and new one both resident).
//!
//! The lowest free slot is taken first (a heap of free slots, 4 bytes each while free), so
//! that the inodes held gather at the start of the vector and its end frees up when fewer are
//! held: free slots at the end are cut off and their memory given back (the slots' next
//! generation is kept as a floor for any slot made again, so no number comes back).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::tree::Inode;

/// Slot 0 is never used (no inode is numbered 0); the root is slot 1, generation 0.
const FIRST_SLOT: usize = 1;

#[derive(Debug)]
enum Slot {
    Used(Inode),
    /// Free; `generation` is the one its next inode gets.
    Free {
        generation: u32,
    },
}

#[derive(Debug)]
pub(super) struct Slab {
    slots: Vec<Slot>,
    /// Free slots (some may be past the end, cut off since: skipped).
    free: BinaryHeap<Reverse<u32>>,
    len: usize,
    /// The generation a slot made anew starts at: above every slot cut off.
    floor: u32,
}

/// The slot of inode number `ino`, and its generation.
fn split(ino: u64) -> (usize, u32) {
    ((ino & 0xFFFF_FFFF) as usize, (ino >> 32) as u32)
}

fn number(slot: u32, generation: u32) -> u64 {
    u64::from(generation) << 32 | u64::from(slot)
}

impl Slab {
    /// A slab with `root` as inode 1.
    pub(super) fn new(root: Inode) -> Self {
        Slab {
            slots: vec![Slot::Free { generation: 0 }, Slot::Used(root)],
            free: BinaryHeap::new(),
            len: 1,
            floor: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Slots the vector holds (used and free): what the table's entries take in memory.
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of the heap of free slots.
    pub(super) fn free_bytes(&self) -> usize {
        self.free.capacity() * std::mem::size_of::<u32>()
    }

    pub(super) fn get(&self, ino: &u64) -> Option<&Inode> {
        let (slot, generation) = split(*ino);
        match self.slots.get(slot) {
            Some(Slot::Used(inode)) if inode.generation == generation && slot >= FIRST_SLOT => Some(inode),
            _ => None,
        }
    }

    pub(super) fn get_mut(&mut self, ino: &u64) -> Option<&mut Inode> {
        let (slot, generation) = split(*ino);
        match self.slots.get_mut(slot) {
            Some(Slot::Used(inode)) if inode.generation == generation && slot >= FIRST_SLOT => Some(inode),
            _ => None,
        }
    }

    pub(super) fn contains_key(&self, ino: &u64) -> bool {
        self.get(ino).is_some()
    }

    /// The inode in `slot`, whatever its generation (the index of names holds slots).
    pub(super) fn at_slot(&self, slot: u32) -> Option<&Inode> {
        match self.slots.get(slot as usize) {
            Some(Slot::Used(inode)) => Some(inode),
            _ => None,
        }
    }

    /// The number of the inode in `slot`, if one is there.
    pub(super) fn number_at(&self, slot: u32) -> Option<u64> {
        self.at_slot(slot).map(|i| number(slot, i.generation))
    }

    /// The slot of `ino` (whether or not it is held).
    pub(super) fn slot_of(ino: u64) -> u32 {
        split(ino).0 as u32
    }

    /// Every inode with its number.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Inode)> + '_ {
        self.slots.iter().enumerate().filter_map(|(slot, s)| match s {
            Slot::Used(inode) => Some((number(slot as u32, inode.generation), inode)),
            Slot::Free { .. } => None,
        })
    }

    /// Put `inode` in the lowest free slot (its generation is set here); returns its number.
    /// `None` if every one of the 2^32 slots is taken (more memory than a machine has).
    pub(super) fn insert(&mut self, mut inode: Inode) -> Option<u64> {
        while let Some(Reverse(slot)) = self.free.pop() {
            if let Some(Slot::Free { generation }) = self.slots.get(slot as usize) {
                let generation = *generation;
                inode.generation = generation;
                self.slots[slot as usize] = Slot::Used(inode);
                self.len += 1;
                return Some(number(slot, generation));
            }
        }
        let slot = u32::try_from(self.slots.len()).ok().filter(|s| *s < u32::MAX)?;
        inode.generation = self.floor;
        self.slots.push(Slot::Used(inode));
        self.len += 1;
        Some(number(slot, self.floor))
    }

    /// Take `ino` out; its slot is free for the next inode, with the next generation. Free
    /// slots at the end are cut off, and the vector shrunk once it is mostly unused.
    pub(super) fn remove(&mut self, ino: &u64) -> Option<Inode> {
        self.get(ino)?;
        let (slot, generation) = split(*ino);
        let free = Slot::Free {
            generation: generation.wrapping_add(1),
        };
        let Slot::Used(inode) = std::mem::replace(&mut self.slots[slot], free) else {
            return None;
        };
        self.len -= 1;
        if slot + 1 == self.slots.len() {
            while let Some(Slot::Free { generation }) = self.slots.last().filter(|_| self.slots.len() > FIRST_SLOT + 1)
            {
                self.floor = self.floor.max(*generation);
                self.slots.pop();
            }
        } else {
            self.free.push(Reverse(slot as u32));
        }
        Some(inode)
    }

    /// Give memory back once most of the vector or of the heap of free slots is unused (each
    /// shrink follows as many removals as it moves entries). Returns whether anything shrank.
    pub(super) fn shrink(&mut self, min_slots: usize) -> bool {
        let mut shrank = false;
        if self.slots.capacity() >= min_slots && self.slots.len() * 4 <= self.slots.capacity() {
            self.slots.shrink_to(self.slots.len() * 2);
            shrank = true;
        }
        let free = self.slots.len().saturating_sub(self.len + 1);
        if self.free.len() >= min_slots && self.free.len() >= free * 2 {
            // Slots cut off, or listed twice (freed, cut off, made and freed again).
            let mut slots = std::mem::take(&mut self.free).into_vec();
            slots.retain(|Reverse(s)| matches!(self.slots.get(*s as usize), Some(Slot::Free { .. })));
            slots.sort_unstable();
            slots.dedup();
            slots.shrink_to(slots.len() * 2);
            self.free = BinaryHeap::from(slots);
            shrank = true;
        }
        shrank
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(name: &str) -> Inode {
        Inode::new(super::super::ROOT_INO, name)
    }

    #[test]
    fn a_freed_slot_is_taken_again_with_a_new_number() {
        let mut s = Slab::new(inode(""));
        assert_eq!(s.get(&1).map(|i| i.name.as_str()), Some(""));
        let a = s.insert(inode("a")).unwrap();
        let keep = s.insert(inode("keep")).unwrap();
        assert_eq!(a, 2);
        assert!(s.remove(&a).is_some());
        assert!(s.get(&a).is_none());
        let b = s.insert(inode("b")).unwrap();
        assert_eq!(Slab::slot_of(b), 2, "the freed slot");
        assert_ne!(b, a, "a number is never given twice");
        assert!(s.get(&a).is_none(), "the old number finds nothing");
        assert_eq!(s.get(&b).map(|i| i.name.as_str()), Some("b"));
        assert!(s.remove(&a).is_none());
        assert_eq!((s.len(), s.slots()), (3, 4));
        assert_eq!(s.number_at(2), Some(b));
        let numbers: Vec<u64> = s.iter().map(|(n, _)| n).collect();
        assert_eq!(numbers, [1, b, keep]);
        // The last slot freed is cut off; made again, it has a number never given.
        s.remove(&keep);
        assert_eq!(s.slots(), 3);
        let again = s.insert(inode("again")).unwrap();
        assert_eq!(Slab::slot_of(again), 3);
        assert_ne!(again, keep);
        assert!(s.get(&keep).is_none());
    }

    #[test]
    fn churn_keeps_the_vector_as_long_as_the_most_held_at_once_and_it_shrinks_when_emptied() {
        let mut s = Slab::new(inode(""));
        let mut held = std::collections::VecDeque::new();
        for i in 0..300_000 {
            held.push_back(s.insert(inode(&i.to_string())).unwrap());
            if held.len() > 100_000 {
                let ino = held.pop_front().unwrap();
                assert!(s.remove(&ino).is_some());
            }
        }
        assert_eq!(s.len(), 100_001);
        assert!(s.slots() <= 100_003, "{} slots for {} inodes", s.slots(), s.len());
        // Fewer held: the inodes gather at the start (the lowest slots are taken first) and
        // the end is cut off.
        for i in 0..200_000 {
            held.push_back(s.insert(inode(&i.to_string())).unwrap());
            for _ in 0..2 {
                if held.len() > 50_000 {
                    s.remove(&held.pop_front().unwrap());
                    s.shrink(4096);
                }
            }
        }
        assert_eq!(s.len(), 50_001);
        assert!(s.slots() <= 60_000, "{} slots for {} inodes", s.slots(), s.len());
        for ino in held.drain(..) {
            s.remove(&ino);
            s.shrink(4096);
        }
        assert_eq!(s.len(), 1);
        assert!(s.slots() < 4096, "{} slots kept for the root", s.slots());
        assert!(s.get(&1).is_some());
        assert!(s.free_bytes() < 1 << 16, "{} bytes of free slots", s.free_bytes());
        let c = s.insert(inode("c")).unwrap();
        assert!(s.get(&c).is_some());
    }
}
