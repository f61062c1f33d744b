//! What this store itself last left under the keys it changed, so that the watch of its
//! source (`watch.rs`) can tell the mount's own changes from other writers'.
//!
//! A writable mount of a watched source hears of its own writes, removals and new directories
//! as inotify events, like anyone else's. Taken as changes, they would make it forget what it
//! just did: the kernel's entry for a directory `mkdir` made a moment ago would be dropped,
//! the directory would get a new inode number at its next lookup, and a tool comparing `lstat`
//! with `fstat` (Python's `shutil.rmtree`) would refuse it.
//!
//! So each change the store makes records the state it left: the version of the value it
//! wrote, a directory, or nothing. An event for a key is the mount's own when the key holds
//! exactly that state when the event is read: then what the mount knows of the key is what the
//! source holds, whoever raised the event. Anything else — no record, another version, a file
//! where a directory was left — is a change. Versions never repeat (`version.rs`), so a foreign
//! value can never pass for ours; at worst an event of ours read after another writer's change
//! counts as a change, which costs a lookup, never a stale answer.
//!
//! An event may be read while the change that raised it is still under way (between its
//! rename and its record): each change says when it begins and ends, and an event for a key
//! with a change under way waits for it to end.
//!
//! The record is bounded: the oldest entries go first (an event whose entry went counts as a
//! change).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lru::LruCache;

use super::version::{is_dir_stat, meta_of_stat};
use super::LocalStore;
use crate::store::Version;

/// Keys remembered at most (about 100 bytes each).
const REMEMBERED: usize = 65_536;

/// How long an event waits for a change of its key under way (a write's `fsync` included)
/// before it counts as a change.
const SETTLE: Duration = Duration::from_secs(2);

/// What the store left under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Left {
    File(Version),
    Dir,
    Absent,
}

/// The state the store's own last change left under each key it changed lately, and the
/// keys of its changes under way.
#[derive(Debug)]
pub struct OwnChanges {
    state: Mutex<Record>,
    /// Signalled when a change under way ends.
    ended: Condvar,
}

#[derive(Debug)]
struct Record {
    left: LruCache<String, Left>,
    /// Changes under way, by key (each change also counts under the directories above its
    /// key, which it may make).
    under_way: HashMap<String, u32>,
}

/// A change under way; it ends when dropped (see [`OwnChanges::begin`]).
pub(super) struct UnderWay<'a> {
    own: &'a OwnChanges,
    keys: Vec<String>,
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        let mut record = self.own.lock();
        for key in &self.keys {
            if let Some(n) = record.under_way.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    record.under_way.remove(key);
                }
            }
        }
        drop(record);
        self.own.ended.notify_all();
    }
}

impl Default for OwnChanges {
    fn default() -> Self {
        let capacity = NonZeroUsize::new(REMEMBERED).unwrap_or(NonZeroUsize::MIN);
        OwnChanges {
            state: Mutex::new(Record {
                left: LruCache::new(capacity),
                under_way: HashMap::new(),
            }),
            ended: Condvar::new(),
        }
    }
}

