//! Open file and directory handles.
//!
//! A chunk file is read as a snapshot: the first read fetches the whole inner chunk (one
//! ranged request, pinned to its shard's version) into the handle, and every later read of
//! that handle is served from it, so a reader never sees a chunk half old and half new. Chunks
//! larger than [`SNAPSHOT_LIMIT`] are read range by range instead. A directory handle holds the
//! listing taken at `opendir`, so offsets stay stable while the directory is read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::view::Node;

/// Largest chunk read whole into a handle on first read.
pub const SNAPSHOT_LIMIT: u64 = 16 << 20;

#[derive(Debug)]
pub struct FileHandle {
    pub path: Arc<str>,
    pub node: Node,
    /// The whole file, once read (chunk files up to the snapshot limit).
    pub snapshot: tokio::sync::Mutex<Option<Bytes>>,
}

#[derive(Debug)]
pub struct DirHandle {
    pub path: Arc<str>,
    pub entries: Vec<(String, Node)>,
}

/// Handles by number. Numbers start at 1 and are never reused.
#[derive(Debug)]
pub struct HandleTable<T> {
    next: AtomicU64,
    handles: Mutex<HashMap<u64, Arc<T>>>,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        HandleTable {
            next: AtomicU64::new(1),
            handles: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> HandleTable<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert(&self, value: T) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(fh, Arc::new(value));
        fh
    }

    pub fn get(&self, fh: u64) -> Option<Arc<T>> {
        self.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<T>> {
        self.lock().remove(&fh)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
