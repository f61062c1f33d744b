//! Model-based test of the write path (in the manner of mountpoint-s3's reftests): random
//! sequences of file operations on the chunk files of a random small sharded array, applied
//! both to an `Fs` over a `MemoryStore` and to a plain in-memory reference file system
//! (path -> bytes, ordinary file semantics). After every step the whole view (walked with
//! readdir, lookup and read) must equal the reference, and the stored shards must hold exactly
//! its chunks; after the sequence a fresh `Fs` over the same store must show the same.
//!
//! Operations are issued the way the kernel would issue them: a name is looked up before it is
//! opened, truncated or renamed, and missing directories are made with mkdir first.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use zarrfs::fs::{Fs, FsConfig, FsError};
use zarrfs::store::memory::MemoryStore;
use zarrfs::view::{View, ViewOptions};

/// One step. Chunk numbers are taken modulo the number of inner chunks of the grid.
#[derive(Debug, Clone)]
enum Step {
    /// create (O_EXCL or O_TRUNC), write in one or two pieces (the later piece first), close.
    Write {
        chunk: usize,
        data: Vec<u8>,
        excl: bool,
        split: bool,
    },
    /// Open an existing chunk file for writing, write at an offset (maybe past the end), close.
    Overwrite {
        chunk: usize,
        offset: usize,
        data: Vec<u8>,
    },
    /// Truncate to a size, by path or through an open handle.
    Truncate {
        chunk: usize,
        size: usize,
        via_handle: bool,
    },
    Unlink {
        chunk: usize,
    },
    /// Write a temporary name next to the chunk (zarr-python, rsync style), rename it onto the
    /// chunk key; the temporary file closed before the rename or after it.
    StageRename {
        chunk: usize,
        data: Vec<u8>,
        style: u8,
        close_first: bool,
    },
    /// Rename one chunk file onto another chunk key (RENAME_NOREPLACE or not).
    Move {
        from: usize,
        to: usize,
        no_replace: bool,
    },
    /// Create the chunk only if absent, as zarr-python's `LocalStore` does: write a temporary
    /// name next to it, `link` it to the chunk key (EEXIST if the key exists), unlink it.
    LinkCreate {
        chunk: usize,
        data: Vec<u8>,
    },
    /// Open a chunk file for reading, read part of it, unlink it, then read the whole through
    /// the handle: the bytes it had (a reader outlives the name).
    ReadAcrossUnlink {
        chunk: usize,
        first: bool,
    },
    /// In write-back mode, a tick of the background flusher.
    WriteBack,
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => ((0..64usize), bytes(24), any::<bool>(), any::<bool>())
            .prop_map(|(chunk, data, excl, split)| Step::Write { chunk, data, excl, split }),
        2 => ((0..64usize), 0..32usize, bytes(16).prop_filter("a write writes", |d| !d.is_empty()))
            .prop_map(|(chunk, offset, data)| Step::Overwrite { chunk, offset, data }),
        2 => ((0..64usize), 0..32usize, any::<bool>())
            .prop_map(|(chunk, size, via_handle)| Step::Truncate { chunk, size, via_handle }),
        2 => (0..64usize).prop_map(|chunk| Step::Unlink { chunk }),
        2 => ((0..64usize), bytes(24), 0..3u8, any::<bool>())
            .prop_map(|(chunk, data, style, close_first)| Step::StageRename { chunk, data, style, close_first }),
        2 => ((0..64usize), (0..64usize), any::<bool>())
            .prop_map(|(from, to, no_replace)| Step::Move { from, to, no_replace }),
        1 => ((0..64usize), bytes(24)).prop_map(|(chunk, data)| Step::LinkCreate { chunk, data }),
        1 => ((0..64usize), any::<bool>()).prop_map(|(chunk, first)| Step::ReadAcrossUnlink { chunk, first }),
        1 => Just(Step::WriteBack),
    ]
}

