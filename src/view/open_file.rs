//! Files open for reading: the node confirmed at open, read consistently.
//!
//! Opening confirms what is there now: a chunk's shard version is checked (a file about to be
//! opened must not come from a stale index) and where the chunk lies is kept, so reads go
//! straight to its bytes. A chunk file is then read as a snapshot: the first read fetches the
//! whole inner chunk (one ranged request, pinned to its shard's version) and every later read
//! of that open file is served from it, so a reader never sees a chunk half old and half new.
//! Chunks larger than [`SNAPSHOT_LIMIT`] are read range by range instead. A stored file of a
//! remote source is read ahead ([`super::read_ahead`]).

use bytes::Bytes;

use super::locate::{At, Located};
use super::read_ahead::{self, ReadAhead};
use super::types::Source;
use super::{Node, View, ViewError};
use crate::store::ByteRange;

/// Largest chunk read whole into an open file on first read.
pub const SNAPSHOT_LIMIT: u64 = 16 << 20;

/// A file of the view open for reading.
#[derive(Debug)]
pub struct OpenFile {
    node: Node,
    /// The whole file, once read (chunk files up to the snapshot limit).
    snapshot: tokio::sync::Mutex<Option<Bytes>>,
    read_ahead: ReadAhead,
}

impl OpenFile {
    pub fn new(node: Node) -> Self {
        OpenFile {
            node,
            snapshot: tokio::sync::Mutex::new(None),
            read_ahead: ReadAhead::default(),
        }
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The whole file, if a read has taken it whole (chunk files up to the snapshot limit).
    pub async fn whole(&self) -> Option<Bytes> {
        self.snapshot.lock().await.clone()
    }
}

impl View {
    /// What is at a placed path as the store holds it now, to be opened: a chunk is located
    /// afresh (its shard's version confirmed) and the location kept in the node.
    pub async fn current(&self, at: &Located) -> Result<Option<Node>, ViewError> {
        let At::Chunk { node, coords } = &at.at else {
            return self.node(at).await;
        };
        let Some(loc) = node.array.locate_current(coords).await? else {
            return Ok(None);
        };
        Ok(Some(Node {
            size: loc.nbytes,
            mtime_ns: loc.mtime_ns,
            source: Source::Chunk {
                array: node.array.clone(),
                coords: coords.clone(),
                at: Some(loc),
            },
        }))
    }

    /// Read `len` bytes at `offset` of an open file (see the module notes).
    pub async fn read_open(&self, file: &OpenFile, offset: u64, len: u64) -> Result<Bytes, ViewError> {
        let node = &file.node;
        match &node.source {
            Source::Stored { key, .. } if self.read_ahead > 0 => {
                let target = read_ahead::Target {
                    store: &self.store,
                    key,
                    size: node.size,
                    ahead: self.read_ahead,
                };
                file.read_ahead.read(&target, offset, len).await
            }
            Source::Chunk { .. } if node.size <= SNAPSHOT_LIMIT => {
                let mut snapshot = file.snapshot.lock().await;
                if snapshot.is_none() {
                    *snapshot = Some(self.read(node, 0, SNAPSHOT_LIMIT).await?);
                }
                let whole = snapshot.as_ref().cloned().unwrap_or_default();
                let (start, end) = ByteRange::Range { offset, length: len }.resolve(whole.len() as u64);
                Ok(whole.slice(start as usize..end as usize))
            }
            _ => self.read(node, offset, len).await,
        }
    }
}
