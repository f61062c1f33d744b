//! `zarrfs copy` holds a bounded number of keys in memory whatever the number of chunk files
//! (issue 35): it plans an array at a time and packs a row of shards at a time, so copying an
//! array of 16,384 chunk files holds at most a few rows of them; and it still copies the
//! whole, in parts whose union is the whole. With many files copied at once, the units whose
//! files are found ahead of the copying are bounded by the keys they hold, not by their number.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use zarrfs::copy::{run, run_with, CopyOptions, Limits, Part, Report, Shaping};

/// Chunks along each of the two dimensions: 128 x 128 chunk files of 4 x 4 bytes.
const GRID: u64 = 128;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zarrfs-copy-memory-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An unsharded v3 group holding one uint8 array of GRID x GRID chunks, every chunk stored.
fn unsharded(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(
        root.join("zarr.json"),
        br#"{"zarr_format":3,"node_type":"group","attributes":{}}"#,
    )
    .unwrap();
    let array = root.join("a");
    std::fs::create_dir_all(&array).unwrap();
    let doc = serde_json::json!({
        "zarr_format": 3, "node_type": "array", "shape": [GRID * 4, GRID * 4], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {"k": 1},
    });
    std::fs::write(array.join("zarr.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    for i in 0..GRID {
        let dir = array.join(format!("c/{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for j in 0..GRID {
            let bytes: Vec<u8> = (0..16).map(|b| ((i * 7 + j * 13 + b) % 251 + 1) as u8).collect();
            std::fs::write(dir.join(j.to_string()), bytes).unwrap();
        }
    }
}

fn args(source: &Path, dest: &Path, shard: Option<&str>, part: Part, jobs: usize) -> CopyOptions {
    let source = source.display().to_string();
    CopyOptions {
        read: zarrfs::cli::read_settings(&source, None).unwrap(),
        source,
        dest: dest.display().to_string(),
        jobs,
        part,
        verify: false,
        json: true,
        progress_every: Duration::from_secs(3600),
        shard: shard.map(|s| Shaping::Shape(s.split(',').map(|d| d.parse().unwrap()).collect())),
    }
}

fn copy(source: &Path, dest: &Path, shard: Option<&str>, part: Part) -> Report {
    run(&args(source, dest, shard, part, 1)).unwrap()
}

/// A whole copy with 16 files at once and `keys_ahead` (see `Limits`).
fn copy_ahead(source: &Path, dest: &Path, shard: Option<&str>, keys_ahead: u64) -> Report {
    run_with(&args(source, dest, shard, Part::WHOLE, 16), Limits { keys_ahead }).unwrap()
}

/// Every file below `root`, by path, with its bytes.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn chunk_files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    files(root)
        .into_iter()
        .filter(|(p, _)| !p.ends_with("zarr.json"))
        .collect()
}

#[test]
fn copies_hold_a_bounded_number_of_keys_and_parts_make_the_whole() {
    let all = GRID * GRID;
    let work = scratch("both");
    let (source, packed, back) = (work.join("source"), work.join("packed"), work.join("back"));
    unsharded(&source);

    // Packing into shards of 8 x 8 chunks: 256 shards, a row of them 1,024 chunk files.
    let report = copy(&source, &packed, Some("32,32"), Part::WHOLE);
    assert_eq!(report.files_copied, 256 + 2);
    assert!(report.held_peak >= 64, "{report:?}");
    assert!(
        report.held_peak <= all / 4,
        "packing held {} keys of {all}",
        report.held_peak
    );
    assert_eq!(chunk_files(&packed).len(), 256);

    // Unsharding it again: its 256 shards listed, then their chunk files a shard at a time.
    let report = copy(&packed, &back, None, Part::WHOLE);
    assert_eq!(report.files_copied, all + 2);
    assert!(
        report.held_peak <= all / 8,
        "unsharding held {} keys of {all}",
        report.held_peak
    );
    assert_eq!(chunk_files(&back), chunk_files(&source));

    // Three parts into one destination make the same copy as the whole, each file once.
    for (shard, whole) in [(Some("32,32"), &packed), (None, &back)] {
        let from = if shard.is_some() { &source } else { &packed };
        let parts = work.join(format!("parts-{}", shard.is_some()));
        let copied: u64 = (0..3)
            .map(|k| copy(from, &parts, shard, Part { k, n: 3 }).files_copied)
            .sum();
        assert_eq!(files(&parts), files(whole));
        assert_eq!(copied as usize, files(whole).len());
        // A rerun finds it all there.
        let rerun = copy(from, &parts, shard, Part::WHOLE);
        assert_eq!(
            (rerun.files_copied, rerun.files_skipped as usize),
            (0, files(whole).len())
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn files_found_ahead_are_bounded_by_keys() {
    let all = GRID * GRID;
    let work = scratch("ahead");
    let (source, packed) = (work.join("source"), work.join("packed"));
    unsharded(&source);
    // 16 shards of 32 x 32 chunks: 1,024 chunk files each.
    let report = copy(&source, &packed, Some("128,128"), Part::WHOLE);
    assert_eq!(report.files_copied, 16 + 2);

    // Unsharded with 16 files at once: without a bound on keys, the files of the 16 shards are
    // all found ahead (16,384 keys, the whole array); within 2,048, two shards at most.
    let unbounded = copy_ahead(&packed, &work.join("unbounded"), None, u64::MAX);
    assert!(unbounded.held_peak >= 4 * 1024, "{unbounded:?}");
    let back = work.join("back");
    let bounded = copy_ahead(&packed, &back, None, 2048);
    assert_eq!(bounded.files_copied, all + 2);
    assert!(
        bounded.held_peak <= 2048 + 1024 + 64,
        "unsharding held {} keys of {all}",
        bounded.held_peak
    );
    assert_eq!(chunk_files(&back), chunk_files(&source));

    // Packed again with 16 at once: shards of 8 x 8 chunks, a row of them 1,024 chunk files,
    // the shards let in ahead 256 chunk files: the next row is gathered (a listing of 128 at
    // a time) while the last of the row before are copied, never more.
    let repacked = work.join("repacked");
    let report = copy_ahead(&back, &repacked, Some("32,32"), 256);
    assert_eq!(report.files_copied, 256 + 2);
    assert!(
        report.held_peak <= 2 * 1024 + 128,
        "packing held {} keys",
        report.held_peak
    );
    let direct = work.join("direct");
    copy(&source, &direct, Some("32,32"), Part::WHOLE);
    assert_eq!(files(&repacked), files(&direct));
    let _ = std::fs::remove_dir_all(&work);
}

/// Packing holds of each chunk file of a row of shards only its size, 4 bytes: a row of shards
/// of many chunk files is held while it is gathered (issue 35, aim 6: 1024 x 1024 chunks a
/// shard at 10^7 chunk files), and a record of 24 bytes a file made that hundreds of MiB.
#[test]
fn packing_holds_four_bytes_a_chunk_file() {
    let all = GRID * GRID;
    let work = scratch("records");
    let source = work.join("source");
    unsharded(&source);
    // One shard of all 16,384 chunk files, then a row of 4 shards of 32 x 32 chunks (4,096
    // chunk files; the array's 4 rows of them), then 8 x 8 chunks (1,024 a row).
    for (shape, row) in [("512,512", all), ("128,128", all / 4), ("32,32", all / 16)] {
        let dest = work.join(format!("packed-{shape}"));
        let report = copy(&source, &dest, Some(shape), Part::WHOLE);
        assert!(report.pack_held_peak > 0, "{report:?}");
        // A row, and the row before it not yet handed on, at most: 4 bytes a chunk file and
        // a little a shard; never the 16 or 24 bytes of a list of (entry, size).
        let shards_a_row = GRID * 4 / shape.split(',').next().unwrap().parse::<u64>().unwrap();
        let bound = 2 * (4 * row + 128 * shards_a_row);
        assert!(
            report.pack_held_peak <= bound,
            "--shard {shape}: {} bytes of chunk records held for a row of {row} chunk files (bound {bound})",
            report.pack_held_peak
        );
        assert_eq!(chunk_files(&dest).len() as u64, all / row * shards_a_row);
    }
    let _ = std::fs::remove_dir_all(&work);
}
