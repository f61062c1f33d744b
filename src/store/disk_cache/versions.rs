//! What the disk cache knows of each object: its current version and size, and when the store
//! last confirmed them. Cached blocks are keyed by version, so this is what lets a read that
//! names no version (a shard's index, a metadata document) be served from disk: while the
//! version was confirmed less than the metadata TTL ago, its blocks are the object's bytes.
//!
//! The records are kept in memory while mounted and saved to `DIR/versions` (written under a
//! temporary name and renamed, CRC-checked), so a remount starts from them:
//!
//! - At a clean unmount the file is saved marked *clean*: a remount trusts each record for
//!   what is left of its TTL, as the mount itself would have.
//! - At open the file is rewritten marked *unclean* (and synced) before anything is served, and
//!   saved so again every [`SAVE_EVERY`] while mounted. After a crash the records load as
//!   never confirmed: each is checked with the store (a HEAD) before its blocks are served, so
//!   what the crashed mount wrote, or anything it learned and did not save, cannot make a
//!   stale record pass for a fresh one.
//!
//! A damaged file is ignored (the cache then relearns versions as it reads). Every call that
//! touches the file does blocking I/O.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lru::LruCache;

use crate::store::{ObjectMeta, Version};

/// How often a mount saves what it learned (marked unclean).
pub const SAVE_EVERY: Duration = Duration::from_secs(30);

const MAGIC: &[u8; 4] = b"ZCV1";
const CLEAN: u32 = 1;
/// Longest key or version a record holds (longer ones are not kept).
const MAX_NAME: usize = 64 << 10;

/// An object's version as the store last confirmed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub meta: ObjectMeta,
    /// When the store confirmed it (milliseconds since the epoch; 0: never, it must be checked).
    pub checked_ms: u64,
}

impl Known {
    /// Whether the confirmation is younger than `ttl`.
    pub fn fresh(&self, ttl: Duration) -> bool {
        self.checked_ms != 0 && now_ms().saturating_sub(self.checked_ms) < ttl.as_millis().min(u64::MAX as u128) as u64
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_millis().clamp(1, u64::MAX as u128) as u64)
}

#[derive(Debug)]
struct State {
    records: LruCache<String, Known>,
    /// Changed since the last save.
    dirty: bool,
    /// Counts the mount's writes; a read that began before a write of its key does not
    /// record what it saw (it may be the version the write replaced).
    writes: u64,
    /// The keys written lately, with the count at their last write.
    written: LruCache<String, u64>,
    /// The highest count of a write no longer in `written`.
    written_before: u64,
}

/// How many recent writes are remembered by key (older ones only by their count).
const WRITES_REMEMBERED: usize = 4096;

/// The known versions of a cache directory (see the module's documentation).
#[derive(Debug)]
pub struct Versions {
    file: PathBuf,
    state: Mutex<State>,
}

