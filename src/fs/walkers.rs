//! Whether a listing hands the kernel its entries' attributes: a guess at what the program
//! walking the tree does with the names.
//!
//! A READDIRPLUS answer makes the kernel build a dentry and an inode for every entry, and the
//! mount counts a lookup for each (`Fs::entry_attr`). That is what `du`, `ls -l`, `cp -r`,
//! `rsync` and `os.stat` walks want: their stats are then answered from the kernel's cache,
//! not by a LOOKUP each. A walker that only wants names (`find`, `os.walk`, `ls -R`) pays the
//! same for nothing, about four times what a plain listing costs it (issue 35).
//!
//! The kernel asks with READDIRPLUS for the first part of a listing and with plain READDIR for
//! the rest (`FUSE_READDIRPLUS_AUTO`, which the mount asks for), unless a program looked up a
//! name in the directory in between. So the answer to the first part decides: with attributes
//! up to the last entry, or only `.` and `..`, leaving every name to plain READDIRs.
//!
//! The guess is made from what the walker did with the directories listed just before, as the
//! mount sees it: a LOOKUP of a file in a directory it listed shortly before, or the kernel
//! asking for the rest of such a listing with attributes (it does once a program used an entry
//! it was handed with them: `ls -l` stats each entry as it reads it), means the walker stats
//! (or opens) what it lists. While the guess is "stats", the last file of each listing
//! is still left without attributes, so that a walker that does stat keeps showing it (one
//! LOOKUP per directory) and one that stopped is noticed at its next directory. A wrong guess
//! costs time, never correctness: an entry without attributes is looked up when used.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Listings remembered: enough for a few walkers at once.
const REMEMBERED: usize = 16;

/// A listing older than this says nothing about the walker listing now.
const WINDOW: Duration = Duration::from_secs(30);

/// Listings looked at for the guess: the most recent ones other than the one starting.
const CONSULTED: usize = 2;

/// One listing from the start, and whether a file in it was looked up since.
#[derive(Debug, Clone, Copy)]
struct Listed {
    dir_ino: u64,
    at: Instant,
    statted: bool,
}

/// The recent listings (see the module's documentation).
#[derive(Debug, Default)]
pub struct Walkers {
    recent: Mutex<VecDeque<Listed>>,
}

impl Walkers {
    /// A listing of directory `dir_ino` starts from the beginning: whether to hand its entries
    /// with their attributes. With nothing recent to go by, yes: most walkers stat.
    pub fn listing_starts(&self, dir_ino: u64) -> bool {
        self.listed(dir_ino)
    }

    /// Whether the walker is guessed to stat what it lists, as [`listing_starts`] would say,
    /// without a listing starting.
    ///
    /// [`listing_starts`]: Self::listing_starts
    pub fn stats(&self) -> bool {
        let now = Instant::now();
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let mut live = recent
            .iter()
            .rev()
            .filter(|l| now.duration_since(l.at) < WINDOW)
            .peekable();
        live.peek().is_none() || live.take(CONSULTED).any(|l| l.statted)
    }

    /// Directory `dir_ino` is listed from the start (by the daemon, or by the kernel from what
    /// it kept): remember it, to see whether its files get looked up. Returns the guess made
    /// before it.
    pub fn listed(&self, dir_ino: u64) -> bool {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|l| l.dir_ino != dir_ino && now.duration_since(l.at) < WINDOW);
        let stats = recent.is_empty() || recent.iter().rev().take(CONSULTED).any(|l| l.statted);
        if recent.len() == REMEMBERED {
            recent.pop_front();
        }
        recent.push_back(Listed {
            dir_ino,
            at: now,
            statted: false,
        });
        stats
    }

    /// A program used what a listing of directory `dir_ino` gave: it looked up a file there,
    /// or the kernel asks for more with attributes (which it does once an entry it was handed
    /// with them was used).
    pub fn entries_used(&self, dir_ino: u64) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = recent.iter_mut().rev().find(|l| l.dir_ino == dir_ino) {
            l.statted = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walker_that_stats_keeps_attributes_and_one_that_does_not_loses_them() {
        let w = Walkers::default();
        assert!(w.listing_starts(10), "nothing to go by: attributes");
        // A `find`: no lookup of a file in what it listed.
        assert!(!w.listing_starts(11));
        assert!(!w.listing_starts(12));
        // A `du` starts: its first directory goes without attributes, and it looks files up.
        assert!(!w.listing_starts(20));
        w.entries_used(20);
        assert!(w.listing_starts(21));
        w.entries_used(21);
        assert!(w.listing_starts(22));
        // It stopped statting (a `find` again): one more directory with attributes, then none.
        assert!(w.listing_starts(23));
        assert!(!w.listing_starts(24));
    }

    #[test]
    fn lookups_in_a_directory_not_listed_recently_say_nothing() {
        let w = Walkers::default();
        assert!(w.listing_starts(1));
        assert!(!w.listing_starts(2));
        w.entries_used(99);
        assert!(!w.listing_starts(3));
    }

    #[test]
    fn two_walkers_at_once_one_statting_keeps_attributes() {
        let w = Walkers::default();
        assert!(w.listing_starts(1));
        w.entries_used(1);
        // The statting walker's directory is among the last two listings.
        assert!(w.listing_starts(100));
        assert!(w.listing_starts(2));
        w.entries_used(2);
        assert!(w.listing_starts(101));
    }

    #[test]
    fn relisting_a_directory_replaces_its_entry() {
        let w = Walkers::default();
        assert!(w.listing_starts(1));
        w.entries_used(1);
        assert!(w.listing_starts(1), "nothing else to go by");
        assert_eq!(w.recent.lock().unwrap().len(), 1);
    }
}