/// How closed files are committed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Commit {
    /// At every close (the default).
    OnClose,
    /// Write-back with this delay; pending files are committed by `WriteBack` steps and at the
    /// end (no background flusher runs).
    WriteBack(Duration),
}

/// How a mount is configured.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Mode {
    commit: Commit,
    /// Memory for write buffers before they spill to temporary files.
    buffer: usize,
}

const DEFAULT_BUFFER: usize = 256 << 20;

fn buffer_size() -> impl Strategy<Value = usize> {
    // In memory; always spilled; spilled once a few files are open or large.
    prop_oneof![2 => Just(DEFAULT_BUFFER), 1 => Just(0usize), 1 => Just(24usize)]
}

fn on_close() -> impl Strategy<Value = Mode> {
    buffer_size().prop_map(|buffer| Mode {
        commit: Commit::OnClose,
        buffer,
    })
}

fn write_back() -> impl Strategy<Value = Mode> {
    let delay = prop_oneof![Just(Duration::ZERO), Just(Duration::from_secs(3600))];
    (delay, buffer_size()).prop_map(|(delay, buffer)| Mode {
        commit: Commit::WriteBack(delay),
        buffer,
    })
}

/// A small random sharded array: 1-2 dimensions, at most 12 (1-D) or 8x8 inner chunks, maybe
/// two levels, random index location and checksum, any key encoding, stored with gaps or in
/// reverse order (so the first rewrite of a shard changes its layout).
fn model_spec(seed: u64) -> ArraySpec {
    let bounds = Bounds {
        ndim: 3,
        inner: 3,
        shards: |ndim| if ndim == 1 { 4 } else { 3 },
        nest_percent: 30,
    };
    random_spec_within(seed, &bounds)
}

/// The array under test, its store and mount, and the reference file system.
struct Harness {
    built: Built,
    mem: Arc<MemoryStore>,
    fs: Fs,
    commit: Commit,
    /// Every inner coordinate of the grid, in C order.
    grid: Vec<Coords>,
    /// Chunks stored outside the grid (in edge shards): never visible, always kept.
    outside: Chunks,
    /// The reference: every file of the view, path -> bytes.
    reference: BTreeMap<String, Vec<u8>>,
}

fn mount(store: Arc<MemoryStore>, mode: Mode) -> Fs {
    let mut config = FsConfig::read_only(FS_UID, FS_GID, Duration::from_secs(1));
    config.writable = true;
    config.write_buffer_bytes = mode.buffer;
    if let Commit::WriteBack(delay) = mode.commit {
        config.write_back_delay = Some(delay);
    }
    Fs::new(View::new(store, &ViewOptions::default()), config)
}

type Outcome = Result<(), i32>;

