//! The journal's records, as bytes: what a closed file's content or a removal looks like on
//! disk, and how a segment is read back.
//!
//! A record is a fixed header, the file's path in the mount, its content, and a CRC-32C of all
//! of that; every integer is little-endian:
//!
//! ```text
//! magic "ZJR1" | kind u8 | seq u64 | path_len u32 | data_len u64 | path | data | crc32c u32
//! ```
//!
//! Kinds: 1 a closed file's content; 2 a removal (no data); 3 the seqs of records now committed
//! (no path; data: u64 seqs), so that a replay never commits again what the store already had
//! from this mount, where another mount may have written since.
//!
//! Records are only ever appended (into zero-filled space, or past a segment's end), and a
//! segment is fsynced before the close it records returns, so a crash can tear only the
//! records written since the last fsync: the tail of the newest segment. Zeros after the last
//! record are a clean end (a record never starts with a zero byte). Reading stops at the first record that is short, has a bad magic or
//! lengths beyond the limits, or fails its checksum: it and anything after it in that segment
//! are dropped, never replayed (nothing after a torn record can be trusted to start where its
//! length says). Bytes read from disk are never trusted for an allocation: lengths are bounded
//! before anything is read.

/// The first bytes of every record.
const MAGIC: &[u8; 4] = b"ZJR1";
/// magic, kind, seq, path_len, data_len.
const HEADER: usize = 4 + 1 + 8 + 4 + 8;
/// Longest path a record may hold.
pub const MAX_PATH: usize = 4096;
/// Most seqs one done record lists.
pub const MAX_DONE: usize = 1 << 20;

/// What a record says of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The file was closed with this content.
    Content(bytes::Bytes),
    /// The file was removed (or renamed away): earlier records of the path are void.
    Removed,
    /// These records (by seq) are committed: a replay skips them. Its path is empty.
    Done(Vec<u64>),
}

/// One record of the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub path: String,
    pub kind: Kind,
}

