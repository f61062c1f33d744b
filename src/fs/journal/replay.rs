//! Reading a journal back when it is opened: what an earlier mount closed and never committed.
//!
//! Every segment is read in order. For each path its last record counts: a content is replayed
//! unless a done record lists it (the store had it from that mount; committing it again could
//! undo another mount's later write) or a removal came after it.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::record::{self, Kind};

/// What a journal held when it was opened: the last content of every file whose last record
/// is neither a removal nor done, in the order of their records, and what was dropped as torn.
#[derive(Debug, Default)]
pub struct Replay {
    pub files: Vec<(String, Bytes)>,
    /// Records read (contents, removals and done lists), and segments they were in.
    pub records: usize,
    pub segments: usize,
    /// Torn or corrupt tails dropped: how many segments had one, and their bytes.
    pub torn_segments: usize,
    pub torn_bytes: usize,
}

/// The segment files in `dir`, by first seq.
pub(super) fn segment_files(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(first) = name
            .to_str()
            .and_then(|n| n.strip_prefix("seg-"))
            .and_then(|n| n.strip_suffix(".zj"))
            .and_then(|n| u64::from_str_radix(n, 16).ok())
        else {
            continue;
        };
        found.push((first, entry.path()));
    }
    found.sort();
    Ok(found)
}

/// Read every segment: what to replay (see the module's notes), and the highest seq seen.
pub(super) fn read_segments(segments: &[(u64, PathBuf)], max_data: u64) -> std::io::Result<(Replay, u64)> {
    let mut replay = Replay {
        segments: segments.len(),
        ..Replay::default()
    };
    let mut last: BTreeMap<String, (u64, Option<Bytes>)> = BTreeMap::new();
    let mut done = HashSet::new();
    let mut max_seq = 0;
    for (first, path) in segments {
        max_seq = max_seq.max(*first);
        let seg = record::decode(&std::fs::read(path)?, max_data);
        if let Some(torn) = seg.torn {
            replay.torn_segments += 1;
            replay.torn_bytes += torn;
        }
        for r in seg.records {
            replay.records += 1;
            max_seq = max_seq.max(r.seq);
            let content = match r.kind {
                Kind::Content(data) => Some(data),
                Kind::Removed => None,
                Kind::Done(seqs) => {
                    done.extend(seqs);
                    continue;
                }
            };
            match last.get(&r.path) {
                Some((seq, _)) if *seq > r.seq => {}
                _ => {
                    last.insert(r.path, (r.seq, content));
                }
            }
        }
    }
    let mut files: Vec<_> = last
        .into_iter()
        .filter(|(_, (seq, _))| !done.contains(seq))
        .filter_map(|(path, (seq, data))| data.map(|d| (seq, path, d)))
        .collect();
    files.sort_by_key(|(seq, _, _)| *seq);
    replay.files = files.into_iter().map(|(_, p, d)| (p, d)).collect();
    Ok((replay, max_seq))
}
