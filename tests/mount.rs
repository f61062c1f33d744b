//! Real FUSE mounts (root, `/dev/fuse`, `fusermount3`): mount the sample hierarchy on a fresh
//! temporary mountpoint, use plain `std::fs` on it, unmount, and check that the session ends.
//! A mount that cannot be made fails the test with the reason; nothing is skipped.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use zarrfs::fs::{Fs, FsConfig, XATTR_SOURCE};
use zarrfs::fuse::session::{self, MountConfig};
use zarrfs::store::local::LocalStore;
use zarrfs::store::Store;
use zarrfs::view::{View, ViewMode, ViewOptions};

/// A live mount; unmounted (lazily, if the test failed half-way) when dropped.
struct Mount {
    dir: tempfile::TempDir,
    done: Option<mpsc::Receiver<std::io::Result<()>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Mount {
    fn new(store: Arc<dyn Store>, mode: ViewMode, read_only: bool) -> Mount {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let options = ViewOptions {
            mode,
            ..ViewOptions::default()
        };
        let mut config = FsConfig::read_only(
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
            Duration::from_millis(500),
        );
        config.xattrs = true;
        let fs = Arc::new(Fs::new(View::new(store, &options), config));
        let dir = tempfile::Builder::new().prefix("zarrfs-mnt-").tempdir().unwrap();
        let cfg = MountConfig {
            read_only,
            allow_other: false,
            fsname: "zarrfs-test".into(),
            threads: 4,
            max_inodes: zarrfs::fuse::DEFAULT_MAX_INODES,
        };
        let mounted = session::mount(fs, runtime.handle().clone(), dir.path(), &cfg).unwrap_or_else(|e| {
            panic!(
                "FUSE mount at {} failed: {e} (these tests need root, /dev/fuse and \
                     fusermount3; /dev/fuse exists: {})",
                dir.path().display(),
                Path::new("/dev/fuse").exists()
            )
        });
        let (tx, rx) = mpsc::channel();
        let handle = runtime.handle().clone();
        thread::spawn(move || {
            let _ = tx.send(mounted.serve(&handle));
        });
        let m = Mount {
            dir,
            done: Some(rx),
            runtime: Some(runtime),
        };
        assert!(m.is_mounted(), "{} not in /proc/self/mountinfo", m.path().display());
        m
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn is_mounted(&self) -> bool {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let p = self.path().to_str().unwrap();
        info.lines()
            .any(|l| l.split(' ').nth(4) == Some(p) && l.contains("fuse"))
    }

    /// Unmount and check that `serve` returned cleanly.
    fn unmount(mut self) {
        let p = self.path().to_path_buf();
        if let Err(e) = nix::mount::umount(&p) {
            let status = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg(&p)
                .status()
                .expect("run fusermount3");
            assert!(status.success(), "umount {}: {e}; fusermount3 -u failed", p.display());
        }
        let rx = self.done.take().unwrap();
        let result = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("serve() did not return within 5 s of unmounting");
        result.expect("serve() returned an error");
        assert!(!self.is_mounted(), "still mounted after unmount");
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(rx) = self.done.take() {
            // The test failed with the mount up: detach it so nothing hangs.
            let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn local_store(h: &Hierarchy) -> (tempfile::TempDir, Arc<dyn Store>) {
    let src = tempfile::Builder::new().prefix("zarrfs-src-").tempdir().unwrap();
    h.write_dir(src.path());
    let store = LocalStore::new(src.path(), false).unwrap();
    (src, Arc::new(store))
}

struct Tree {
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
}

/// Walk the mounted tree with `read_dir`, `symlink_metadata` and `read`.
fn walk(root: &Path) -> Tree {
    let mut tree = Tree {
        files: BTreeMap::new(),
        dirs: BTreeSet::new(),
    };
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(root.join(&rel)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_str().unwrap().to_string();
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let meta = std::fs::symlink_metadata(root.join(&path)).unwrap();
            assert_eq!(entry.file_type().unwrap().is_dir(), meta.is_dir(), "{path}");
            if meta.is_dir() {
                assert_eq!(meta.permissions().mode() & 0o777, 0o555, "{path}");
                tree.dirs.insert(path.clone());
                stack.push(path);
            } else {
                assert!(meta.is_file(), "{path}");
                assert_eq!(meta.permissions().mode() & 0o777, 0o444, "{path}");
                let bytes = std::fs::read(root.join(&path)).unwrap();
                assert_eq!(bytes.len() as u64, meta.len(), "stat size of {path}");
                tree.files.insert(path, bytes);
            }
        }
    }
    tree
}

fn check_tree(tree: &Tree, h: &Hierarchy) {
    assert_eq!(
        tree.files.keys().collect::<Vec<_>>(),
        h.files.keys().collect::<Vec<_>>(),
        "file names"
    );
    for (path, want) in &h.files {
        let got = &tree.files[path];
        match want {
            Expect::Bytes(b) => assert!(got == b, "bytes of {path}"),
            Expect::Json(v) => {
                let parsed: serde_json::Value = serde_json::from_slice(got).unwrap();
                assert_eq!(&parsed, v, "{path}");
            }
        }
    }
    for d in &h.dirs {
        assert!(tree.dirs.contains(d), "directory {d} missing");
    }
    for d in tree.dirs.difference(&h.dirs) {
        assert!(d.starts_with("data/v2/"), "unexpected directory {d}");
    }
}

fn os_error(r: std::io::Result<impl std::fmt::Debug>, what: &str) -> i32 {
    match r {
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("{what}: not an OS error: {e}")),
        Ok(v) => panic!("{what} succeeded: {v:?}"),
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn mounted_tree_matches_the_model_and_unmounts_cleanly() {
    let h = sample_hierarchy();
    let (_src, store) = local_store(&h);
    let m = Mount::new(store, ViewMode::Unsharded, true);
    let tree = walk(m.path());
    check_tree(&tree, &h);
    // The listing order of a chunk directory and its names.
    let mut row: Vec<String> = std::fs::read_dir(m.at("data/sharded/c/0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_string())
        .collect();
    row.sort();
    assert_eq!(row, ["0", "2", "3"]);
    m.unmount();
}

#[test]
fn chunk_files_read_like_plain_files() {
    let h = sample_hierarchy();
    let m = Mount::new(h.memory_store(), ViewMode::Unsharded, true);
    let a = &h.arrays[0];
    for (c, want) in &a.expected {
        let path = m.at(&format!("data/sharded/c/{}/{}", c[0], c[1]));
        assert_eq!(&std::fs::read(&path).unwrap(), want, "{c:?}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), want.len() as u64);
    }
    // Seek and partial reads; EOF reads return 0.
    let want = &a.expected[&vec![4, 3]];
    let mut f = std::fs::File::open(m.at("data/sharded/c/4/3")).unwrap();
    f.seek(SeekFrom::Start(2)).unwrap();
    let mut buf = vec![0; 3];
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, want[2..5]);
    let mut tail = [0u8; 100];
    let n = f.read_at(&mut tail, want.len() as u64 - 1).unwrap();
    assert_eq!(&tail[..n], &want[want.len() - 1..]);
    assert_eq!(f.read_at(&mut tail, want.len() as u64).unwrap(), 0);
    assert_eq!(f.read_at(&mut tail, 1 << 40).unwrap(), 0);
    // Nested, `.`-separated and v2 chunk files.
    for b in &h.arrays[1..] {
        for (path, want) in b.view_chunk_files() {
            assert_eq!(std::fs::read(m.at(&path)).unwrap(), want, "{path}");
        }
    }
    // Rewritten metadata.
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.at("data/sharded/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc, a.spec.rewritten_json());
    // The xattr names the shard.
    let path = CString::new(m.at("data/sharded/c/4/3").as_os_str().as_bytes()).unwrap();
    let name = CString::new(XATTR_SOURCE).unwrap();
    let mut value = vec![0u8; 256];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
    assert!(n > 0, "getxattr: {}", std::io::Error::last_os_error());
    let text = String::from_utf8(value[..n as usize].to_vec()).unwrap();
    assert!(
        text.starts_with("shard data/sharded/c/2/1 offset ") && text.ends_with(&format!(" length {}", want.len())),
        "{text}"
    );
    drop(f);
    m.unmount();
}

fn check_mutations_refused(m: &Mount) {
    use std::fs::{self, OpenOptions};
    let erofs = |r: i32, what: &str| assert_eq!(r, libc::EROFS, "{what}");
    erofs(os_error(fs::File::create(m.at("new.txt")), "create"), "create");
    erofs(
        os_error(fs::File::create(m.at("data/sharded/c/0/1")), "create chunk"),
        "create chunk",
    );
    erofs(
        os_error(
            OpenOptions::new().write(true).open(m.at("data/sharded/c/0/0")),
            "open for write",
        ),
        "open for write",
    );
    erofs(
        os_error(
            OpenOptions::new().append(true).open(m.at("notes.txt")),
            "open for append",
        ),
        "open for append",
    );
    erofs(os_error(fs::write(m.at("notes.txt"), b"x"), "write"), "write");
    erofs(os_error(fs::create_dir(m.at("data/newdir")), "mkdir"), "mkdir");
    erofs(
        os_error(fs::remove_file(m.at("data/sharded/c/0/0")), "unlink chunk"),
        "unlink chunk",
    );
    erofs(os_error(fs::remove_file(m.at("notes.txt")), "unlink"), "unlink");
    erofs(os_error(fs::remove_dir(m.at("data/sharded/c/0")), "rmdir"), "rmdir");
    erofs(
        os_error(
            fs::rename(m.at("data/sharded/c/0/0"), m.at("data/sharded/c/0/9")),
            "rename chunk",
        ),
        "rename chunk",
    );
    erofs(
        os_error(fs::rename(m.at("notes.txt"), m.at("notes2.txt")), "rename"),
        "rename",
    );
    erofs(
        os_error(fs::hard_link(m.at("notes.txt"), m.at("link.txt")), "hard link"),
        "hard link",
    );
    erofs(
        os_error(std::os::unix::fs::symlink("notes.txt", m.at("sym")), "symlink"),
        "symlink",
    );
    erofs(
        os_error(
            fs::set_permissions(m.at("notes.txt"), fs::Permissions::from_mode(0o644)),
            "chmod",
        ),
        "chmod",
    );
    // Nothing changed.
    assert!(!m.at("new.txt").exists());
    assert!(!m.at("data/newdir").exists());
    assert_eq!(fs::read(m.at("notes.txt")).unwrap(), b"hello, not zarr\n");
    assert!(m.at("data/sharded/c/0/0").exists());
}

#[test]
fn mutations_are_erofs_on_a_read_only_mount() {
    let h = sample_hierarchy();
    let m = Mount::new(h.memory_store(), ViewMode::Unsharded, true);
    check_mutations_refused(&m);
    m.unmount();
}

/// Without the kernel's `ro` flag every mutation reaches the filesystem, which must refuse it.
#[test]
fn mutations_are_erofs_from_the_filesystem_itself() {
    let h = sample_hierarchy();
    let m = Mount::new(h.memory_store(), ViewMode::Unsharded, false);
    check_mutations_refused(&m);
    m.unmount();
}

#[test]
fn missing_names_are_enoent() {
    let h = sample_hierarchy();
    let m = Mount::new(h.memory_store(), ViewMode::Unsharded, true);
    for rel in [
        "nope",
        "data/sharded/c/0/1",
        "data/sharded/c/5/0",
        "data/sharded/c/5",
        "data/sharded/c/2/2",
        "data/sharded/c/0/00",
        "data/dotted/c.9.9",
        "notes.txt/x",
    ] {
        let r = std::fs::metadata(m.at(rel));
        let code = os_error(r, rel);
        let expected = if rel == "notes.txt/x" {
            // The kernel answers ENOTDIR for a path through a regular file.
            libc::ENOTDIR
        } else {
            libc::ENOENT
        };
        assert_eq!(code, expected, "{rel}");
        if expected == libc::ENOENT {
            assert_eq!(std::fs::File::open(m.at(rel)).unwrap_err().kind(), ErrorKind::NotFound);
        }
    }
    assert_eq!(
        os_error(std::fs::read_dir(m.at("data/sharded/c/9")), "read_dir"),
        libc::ENOENT
    );
    assert_eq!(
        os_error(std::fs::read_dir(m.at("notes.txt")), "read_dir of a file"),
        libc::ENOTDIR
    );
    m.unmount();
}

#[test]
fn concurrent_reads_from_many_threads() {
    let h = Arc::new(sample_hierarchy());
    let (_src, store) = local_store(&h);
    let m = Mount::new(store, ViewMode::Unsharded, true);
    let root = m.path().to_path_buf();
    let files: Vec<(String, Vec<u8>)> = h
        .files
        .iter()
        .filter_map(|(k, v)| match v {
            Expect::Bytes(b) => Some((k.clone(), b.clone())),
            Expect::Json(_) => None,
        })
        .collect();
    let files = Arc::new(files);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (root, files) = (root.clone(), files.clone());
            thread::spawn(move || {
                for round in 0..3 {
                    // Each thread walks the files in its own order.
                    let n = files.len();
                    for i in 0..n {
                        let (path, want) = &files[(i * (2 * t + 1) + round * 7) % n];
                        let got = std::fs::read(root.join(path)).unwrap();
                        assert!(&got == want, "thread {t}: {path}");
                    }
                }
            })
        })
        .collect();
    // Meanwhile, positional reads of one shared file from several threads.
    let want = h.arrays[0].expected[&vec![0, 0]].clone();
    let shared = Arc::new(std::fs::File::open(m.at("data/sharded/c/0/0")).unwrap());
    let preaders: Vec<_> = (0..4)
        .map(|_| {
            let (f, want) = (shared.clone(), want.clone());
            thread::spawn(move || {
                for (off, byte) in want.iter().enumerate() {
                    let mut b = [0u8; 1];
                    assert_eq!(f.read_at(&mut b, off as u64).unwrap(), 1);
                    assert_eq!(b[0], *byte);
                }
            })
        })
        .collect();
    for t in threads.into_iter().chain(preaders) {
        t.join().expect("reader thread panicked");
    }
    drop(shared);
    m.unmount();
}

#[test]
fn raw_view_mount_shows_the_store() {
    let h = sample_hierarchy();
    let m = Mount::new(h.memory_store(), ViewMode::Raw, true);
    let tree = walk(m.path());
    assert_eq!(tree.files, h.store);
    let meta = std::fs::metadata(m.at("data/sharded/c/0/0")).unwrap();
    assert_eq!(meta.len(), h.store["data/sharded/c/0/0"].len() as u64);
    assert_eq!(meta.uid(), nix::unistd::getuid().as_raw());
    m.unmount();
}

/// A directory too large for one readdir reply: the kernel resumes from offsets.
#[test]
fn large_directory_lists_completely() {
    let spec = ArraySpec::new(&[3000], &[100], &[1]).encoding(V2_DOT);
    let mut chunks = spec.full_chunks(5, 1, 3);
    chunks.retain(|c, _| c[0] % 7 != 3);
    let built = spec.build("", &chunks);
    let m = Mount::new(memory_store(&built.files), ViewMode::Unsharded, true);
    let mut names: Vec<String> = std::fs::read_dir(m.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_string())
        .collect();
    names.sort();
    let mut want: Vec<String> = built.expected_keys().into_keys().collect();
    want.push("zarr.json".into());
    want.sort();
    assert_eq!(names.len(), want.len());
    assert_eq!(names, want);
    for (k, b) in built.expected_keys().iter().step_by(97) {
        assert_eq!(&std::fs::read(m.at(k)).unwrap(), b, "{k}");
    }
    m.unmount();
}