fn errno_of(e: FsError) -> i32 {
    e.errno()
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

impl Harness {
    async fn new(seed: u64, mode: Mode) -> Harness {
        let spec = model_spec(seed);
        let prefix = if seed.is_multiple_of(3) { "" } else { "g/a/" };
        let chunks = spec.random_chunks(seed, seed % 101, 12);
        let built = spec.build(prefix, &chunks);
        let mem = memory_store(&built.files);
        if !prefix.is_empty() {
            mem.insert("zarr.json", group_json("root"));
            mem.insert("g/zarr.json", group_json("g"));
            mem.insert("g/other.bin", vec![1, 2, 3]);
        }
        let fs = mount(mem.clone(), mode);
        let (reference, _) = fs_walk(&fs).await;
        // The reference starts as the unsharded model says.
        let mut want: Vec<String> = built.view_chunk_files().into_keys().collect();
        want.push(built.zarr_json_key());
        if !prefix.is_empty() {
            want.extend(["zarr.json".to_string(), "g/zarr.json".into(), "g/other.bin".into()]);
        }
        want.sort();
        assert_eq!(reference.keys().cloned().collect::<Vec<_>>(), want);
        for (path, b) in built.view_chunk_files() {
            assert!(reference[&path] == b, "{path}");
        }
        let outside = chunks
            .iter()
            .filter(|(c, _)| !spec.in_grid(c))
            .map(|(c, b)| (c.clone(), b.clone()))
            .collect();
        let grid = all_coords(&spec.inner_grid());
        Harness {
            built,
            mem,
            fs,
            commit: mode.commit,
            grid,
            outside,
            reference,
        }
    }

    fn path(&self, chunk: usize) -> String {
        let coords = &self.grid[chunk % self.grid.len()];
        format!("{}{}", self.built.prefix, self.built.spec.encoding.encode(coords))
    }

    /// Every chunk the store must hold: the reference's chunk files and those outside the grid.
    fn stored_chunks(&self) -> Chunks {
        let spec = &self.built.spec;
        let mut chunks = self.outside.clone();
        for (path, b) in &self.reference {
            let Some(rel) = path.strip_prefix(&self.built.prefix) else {
                continue;
            };
            if let Some(c) = spec.encoding.decode(rel, spec.ndim()) {
                chunks.insert(c, b.clone());
            }
        }
        chunks
    }

    // -- The reference: plain file semantics. --

    fn model(&mut self, step: &Step) -> Outcome {
        match step {
            Step::Write { chunk, data, excl, .. } => {
                let path = self.path(*chunk);
                let r = &mut self.reference;
                if *excl && r.contains_key(&path) {
                    return Err(libc::EEXIST);
                }
                r.insert(path, data.clone());
            }
            Step::Overwrite { chunk, offset, data } => {
                let path = self.path(*chunk);
                let file = self.reference.get_mut(&path).ok_or(libc::ENOENT)?;
                let end = offset + data.len();
                if file.len() < end {
                    file.resize(end, 0);
                }
                file[*offset..end].copy_from_slice(data);
            }
            Step::Truncate { chunk, size, .. } => {
                let path = self.path(*chunk);
                self.reference.get_mut(&path).ok_or(libc::ENOENT)?.resize(*size, 0);
            }
            Step::Unlink { chunk } => {
                let path = self.path(*chunk);
                self.reference.remove(&path).ok_or(libc::ENOENT)?;
            }
            Step::StageRename { chunk, data, .. } => {
                let path = self.path(*chunk);
                self.reference.insert(path, data.clone());
            }
            Step::Move { from, to, no_replace } => {
                let (from, to) = (self.path(*from), self.path(*to));
                let r = &mut self.reference;
                if !r.contains_key(&from) {
                    return Err(libc::ENOENT);
                }
                if from == to {
                    return Ok(());
                }
                if *no_replace && r.contains_key(&to) {
                    return Err(libc::EEXIST);
                }
                let b = r.remove(&from).unwrap();
                r.insert(to, b);
            }
            Step::LinkCreate { chunk, data } => {
                let path = self.path(*chunk);
                if self.reference.contains_key(&path) {
                    return Err(libc::EEXIST);
                }
                self.reference.insert(path, data.clone());
            }
            Step::ReadAcrossUnlink { chunk, .. } => {
                let path = self.path(*chunk);
                self.reference.remove(&path).ok_or(libc::ENOENT)?;
            }
            Step::WriteBack => {}
        }
        Ok(())
    }

    // -- The same operation through the Fs. --

    async fn apply(&self, step: &Step) -> Outcome {
        let fs = &self.fs;
        match step {
            Step::Write {
                chunk,
                data,
                excl,
                split: in_two,
            } => {
                let path = self.path(*chunk);
                let (dir, name) = split(&path);
                let parent = fs_mkdir_p(fs, dir).await.map_err(errno_of)?;
                let (_, fh) = fs.create(parent, name, !excl).await.map_err(errno_of)?;
                let mid = if *in_two { data.len() / 2 } else { 0 };
                let mut result = Ok(());
                for (offset, piece) in [(mid, &data[mid..]), (0, &data[..mid])] {
                    if !piece.is_empty() {
                        result = result.and(fs.write(fh, offset as u64, piece).await.map(drop));
                    }
                }
                let result = result.and(fs.flush(fh).await);
                fs.release(fh).await;
                result.map_err(errno_of)
            }
            Step::Overwrite { chunk, offset, data } => {
                let (_, fh) = fs_open_write(fs, &self.path(*chunk), false).await.map_err(errno_of)?;
                let result = fs.write(fh, *offset as u64, data).await.map(drop);
                let result = result.and(fs.flush(fh).await);
                fs.release(fh).await;
                result.map_err(errno_of)
            }
            Step::Truncate {
                chunk,
                size,
                via_handle,
            } => {
                if !via_handle {
                    let got = fs_truncate(fs, &self.path(*chunk), *size as u64)
                        .await
                        .map_err(errno_of)?;
                    assert_eq!(got.size, *size as u64, "size after truncate");
                    return Ok(());
                }
                let (ino, fh) = fs_open_write(fs, &self.path(*chunk), false).await.map_err(errno_of)?;
                let result = fs.truncate(ino, *size as u64, Some(fh)).await.map(|a| {
                    assert_eq!(a.size, *size as u64, "size after truncate");
                });
                let result = result.and(fs.flush(fh).await);
                fs.release(fh).await;
                result.map_err(errno_of)
            }
            Step::Unlink { chunk } => {
                let path = self.path(*chunk);
                let (dir, name) = split(&path);
                let parent = fs_resolve(fs, dir).await.map_err(errno_of)?;
                fs.unlink(parent.ino, name).await.map_err(errno_of)
            }
            Step::StageRename {
                chunk,
                data,
                style,
                close_first,
            } => {
                let path = self.path(*chunk);
                let (dir, name) = split(&path);
                let temp = match style {
                    0 => format!("{name}.5f3a9c.partial"),
                    1 => format!(".{name}.Qx7bZ2"),
                    _ => format!("{name}.tmp"),
                };
                let parent = fs_mkdir_p(fs, dir).await.map_err(errno_of)?;
                let (_, fh) = fs.create(parent, &temp, false).await.map_err(errno_of)?;
                fs.write(fh, 0, data).await.map_err(errno_of)?;
                fs.flush(fh).await.map_err(errno_of)?;
                if *close_first {
                    fs.release(fh).await;
                }
                let staged = fs.lookup(parent, &temp).await.map_err(errno_of)?;
                assert_eq!(staged.size, data.len() as u64, "staged {temp}");
                let renamed = fs.rename(parent, &temp, parent, name, false).await;
                if !close_first {
                    fs.release(fh).await;
                }
                renamed.map_err(errno_of)?;
                let gone = fs.lookup(parent, &temp).await.map(|a| a.size).map_err(errno_of);
                assert_eq!(gone, Err(libc::ENOENT), "{temp} after its rename");
                Ok(())
            }
            Step::Move { from, to, no_replace } => {
                let (from, to) = (self.path(*from), self.path(*to));
                // The kernel looks the source up first.
                fs_resolve(fs, &from).await.map_err(errno_of)?;
                let (from_dir, from_name) = split(&from);
                let (to_dir, to_name) = split(&to);
                let fp = fs_resolve(fs, from_dir).await.map_err(errno_of)?.ino;
                let tp = fs_mkdir_p(fs, to_dir).await.map_err(errno_of)?;
                fs.rename(fp, from_name, tp, to_name, *no_replace)
                    .await
                    .map_err(errno_of)
            }
            Step::LinkCreate { chunk, data } => {
                let path = self.path(*chunk);
                let (dir, name) = split(&path);
                let temp = format!("{name}.9e1f07.partial");
                let parent = fs_mkdir_p(fs, dir).await.map_err(errno_of)?;
                let (tmp, fh) = fs.create(parent, &temp, false).await.map_err(errno_of)?;
                fs.write(fh, 0, data).await.map_err(errno_of)?;
                fs.flush(fh).await.map_err(errno_of)?;
                fs.release(fh).await;
                let linked = fs.link(tmp.ino, parent, name).await;
                fs.unlink(parent, &temp).await.map_err(errno_of)?;
                let attr = linked.map_err(errno_of)?;
                assert_eq!(attr.size, data.len() as u64, "{path} as linked");
                Ok(())
            }
            Step::ReadAcrossUnlink { chunk, first } => {
                let path = self.path(*chunk);
                let attr = fs_resolve(fs, &path).await.map_err(errno_of)?;
                let want = fs_read(fs, attr.ino).await.map_err(errno_of)?;
                let fh = fs.open(attr.ino, false, false).await.map_err(errno_of)?;
                if *first {
                    fs.read(fh, 0, 1).await.map_err(errno_of)?;
                }
                let (dir, name) = split(&path);
                let parent = fs_resolve(fs, dir).await.map_err(errno_of)?;
                let removed = fs.unlink(parent.ino, name).await.map_err(errno_of);
                let read = fs.read(fh, 0, 1 << 20).await.map(|b| b.to_vec());
                let size = fs.getattr(attr.ino).await.map(|a| a.size);
                fs.release(fh).await;
                removed?;
                assert_eq!(read.map_err(errno_of), Ok(want.clone()), "{path} read after its unlink");
                assert_eq!(
                    size.map_err(errno_of),
                    Ok(want.len() as u64),
                    "{path} fstat after its unlink"
                );
                Ok(())
            }
            Step::WriteBack => match self.commit {
                Commit::OnClose => Ok(()),
                Commit::WriteBack(_) => fs.write_back(false).await.map_err(errno_of),
            },
        }
    }

    /// The view equals the reference: the same files with the same bytes; directories only
    /// those leading to files, plus chunk directories of the array.
    async fn check_view(&self, fs: &Fs, when: &str) {
        let (files, dirs) = fs_walk(fs).await;
        let got: Vec<&String> = files.keys().collect();
        let want: Vec<&String> = self.reference.keys().collect();
        assert_eq!(got, want, "{when}: file names");
        for (path, b) in &self.reference {
            assert!(
                files[path] == *b,
                "{when}: bytes of {path}: {:?} != {:?}",
                files[path],
                b
            );
        }
        for d in dirs {
            let leads = self.reference.keys().any(|p| p.starts_with(&format!("{d}/")));
            assert!(
                leads || (d.starts_with(&self.built.prefix) && self.built.spec.encoding.separator() == '/'),
                "{when}: unexpected directory {d}"
            );
        }
    }

    async fn check_store(&self) {
        check_shards(self.mem.as_ref(), &self.built, &self.stored_chunks()).await;
    }
}

async fn run(seed: u64, mode: Mode, steps: &[Step]) {
    let mut h = Harness::new(seed, mode).await;
    for (i, step) in steps.iter().enumerate() {
        let want = h.model(step);
        let got = h.apply(step).await;
        let when = format!("step {i} {step:?}");
        assert_eq!(got, want, "{when}: outcome");
        h.check_view(&h.fs, &when).await;
        let settled = match (mode.commit, step) {
            (Commit::OnClose, _) => true,
            (Commit::WriteBack(d), Step::WriteBack) => d.is_zero(),
            _ => false,
        };
        if settled {
            h.check_store().await;
        }
    }
    if let Commit::WriteBack(_) = mode.commit {
        h.fs.write_back(true).await.expect("final write-back");
        h.check_view(&h.fs, "after the final write-back").await;
    }
    h.check_store().await;
    let fresh = mount(
        h.mem.clone(),
        Mode {
            commit: Commit::OnClose,
            buffer: DEFAULT_BUFFER,
        },
    );
    h.check_view(&fresh, "fresh mount").await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Chunk files committed at every close (the default mount).
    #[test]
    fn write_path_behaves_like_a_plain_file_system(
        seed in any::<u64>(),
        mode in on_close(),
        steps in prop::collection::vec(step(), 20..60),
    ) {
        runtime().block_on(run(seed, mode, &steps));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Opt-in write-back: closed chunk files pending in the overlay until written back.
    #[test]
    fn write_back_behaves_like_a_plain_file_system(
        seed in any::<u64>(),
        mode in write_back(),
        steps in prop::collection::vec(step(), 20..60),
    ) {
        runtime().block_on(run(seed, mode, &steps));
    }
}

#[test]
fn model_spec_stays_small() {
    for seed in 0..500 {
        let spec = model_spec(seed);
        let n = product(&spec.inner_grid());
        assert!((1..=64).contains(&n), "seed {seed}: {n} inner chunks");
    }
}

// ---------------------------------------------------------------------------------------------
// Minimal failing sequences the model found, replayed deterministically.

fn replay(seed: u64, commit: Commit, steps: &[Step]) {
    let mode = Mode {
        commit,
        buffer: DEFAULT_BUFFER,
    };
    runtime().block_on(run(seed, mode, steps));
}

fn write(chunk: usize, data: &[u8], excl: bool) -> Step {
    Step::Write {
        chunk,
        data: data.to_vec(),
        excl,
        split: false,
    }
}

/// 2-D `/` keys, inner grid [2, 1], one chunk per shard. Writing chunk (1, 0) into the removed
/// row made `c/1` with mkdir; removing every stored chunk then leaves the array with no chunk
/// tree in the store, but readdir of the array still lists `c` (an ancestor of the made
/// directory) while lookup of `c` is ENOENT.
#[test]
fn replay_made_directory_outliving_its_stored_parent() {
    let steps = [
        Step::Unlink { chunk: 5 },
        write(1, b"", false),
        Step::Unlink { chunk: 11 },
        Step::Unlink { chunk: 30 },
    ];
    replay(17_327_047_758_493_820_603, Commit::OnClose, &steps);
}

/// A chunk rewritten (pending in write-back) while its old version is stored: readdir gives
/// the stored size, lookup the pending one.
#[test]
fn replay_write_back_listing_shows_stored_size_of_pending_file() {
    let stage = |data: &[u8]| Step::StageRename {
        chunk: 0,
        data: data.to_vec(),
        style: 0,
        close_first: false,
    };
    let steps = [stage(&[0; 6]), Step::WriteBack, stage(b"")];
    replay(0, Commit::WriteBack(Duration::ZERO), &steps);
}

/// A new chunk pending in write-back (not yet in the store) renamed onto another key: ENOENT.
#[test]
fn replay_write_back_rename_of_pending_chunk() {
    let steps = [
        Step::StageRename {
            chunk: 14,
            data: Vec::new(),
            style: 0,
            close_first: false,
        },
        Step::Move {
            from: 4,
            to: 0,
            no_replace: false,
        },
    ];
    replay(2_804_571_794_558_206_249, Commit::WriteBack(Duration::ZERO), &steps);
}

/// O_EXCL create of a chunk file that is pending in write-back succeeds (and empties it).
#[test]
fn replay_write_back_exclusive_create_of_pending_chunk() {
    let steps = [write(0, b"", false), write(0, b"", true)];
    replay(0, Commit::WriteBack(Duration::ZERO), &steps);
}

/// v2 `/` keys: chunk (0, 1) pending in write-back, then the only stored chunk of row 0
/// unlinked: row directory `0` is listed but ENOENT, so the pending file cannot be reached.
#[test]
fn replay_write_back_pending_chunk_in_a_directory_the_store_no_longer_has() {
    let steps = [write(1, b"", false), Step::Unlink { chunk: 6 }];
    replay(
        13_245_227_092_000_369_364,
        Commit::WriteBack(Duration::from_secs(3600)),
        &steps,
    );
}
