//! Read-ahead of stored files on remote sources, per handle.
//!
//! The kernel reads a file 128 KiB at a time; a request per read would be slow and costly on
//! an object store. A handle instead fetches a window of `--prefetch-size` bytes at the first
//! read and serves the reads inside it from memory. Once a reader is past the middle of its
//! window, the next window is requested in the background, so a sequential reader seldom
//! waits for the network. The kernel sends a sequential reader's reads concurrently, so they
//! may be handled slightly out of order: a read anywhere inside the window being fetched ahead
//! takes it, and the window before stays until the next fetch starts, for stragglers. At most
//! two windows per handle are held (the current one, and the previous or the next).
//!
//! Every window after the first is pinned to the version of the first one: a file replaced
//! while open fails with ESTALE rather than mixing versions. A reader that jumps elsewhere
//! gets a fresh window there, and the background fetch it no longer needs is cancelled.

use std::sync::Arc;

use bytes::Bytes;
use tokio::task::JoinHandle;

use super::ViewError;
use crate::store::{ByteRange, GetOptions, GetResult, Store, StoreResult, Version};

/// Bytes of a stored file read ahead, from `offset`, of one version.
#[derive(Debug)]
struct Window {
    offset: u64,
    bytes: Bytes,
    version: Version,
    /// The file ends where the window does: a read past the window's end reads nothing.
    at_end: bool,
}

impl Window {
    fn end(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }

    /// A window of the bytes `got` holds, asked for as `asked` bytes.
    fn of(got: GetResult, asked: u64) -> Self {
        Window {
            offset: got.offset,
            at_end: (got.bytes.len() as u64) < asked || got.offset + got.bytes.len() as u64 >= got.meta.size,
            bytes: got.bytes,
            version: got.meta.version,
        }
    }

    /// The bytes of `[offset, offset + len)` if the window holds all of them (or all the file
    /// has of them, when the window ends where the file does).
    fn slice(&self, offset: u64, len: u64) -> Option<Bytes> {
        let start = offset.checked_sub(self.offset)?;
        let held = self.bytes.len() as u64;
        let end = start.checked_add(len)?;
        if end <= held {
            Some(self.bytes.slice(start as usize..end as usize))
        } else if self.at_end && start <= held {
            Some(self.bytes.slice(start as usize..))
        } else {
            None
        }
    }
}

/// The next window, being fetched; cancelled when dropped unused.
#[derive(Debug)]
struct Pending {
    offset: u64,
    task: JoinHandle<StoreResult<Option<GetResult>>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug, Default)]
struct State {
    window: Option<Window>,
    /// The window before the current one, for reads that arrive after the reader moved on;
    /// dropped when the next fetch starts.
    previous: Option<Window>,
    next: Option<Pending>,
}

/// What to read: the file's key, its size when opened, and the window size.
pub struct Target<'a> {
    pub store: &'a Arc<dyn Store>,
    pub key: &'a str,
    pub size: u64,
    pub ahead: u64,
}

#[derive(Debug, Default)]
pub struct ReadAhead {
    state: tokio::sync::Mutex<State>,
}

impl ReadAhead {
    pub async fn read(&self, target: &Target<'_>, offset: u64, len: u64) -> Result<Bytes, ViewError> {
        let mut state = self.state.lock().await;
        if let Some(bytes) = state.window.as_ref().and_then(|w| w.slice(offset, len)) {
            Self::maybe_fetch_next(&mut state, target, offset + len);
            return Ok(bytes);
        }
        if let Some(bytes) = state.previous.as_ref().and_then(|w| w.slice(offset, len)) {
            return Ok(bytes);
        }
        // The window fetched in the background, when the reader has come to it (or reads
        // across the end of the current window into it).
        let head = match (&state.window, &state.next) {
            (Some(w), Some(n)) if n.offset == w.end() && offset < w.end() => w.slice(offset, w.end() - offset),
            _ => None,
        };
        let inside_next = |n: &Pending| offset >= n.offset && offset < n.offset.saturating_add(target.ahead);
        let reaches_next = state.next.as_ref().is_some_and(inside_next) || head.is_some();
        if let Some(mut next) = state.next.take().filter(|_| reaches_next) {
            let fetched = (&mut next.task).await;
            if let Ok(Ok(Some(got))) = fetched {
                let window = Window::of(got, target.ahead);
                let head = head.unwrap_or_default();
                let tail = window.slice(offset.max(next.offset), len - head.len() as u64);
                state.previous = state.window.take();
                state.window = Some(window);
                if let Some(tail) = tail {
                    Self::maybe_fetch_next(&mut state, target, offset + len);
                    return Ok(if head.is_empty() {
                        tail
                    } else {
                        [head, tail].concat().into()
                    });
                }
            }
            // Failed or cancelled: read it again in the open, so the error, if any, is this
            // read's.
        }
        // A jump: neither the window ahead nor the one before is wanted any more.
        state.next = None;
        state.previous = None;
        let asked = len.max(target.ahead);
        let range = ByteRange::Range { offset, length: asked };
        let opts = match state.window.as_ref() {
            Some(w) => GetOptions::pinned(range, w.version.clone()),
            None => GetOptions::range(range),
        };
        let got = target.store.get(target.key, opts).await?;
        let got = got.ok_or_else(|| ViewError::Vanished(target.key.to_string()))?;
        let out = got.bytes.slice(..(len as usize).min(got.bytes.len()));
        state.window = Some(Window::of(got, asked));
        Ok(out)
    }