impl Record {
    /// The record's bytes on disk.
    pub fn encode(&self) -> Vec<u8> {
        let seqs: Vec<u8>;
        let (kind, data): (u8, &[u8]) = match &self.kind {
            Kind::Content(data) => (1, data),
            Kind::Removed => (2, &[]),
            Kind::Done(done) => {
                seqs = done.iter().flat_map(|s| s.to_le_bytes()).collect();
                (3, &seqs)
            }
        };
        let mut out = Vec::with_capacity(HEADER + self.path.len() + data.len() + 4);
        out.extend_from_slice(MAGIC);
        out.push(kind);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&(self.path.len() as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(data);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// What reading a segment found: its whole records, in order, and whether it ended in bytes
/// that are not a whole record (`torn`: how many bytes were dropped).
#[derive(Debug, Default)]
pub struct Segment {
    pub records: Vec<Record>,
    pub torn: Option<usize>,
}

/// Read the records of a segment's bytes; `max_data` bounds a record's content.
pub fn decode(bytes: &[u8], max_data: u64) -> Segment {
    let mut seg = Segment::default();
    let mut at = 0;
    while at < bytes.len() {
        match decode_one(&bytes[at..], max_data) {
            Some((record, len)) => {
                seg.records.push(record);
                at += len;
            }
            None => {
                // Segments are zero-filled ahead of use (see `super`): zeros after the last
                // record are its clean end, and only bytes up to the last non-zero one are torn.
                seg.torn = bytes[at..].iter().rposition(|b| *b != 0).map(|last| last + 1);
                break;
            }
        }
    }
    seg
}

/// The record at the start of `bytes` and its length, if it is whole and sound.
fn decode_one(bytes: &[u8], max_data: u64) -> Option<(Record, usize)> {
    let header = bytes.get(..HEADER)?;
    if &header[..4] != MAGIC {
        return None;
    }
    let kind = header[4];
    let seq = u64::from_le_bytes(header[5..13].try_into().ok()?);
    let path_len = u32::from_le_bytes(header[13..17].try_into().ok()?) as usize;
    let data_len = u64::from_le_bytes(header[17..25].try_into().ok()?);
    let malformed = match kind {
        2 => data_len != 0,
        3 => data_len % 8 != 0 || path_len != 0,
        _ => false,
    };
    let limit = if kind == 3 { 8 * MAX_DONE as u64 } else { max_data };
    if path_len > MAX_PATH || data_len > limit || malformed {
        return None;
    }
    let data_len = usize::try_from(data_len).ok()?;
    let body_end = HEADER.checked_add(path_len)?.checked_add(data_len)?;
    let end = body_end.checked_add(4)?;
    let whole = bytes.get(..end)?;
    let crc = u32::from_le_bytes(whole[body_end..].try_into().ok()?);
    if crc32c::crc32c(&whole[..body_end]) != crc {
        return None;
    }
    let path = std::str::from_utf8(&whole[HEADER..HEADER + path_len]).ok()?.to_string();
    let kind = match kind {
        1 => Kind::Content(bytes::Bytes::copy_from_slice(&whole[HEADER + path_len..body_end])),
        2 => Kind::Removed,
        3 => Kind::Done(
            whole[HEADER + path_len..body_end]
                .chunks_exact(8)
                .filter_map(|c| c.try_into().ok().map(u64::from_le_bytes))
                .collect(),
        ),
        _ => return None,
    };
    Some((Record { seq, path, kind }, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(seq: u64, path: &str, data: &[u8]) -> Record {
        Record {
            seq,
            path: path.into(),
            kind: Kind::Content(bytes::Bytes::copy_from_slice(data)),
        }
    }

    #[test]
    fn records_read_back_as_written() {
        let records = vec![
            content(1, "a/c/0/0", b"hello"),
            Record {
                seq: 2,
                path: "a/c/0/0".into(),
                kind: Kind::Removed,
            },
            content(3, "a/c/1/0", b""),
            Record {
                seq: 4,
                path: String::new(),
                kind: Kind::Done(vec![1, 3, u64::MAX]),
            },
        ];
        let bytes: Vec<u8> = records.iter().flat_map(Record::encode).collect();
        let seg = decode(&bytes, 1 << 20);
        assert_eq!(seg.records, records);
        assert_eq!(seg.torn, None);
    }

    #[test]
    fn a_torn_tail_is_dropped_at_every_length() {
        let first = content(1, "x/c/0", b"first").encode();
        let second = content(2, "x/c/1", &[7u8; 100]).encode();
        for cut in 0..second.len() {
            let mut bytes = first.clone();
            bytes.extend_from_slice(&second[..cut]);
            let seg = decode(&bytes, 1 << 20);
            assert_eq!(seg.records.len(), 1, "cut at {cut}");
            // Torn up to its last non-zero byte (zeros after a record are a clean end).
            let torn = second[..cut].iter().rposition(|b| *b != 0).map(|last| last + 1);
            assert_eq!(seg.torn, torn);
            assert_eq!(seg.torn.is_some(), cut > 0, "a record starts with its magic");
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_drops_the_record_and_what_follows() {
        let first = content(1, "x/c/0", b"first").encode();
        let rest: Vec<u8> = [content(2, "x/c/1", b"second"), content(3, "x/c/2", b"third")]
            .iter()
            .flat_map(Record::encode)
            .collect();
        let second_len = content(2, "x/c/1", b"second").encode().len();
        for i in 0..second_len {
            let mut bytes = first.clone();
            bytes.extend_from_slice(&rest);
            bytes[first.len() + i] ^= 0x40;
            let seg = decode(&bytes, 1 << 20);
            assert_eq!(seg.records, vec![content(1, "x/c/0", b"first")], "byte {i}");
            assert!(seg.torn.is_some());
        }
    }

    #[test]
    fn zeros_after_the_last_record_are_a_clean_end_and_never_torn_bytes() {
        let first = content(1, "x/c/0", b"first").encode();
        let mut bytes = first.clone();
        bytes.resize(first.len() + 4096, 0);
        let seg = decode(&bytes, 1 << 20);
        assert_eq!((seg.records.len(), seg.torn), (1, None));
        // A record torn in zero-filled space: its written part is torn, the zeros are not.
        let second = content(2, "x/c/1", &[7u8; 100]).encode();
        bytes[first.len()..first.len() + 60].copy_from_slice(&second[..60]);
        let seg = decode(&bytes, 1 << 20);
        assert_eq!((seg.records.len(), seg.torn), (1, Some(60)));
    }

    #[test]
    fn lengths_beyond_the_limits_are_not_trusted() {
        let mut bytes = content(1, "p", &[1u8; 64]).encode();
        assert!(decode(&bytes, 63).records.is_empty());
        bytes[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&bytes, u64::MAX).records.is_empty());
        bytes[13..17].copy_from_slice(&1u32.to_le_bytes());
        bytes[17..25].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&bytes, u64::MAX).records.is_empty());
        assert!(decode(b"ZJR1", u64::MAX).torn == Some(4));
    }
}
