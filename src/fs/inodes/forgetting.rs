//! Which names the kernel should forget when the inode table is over `--max-inodes` (see
//! `fuse/pruning.rs`): the kernel holds inodes for as long as it likes, so a mount that must
//! keep its memory bounded asks it to let some go, by name.

use super::slab::Slab;
use super::tree::Tables;
use super::ROOT_INO;

impl Tables {
    /// Names that, once the kernel forgets them, let about `want` inodes go: the kernel holds
    /// inodes for as long as it likes, so a mount that must keep its memory bounded asks it to
    /// forget some. The oldest inodes the kernel holds and nothing else does (walks go in
    /// order, so the first walked) are let go through their directory, which takes every file
    /// in it at once; a file of a directory too large for that, or of the root, alone.
    pub(in crate::fs::inodes) fn oldest_names(&self, want: usize) -> Vec<(u64, String)> {
        /// A directory with more entries than this is not forgotten whole.
        const WHOLE_DIR: u32 = 1 << 16;
        // (age, slot): 8 bytes a leaf, oldest first.
        let made = self.made();
        let mut leaves: Vec<(u32, u32)> = self
            .inodes
            .iter()
            .filter(|(ino, i)| i.is_leaf() && i.lookups > 0 && i.is_attached() && *ino != ROOT_INO)
            .filter(|(ino, _)| !self.held.contains_key(ino))
            .map(|(ino, i)| (made.wrapping_sub(i.born), Slab::slot_of(ino)))
            .collect();
        leaves.sort_unstable_by(|a, b| b.cmp(a));
        let mut names = Vec::new();
        let mut dirs = std::collections::HashSet::new();
        let mut freed = 0usize;
        for (_, slot) in leaves {
            if freed >= want {
                break;
            }
            let Some(leaf) = self.inodes.at_slot(slot) else {
                continue;
            };
            let parent = self.parent_of(leaf);
            if dirs.contains(&parent) {
                continue;
            }
            let Some(dir) = self.inodes.get(&parent) else {
                continue;
            };
            let whole = parent != ROOT_INO && dir.children() <= WHOLE_DIR && dir.is_attached();
            if whole && !self.held.contains_key(&parent) {
                dirs.insert(parent);
                names.push((self.parent_of(dir), dir.name.to_string()));
                freed += dir.children() as usize;
            } else {
                names.push((parent, leaf.name.to_string()));
                freed += 1;
            }
        }
        names
    }
}
