//! Removing temporary files that a crashed zarrfs left behind.
//!
//! A shard is replaced by writing a temporary file (`.zarrfs-tmp.<name>.<pid>.<n>`) and moving
//! it into place; a process killed in between leaves the temporary file. Listings hide such
//! files, but they take space. The first time a store writes into a directory it looks for
//! temporary files of processes that no longer exist and are older than a minute (so a reused
//! process id cannot make it delete a live writer's file), and removes them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Directories remembered as swept before the memory is reset.
const REMEMBERED: usize = 100_000;
/// How old a temporary file of a dead process must be to be removed.
const MIN_AGE: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub struct Sweeper {
    swept: Mutex<HashSet<PathBuf>>,
}

impl Sweeper {
    /// Sweep `dir` unless it was swept already by this store.
    pub fn sweep_once(&self, dir: &Path, marker: &str) {
        {
            let mut swept = self.swept.lock().unwrap_or_else(|e| e.into_inner());
            if swept.len() >= REMEMBERED {
                swept.clear();
            }
            if !swept.insert(dir.to_path_buf()) {
                return;
            }
        }
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| n.starts_with(marker)) else {
                continue;
            };
            if is_stale(&entry.path(), name) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => {
                        tracing::info!(file = %entry.path().display(), "removed a temporary file left by a crash")
                    }
                    Err(e) => {
                        tracing::debug!(file = %entry.path().display(), "cannot remove stale temporary file: {e}")
                    }
                }
            }
        }
    }
}

/// The writer's process id from a temporary name (`…<pid>.<n>`).
fn writer_pid(name: &str) -> Option<i32> {
    let mut parts = name.rsplit('.');
    parts.next()?.parse::<u64>().ok()?;
    parts.next()?.parse().ok()
}

fn is_stale(path: &Path, name: &str) -> bool {
    let Some(pid) = writer_pid(name) else { return false };
    if pid == std::process::id() as i32 || process_alive(pid) {
        return false;
    }
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok());
    age.is_some_and(|age| age >= MIN_AGE)
}

fn process_alive(pid: i32) -> bool {
    use nix::errno::Errno;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_only_old_files_of_dead_processes() {
        let dir = tempfile::tempdir().unwrap();
        let dead = 2_000_000_000i32; // above the kernel's pid limit: never alive
        let old = SystemTime::now() - Duration::from_secs(3600);
        let names = [
            format!(".zarrfs-tmp.0.{dead}.1"),                 // stale: removed
            format!(".zarrfs-tmp.1.{}.2", std::process::id()), // ours: kept
            format!(".zarrfs-tmp.2.{dead}.x"),                 // not our format: kept
            "0".to_string(),                                   // a shard: kept
        ];
        for name in &names {
            let f = std::fs::File::create(dir.path().join(name)).unwrap();
            f.set_modified(old).unwrap();
        }
        let young = format!(".zarrfs-tmp.3.{dead}.4"); // dead writer but too recent: kept
        std::fs::File::create(dir.path().join(&young)).unwrap();
        let sweeper = Sweeper::default();
        sweeper.sweep_once(dir.path(), ".zarrfs-tmp.");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![names[1].clone(), names[2].clone(), names[3].clone(), young];
        want.sort();
        assert_eq!(left, want);
        std::fs::File::create(dir.path().join(&names[0]))
            .unwrap()
            .set_modified(old)
            .unwrap();
        sweeper.sweep_once(dir.path(), ".zarrfs-tmp.");
        assert!(dir.path().join(&names[0]).exists(), "a directory is swept once");
    }
}