impl Versions {
    /// Load what `dir/versions` holds (at most `capacity` records) and mark it unclean on disk.
    pub fn open(dir: &Path, capacity: usize) -> std::io::Result<Versions> {
        let file = dir.join("versions");
        let capacity = std::num::NonZeroUsize::new(capacity.max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        let mut records = LruCache::new(capacity);
        match std::fs::read(&file) {
            Ok(bytes) => match decode(&bytes) {
                Some((clean, loaded)) => {
                    for (key, mut known) in loaded {
                        if !clean {
                            known.checked_ms = 0;
                        }
                        records.put(key, known);
                    }
                }
                None => tracing::warn!("{} is damaged: the cache relearns versions as it reads", file.display()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let versions = Versions {
            file,
            state: Mutex::new(State {
                records,
                dirty: false,
                writes: 0,
                written: LruCache::new(
                    std::num::NonZeroUsize::new(WRITES_REMEMBERED).unwrap_or(std::num::NonZeroUsize::MIN),
                ),
                written_before: 0,
            }),
        };
        versions.save(false)?;
        Ok(versions)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<Known> {
        self.state().records.get(key).cloned()
    }

    /// A mark taken before a read, for [`Versions::record`].
    pub fn mark(&self) -> u64 {
        self.state().writes
    }

    /// The store just showed `meta` for `key` (a read that began at `mark`).
    pub fn record(&self, key: &str, meta: &ObjectMeta, mark: u64) {
        let mut state = self.state();
        let overtaken = state.written_before > mark || state.written.peek(key).is_some_and(|&at| at > mark);
        if overtaken || key.len() > MAX_NAME || meta.version.0.len() > MAX_NAME {
            return;
        }
        state.records.put(
            key.to_string(),
            Known {
                meta: meta.clone(),
                checked_ms: now_ms(),
            },
        );
        state.dirty = true;
    }

    /// The key was written or removed: what was known of it no longer holds.
    pub fn forget(&self, key: &str) {
        let mut state = self.state();
        state.writes += 1;
        let at = state.writes;
        if let Some((_, old)) = state.written.push(key.to_string(), at).filter(|(k, _)| k != key) {
            state.written_before = state.written_before.max(old);
        }
        if state.records.pop(key).is_some() {
            state.dirty = true;
        }
    }

    /// The store no longer has the key (a read found it missing): drop its record. Unlike
    /// [`Versions::forget`], reads in flight may still record what they saw.
    pub fn drop_record(&self, key: &str) {
        let mut state = self.state();
        if state.records.pop(key).is_some() {
            state.dirty = true;
        }
    }

    /// Forget every key under `prefix`.
    pub fn forget_prefix(&self, prefix: &str) {
        let mut state = self.state();
        state.writes += 1;
        // Any key under the prefix: every read in flight is overtaken.
        state.written_before = state.writes;
        for key in crate::store::key::keys_under(&state.records, prefix) {
            state.records.pop(&key);
            state.dirty = true;
        }
    }

    /// Save the records (synced), marked clean or not; an unchanged unclean file is not
    /// rewritten.
    pub fn save(&self, clean: bool) -> std::io::Result<()> {
        let bytes = {
            let mut state = self.state();
            let records: Vec<(&String, &Known)> = state.records.iter().rev().collect();
            let bytes = encode(clean, &records);
            state.dirty = false;
            bytes
        };
        let tmp = self.file.with_extension("tmp");
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(&bytes)?;
            f.sync_data()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &self.file)) {
            let _ = std::fs::remove_file(&tmp);
            self.state().dirty = true;
            return Err(e);
        }
        Ok(())
    }

    /// Save if anything changed since the last save (marked unclean).
    pub fn save_if_changed(&self) -> std::io::Result<()> {
        if self.state().dirty {
            self.save(false)
        } else {
            Ok(())
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// `magic | flags u32 | count u32 | records | crc32c u32`; a record is
/// `key | version | size u64 | has_mtime u8 | mtime_ns i128 | checked_ms u64`, strings as
/// `len u32 | bytes`. Oldest first, so loading in order leaves the most recent last.
fn encode(clean: bool, records: &[(&String, &Known)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + records.len() * 96);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(if clean { CLEAN } else { 0 }).to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for (key, known) in records {
        put_str(&mut out, key);
        put_str(&mut out, &known.meta.version.0);
        out.extend_from_slice(&known.meta.size.to_le_bytes());
        out.push(u8::from(known.meta.mtime_ns.is_some()));
        out.extend_from_slice(&known.meta.mtime_ns.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&known.checked_ms.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A reader of the encoded form that fails (None) rather than read past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
    fn string(&mut self) -> Option<String> {
        let len = self.u32()? as usize;
        if len > MAX_NAME {
            return None;
        }
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

/// (clean, records) of a sound file; None if it is not one.
fn decode(bytes: &[u8]) -> Option<(bool, Vec<(String, Known)>)> {
    let body_len = bytes.len().checked_sub(4)?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut r = Reader(body);
    if r.take(4)? != MAGIC {
        return None;
    }
    let clean = r.u32()? == CLEAN;
    let count = r.u32()? as usize;
    let mut records = Vec::with_capacity(count.min(body.len() / 40));
    for _ in 0..count {
        let key = r.string()?;
        let version = r.string()?;
        let size = r.u64()?;
        let has_mtime = r.take(1)?[0] != 0;
        let mtime = i128::from_le_bytes(r.array()?);
        let checked_ms = r.u64()?;
        records.push((
            key,
            Known {
                meta: ObjectMeta {
                    size,
                    version: Version(version),
                    mtime_ns: has_mtime.then_some(mtime),
                },
                checked_ms,
            },
        ));
    }
    r.0.is_empty().then_some((clean, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(version: &str, size: u64) -> ObjectMeta {
        ObjectMeta {
            size,
            version: Version(version.into()),
            mtime_ns: Some(17),
        }
    }

    #[test]
    fn a_clean_save_is_trusted_at_the_next_open_an_unclean_one_is_checked_first() {
        let tmp = tempfile::tempdir().unwrap();
        let v = Versions::open(tmp.path(), 16).unwrap();
        v.record("a", &meta("e1", 10), v.mark());
        v.save(true).unwrap();
        drop(v);
        let v = Versions::open(tmp.path(), 16).unwrap();
        let known = v.get("a").unwrap();
        assert_eq!(known.meta, meta("e1", 10));
        assert!(known.fresh(Duration::from_secs(60)));
        // No clean save follows (a crash): the file opened above is unclean.
        drop(v);
        let v = Versions::open(tmp.path(), 16).unwrap();
        let known = v.get("a").unwrap();
        assert_eq!(known.meta, meta("e1", 10), "kept as a hint");
        assert!(
            !known.fresh(Duration::from_secs(60)),
            "but checked before it is trusted"
        );
    }

    #[test]
    fn a_read_overtaken_by_a_write_records_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let v = Versions::open(tmp.path(), 16).unwrap();
        let mark = v.mark();
        v.forget("a");
        v.record("a", &meta("old", 1), mark);
        assert_eq!(v.get("a"), None);
        v.forget("b");
        v.record("c", &meta("other key", 1), mark);
        assert!(v.get("c").is_some(), "a write of another key overtakes nothing");
        v.record("a", &meta("new", 1), v.mark());
        assert_eq!(v.get("a").unwrap().meta.version, Version("new".into()));
        v.forget_prefix("a");
        assert_eq!(v.get("a"), None);
    }

    #[test]
    fn a_damaged_file_is_ignored_and_the_bound_holds() {
        let tmp = tempfile::tempdir().unwrap();
        let v = Versions::open(tmp.path(), 2).unwrap();
        for key in ["a", "b", "c"] {
            v.record(key, &meta("e", 1), v.mark());
        }
        assert_eq!(v.get("a"), None, "least recent out beyond the bound");
        v.save(true).unwrap();
        drop(v);
        let path = tmp.path().join("versions");
        let mut bytes = std::fs::read(&path).unwrap();
        for cut in [0, 3, 12, bytes.len() - 1] {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        bytes[14] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let v = Versions::open(tmp.path(), 2).unwrap();
        assert_eq!(v.get("b"), None);
        assert_eq!(v.get("c"), None);
    }
}