    /// Start fetching the window after the current one when the reader, now at `pos`, is past
    /// the current one's middle and the file goes on.
    fn maybe_fetch_next(state: &mut State, target: &Target<'_>, pos: u64) {
        let Some(w) = state.window.as_ref() else {
            return;
        };
        let past_middle = pos >= w.offset + w.bytes.len() as u64 / 2;
        if state.next.is_some() || !past_middle || w.at_end || w.end() >= target.size {
            return;
        }
        let (store, key) = (target.store.clone(), target.key.to_string());
        let range = ByteRange::Range {
            offset: w.end(),
            length: target.ahead,
        };
        let opts = GetOptions::pinned(range, w.version.clone());
        state.previous = None;
        state.next = Some(Pending {
            offset: w.end(),
            task: tokio::spawn(async move { store.get(&key, opts).await }),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counting::CountingStore;
    use crate::store::memory::MemoryStore;

    async fn setup(size: usize) -> (Arc<CountingStore>, Arc<dyn Store>, Vec<u8>) {
        let memory = Arc::new(MemoryStore::new());
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 253) as u8).collect();
        memory.set("f", Bytes::from(data.clone())).await.unwrap();
        let counting = Arc::new(CountingStore::new(memory));
        let store: Arc<dyn Store> = counting.clone();
        (counting, store, data)
    }

    /// The file "f" of 1000 bytes, in windows of 100.
    fn target(store: &Arc<dyn Store>) -> Target<'_> {
        Target {
            store,
            key: "f",
            size: 1000,
            ahead: 100,
        }
    }

    #[tokio::test]
    async fn a_sequential_reader_gets_each_window_once_ahead_of_time() {
        let (counting, store, data) = setup(1000).await;
        let target = target(&store);
        let ra = ReadAhead::default();
        let mut got = Vec::new();
        for offset in (0..1000).step_by(30) {
            got.extend_from_slice(&ra.read(&target, offset, 30).await.unwrap());
            if offset == 60 {
                // Past the middle of the first window: the second is on its way.
                assert!(ra.state.lock().await.next.as_ref().is_some_and(|n| n.offset == 100));
            }
        }
        assert_eq!(got, data);
        assert!(ra.read(&target, 1000, 30).await.unwrap().is_empty());
        let counts = counting.counts();
        assert_eq!(
            (counts.get, counts.get_bytes),
            (10, 1000),
            "one GET per window, none past the end"
        );
    }

    #[tokio::test]
    async fn a_jump_cancels_the_window_fetched_ahead() {
        // One thread: the background fetch cannot run before the test yields.
        let (counting, store, data) = setup(1000).await;
        let target = target(&store);
        let ra = ReadAhead::default();
        assert_eq!(ra.read(&target, 0, 10).await.unwrap(), data[0..10]);
        assert!(ra.state.lock().await.next.is_none(), "not yet past the middle");
        assert_eq!(ra.read(&target, 60, 10).await.unwrap(), data[60..70]);
        assert!(ra.state.lock().await.next.as_ref().is_some_and(|n| n.offset == 100));
        // The reader jumps: the window asked for ahead is no longer wanted.
        assert_eq!(ra.read(&target, 500, 20).await.unwrap(), data[500..520]);
        assert!(ra.state.lock().await.next.is_none());
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            counting.counts().get,
            2,
            "the fetch ahead was cancelled before it was sent"
        );
        assert_eq!(ra.read(&target, 900, 200).await.unwrap(), data[900..]);
        assert_eq!(ra.read(&target, 5, 10).await.unwrap(), data[5..15]);
        assert_eq!(counting.counts().get, 4);
    }

    /// The kernel sends a sequential reader's reads concurrently, so they may be handled out of
    /// order: a read just inside the window fetched ahead, before the one at its start; a
    /// straggler inside the previous window, after the reader moved on. Neither costs a GET.
    #[tokio::test]
    async fn reads_out_of_order_cost_no_extra_request() {
        let (counting, store, data) = setup(1000).await;
        let target = target(&store);
        let ra = ReadAhead::default();
        assert_eq!(ra.read(&target, 0, 30).await.unwrap(), data[0..30]);
        assert_eq!(ra.read(&target, 60, 30).await.unwrap(), data[60..90]);
        assert!(ra.state.lock().await.next.as_ref().is_some_and(|n| n.offset == 100));
        // Inside the window fetched ahead, before its start is read (a straggler trails by a
        // request or two, far less than half a window).
        assert_eq!(ra.read(&target, 120, 20).await.unwrap(), data[120..140]);
        // Stragglers: the start of that window, and the end of the previous one.
        assert_eq!(ra.read(&target, 100, 20).await.unwrap(), data[100..120]);
        assert_eq!(ra.read(&target, 90, 10).await.unwrap(), data[90..100]);
        assert_eq!(counting.counts().get, 2, "one GET per window");
        // On to the end: still one GET per window, each byte fetched once.
        let mut got = data[0..140].to_vec();
        for offset in (140..1000).step_by(20) {
            got.extend_from_slice(&ra.read(&target, offset, 20).await.unwrap());
        }
        assert_eq!(got, data);
        let counts = counting.counts();
        assert_eq!((counts.get, counts.get_bytes), (10, 1000));
    }

    #[tokio::test]
    async fn a_file_replaced_while_open_is_not_mixed() {
        let (_, store, _) = setup(1000).await;
        let target = target(&store);
        let ra = ReadAhead::default();
        ra.read(&target, 0, 10).await.unwrap();
        store.set("f", Bytes::from(vec![1u8; 1000])).await.unwrap();
        let later = ra.read(&target, 500, 10).await;
        assert!(later.is_err(), "bytes of another version: {later:?}");
        ra.read(&target, 60, 10).await.unwrap(); // still the first window
        let next = ra.read(&target, 100, 10).await; // fetched ahead, pinned: refused
        assert!(next.is_err(), "bytes of another version: {next:?}");
    }
}
