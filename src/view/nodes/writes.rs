//! Writes of node documents through the mount that are in flight, by directory.
//!
//! A `zarr.json` stored through the mount is cached as its node's kind without being read back
//! ([`NodeCache::stored`](super::NodeCache::stored)). Two writes of one directory's document
//! that overlap in time may have their answers come back in another order than the store
//! applied them, and a write may meet a forget of its directory (its document removed, or
//! changed another way): caching the last answer could then show an older document's kind
//! for the whole TTL. Such a write is marked disturbed, and its document is not cached: the
//! next lookup asks the store.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub(in crate::view) struct NodeWrites {
    in_flight: Mutex<HashMap<String, InFlight>>,
}

#[derive(Debug)]
struct InFlight {
    count: usize,
    /// Another write of the directory, or a forget of it, came while one was in flight.
    disturbed: bool,
}

/// One write of a directory's document, from before it is sent until its answer is used.
#[derive(Debug)]
pub struct NodeWrite<'a> {
    writes: &'a NodeWrites,
    pub(super) dir: String,
}

impl NodeWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn begin(&self, dir: &str) -> NodeWrite<'_> {
        let mut in_flight = self.lock();
        let entry = in_flight.entry(dir.to_string()).or_insert(InFlight {
            count: 0,
            disturbed: false,
        });
        entry.disturbed |= entry.count > 0;
        entry.count += 1;
        NodeWrite {
            writes: self,
            dir: dir.to_string(),
        }
    }

    /// `dir` was forgotten: a write of it in flight must not cache its answer.
    pub(super) fn disturb(&self, dir: &str) {
        if let Some(entry) = self.lock().get_mut(dir) {
            entry.disturbed = true;
        }
    }

    /// Everything was forgotten.
    pub(in crate::view) fn disturb_all(&self) {
        for entry in self.lock().values_mut() {
            entry.disturbed = true;
        }
    }
}

impl NodeWrite<'_> {
    /// Whether another write of the directory, or a forget of it, came while this one was in
    /// flight.
    pub(super) fn disturbed(&self) -> bool {
        self.writes.lock().get(&self.dir).is_some_and(|e| e.disturbed)
    }
}

impl Drop for NodeWrite<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.writes.lock();
        if let Some(entry) = in_flight.get_mut(&self.dir) {
            entry.count -= 1;
            if entry.count == 0 {
                in_flight.remove(&self.dir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_disturbed_by_an_overlapping_write_or_a_forget_only() {
        let writes = NodeWrites::default();
        let alone = writes.begin("a");
        let other_dir = writes.begin("b");
        assert!(!alone.disturbed() && !other_dir.disturbed());
        drop(alone);
        // Both of two overlapping writes are disturbed, whichever answers last.
        let first = writes.begin("a");
        let second = writes.begin("a");
        assert!(first.disturbed());
        drop(first);
        assert!(second.disturbed());
        drop(second);
        // A write after them starts clean; a forget of its directory disturbs it.
        let third = writes.begin("a");
        assert!(!third.disturbed());
        writes.disturb("a");
        assert!(third.disturbed());
        writes.disturb_all();
        assert!(other_dir.disturbed());
        drop((third, other_dir));
        assert!(writes.lock().is_empty(), "nothing is kept once the writes are done");
    }
}