impl OwnChanges {
    fn lock(&self) -> MutexGuard<'_, Record> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A change of `keys` begins: until it ends (and records what it left), an event for them
    /// or a directory above them waits (see [`Self::holds_own`]).
    pub(super) fn begin(&self, keys: &[&str]) -> UnderWay<'_> {
        let mut all = Vec::new();
        for key in keys {
            let key = key.trim_end_matches('/');
            all.extend(key.match_indices('/').map(|(i, _)| key[..i].to_string()));
            all.push(key.to_string());
        }
        let mut record = self.lock();
        for key in &all {
            *record.under_way.entry(key.clone()).or_insert(0) += 1;
        }
        UnderWay { own: self, keys: all }
    }

    /// The store wrote `version` under `key` (and so its directories exist).
    pub(super) fn wrote(&self, key: &str, version: &Version) {
        self.dirs_above(key);
        self.record(key, Left::File(version.clone()));
    }

    /// The store made directory `key` (and those above it).
    pub(super) fn made_dir(&self, key: &str) {
        let key = key.trim_end_matches('/');
        self.dirs_above(key);
        if !key.is_empty() {
            self.record(key, Left::Dir);
        }
    }

    /// The store removed `key` (a value or an empty directory).
    pub(super) fn removed(&self, key: &str) {
        let key = key.trim_end_matches('/');
        if !key.is_empty() {
            self.record(key, Left::Absent);
        }
    }

    /// The store renamed `from` (which held `before` just before) to `to`.
    pub(super) fn moved(&self, from: &str, to: &str, before: Option<Left>) {
        self.removed(from);
        self.dirs_above(to);
        if let Some(before) = before {
            self.record(to.trim_end_matches('/'), before);
        }
    }

    fn dirs_above(&self, key: &str) {
        for (i, _) in key.match_indices('/') {
            self.record(&key[..i], Left::Dir);
        }
    }

    fn record(&self, key: &str, left: Left) {
        let mut record = self.lock();
        match record.left.get_mut(key) {
            Some(entry) => *entry = left,
            None => {
                record.left.put(key.to_string(), left);
            }
        }
    }

    /// Whether `key` of the source at `root` holds what the store's own last change left
    /// there: then an event for it is the store's own, and nothing the mount knows changed.
    /// A change of the key under way is waited for (at most [`SETTLE`]), and the key is looked
    /// at while no other can begin, so what is compared is what a finished change left.
    pub fn holds_own(&self, root: &Path, key: &str) -> bool {
        let deadline = Instant::now() + SETTLE;
        let mut record = self.lock();
        while record.under_way.contains_key(key) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            record = match self.ended.wait_timeout(record, left) {
                Ok((record, _)) => record,
                Err(e) => e.into_inner().0,
            };
        }
        let Some(left) = record.left.get(key).cloned() else {
            return false;
        };
        state(&root.join(key)).is_some_and(|now| now == left)
    }
}

impl LocalStore {
    /// Record every change this store makes in `own` (see `own_changes.rs`).
    pub fn recording_own_changes(mut self, own: Arc<OwnChanges>) -> Self {
        self.own = Some(own);
        self
    }

    /// A change of `keys` begins, for the record of own changes, if any.
    pub(super) fn begin(&self, keys: &[&str]) -> Option<UnderWay<'_>> {
        self.own.as_ref().map(|own| own.begin(keys))
    }

    /// Tell the record of own changes, if any, what a change left.
    pub(super) fn note(&self, f: impl FnOnce(&OwnChanges)) {
        if let Some(own) = &self.own {
            f(own);
        }
    }
}

/// What `path` holds now; `None` if that cannot be told.
pub(super) fn state(path: &Path) -> Option<Left> {
    match nix::sys::stat::lstat(path) {
        Ok(st) if is_dir_stat(&st) => Some(Left::Dir),
        Ok(st) => Some(Left::File(meta_of_stat(&st).version)),
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => Some(Left::Absent),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::local::meta_of;

    #[test]
    fn holds_own_only_for_the_state_left() {
        let root = tempfile::tempdir().unwrap();
        let own = OwnChanges::default();
        std::fs::create_dir_all(root.path().join("a/c")).unwrap();
        std::fs::write(root.path().join("a/c/0"), b"ours").unwrap();
        let version = meta_of(&std::fs::metadata(root.path().join("a/c/0")).unwrap()).version;
        own.wrote("a/c/0", &version);
        assert!(own.holds_own(root.path(), "a/c/0"));
        assert!(own.holds_own(root.path(), "a/c"), "directories above a write are ours");
        assert!(own.holds_own(root.path(), "a"));
        assert!(!own.holds_own(root.path(), "b"), "a key never changed here is not ours");

        // Another writer's value, even of the same size, is a change.
        std::fs::write(root.path().join("a/c/.t"), b"them").unwrap();
        std::fs::rename(root.path().join("a/c/.t"), root.path().join("a/c/0")).unwrap();
        assert!(!own.holds_own(root.path(), "a/c/0"));

        std::fs::remove_file(root.path().join("a/c/0")).unwrap();
        own.removed("a/c/0");
        assert!(own.holds_own(root.path(), "a/c/0"));
        std::fs::create_dir(root.path().join("a/c/0")).unwrap();
        assert!(
            !own.holds_own(root.path(), "a/c/0"),
            "a directory where nothing was left"
        );

        own.made_dir("g/h/");
        assert!(!own.holds_own(root.path(), "g/h"), "not made after all");
        std::fs::create_dir_all(root.path().join("g/h")).unwrap();
        assert!(own.holds_own(root.path(), "g/h") && own.holds_own(root.path(), "g"));
    }
}
