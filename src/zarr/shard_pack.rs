//! Whole-shard decoding and encoding ("packing") for the write path.
//!
//! Reading a single inner chunk only needs the index (see [`ShardIndex`]);
//! writing one means rebuilding the shard that holds it. This module turns a
//! stored shard into a [`ShardContent`] tree — the present chunks by C-order
//! index at each level, with a [`Packed::Nested`] sub-shard per entry when a
//! deeper sharding level exists — and back.
//!
//! * [`unpack`] (and the zero-copy [`unpack_shared`]) locate the index at
//!   `levels[0].index_location`, decode and verify it with
//!   [`ShardIndex::decode`] (length, crc32c, every entry inside the shard and,
//!   with the index at the start, none pointing into the index — the same
//!   rules as the read path), then slice out every present entry and, for
//!   nested levels, recurse into it with `levels[1..]`. Chunk bytes are slices
//!   of one shared buffer, never copied per chunk, so entries that overlap or
//!   repeat cost no memory. Nested sub-shards that hold no chunk are dropped.
//!   Because overlapping entries could point many times at the same sub-shard
//!   and make the decoding work quadratic, the total number of index entries
//!   decoded is bounded: a well-formed shard of `len` bytes has at most
//!   `len / 16` entries per level (each takes 16 bytes of an index, and the
//!   indexes of disjoint sub-shards are disjoint), so more than
//!   `levels.len() * (len / 16 + 1)` is reported as `TooLarge`.
//! * [`pack`] lays the chunks out back to back in ascending chunk-index order,
//!   without gaps, after the index when it is at the start (offsets are
//!   absolute within the (sub-)shard, so the first chunk starts at the index
//!   size) or before it when it is at the end. Absent chunks get the empty
//!   entry (2^64-1, 2^64-1); zero-length chunks are present with `nbytes` 0.
//!   Sub-shards are packed recursively with their own level's configuration
//!   and a sub-shard with no chunk is left out. A shard with no chunk at all
//!   packs to `None`: the caller erases it rather than storing an empty index.
//! * [`ShardContent::set`] / [`ShardContent::get`] address an innermost chunk
//!   by its per-level index path (as `InnerLocation::per_level_index`),
//!   creating sub-shards on demand and removing them when their last chunk is
//!   removed, so a tree never holds an empty sub-shard through these methods.
//!   `set` cannot see the levels, so chunk indexes are checked against each
//!   level's `num_chunks` by [`ShardContent::set_checked`] and by [`pack`].
//!
//! Everything is pure and works on values only; input bytes are untrusted and
//! every malformed shard is a [`ZarrError`], never a panic.

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::Bytes;

use crate::zarr::shard_index::{ChunkRange, ShardIndex};
use crate::zarr::sharding::{IndexLocation, ShardLevel};
use crate::zarr::ZarrError;

/// The decoded content of one (possibly nested) shard: present chunks by their
/// C-order index within the shard at this level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardContent {
    pub chunks: BTreeMap<u64, Packed>,
}

/// One present entry of a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packed {
    /// An innermost encoded chunk.
    Bytes(Bytes),
    /// A sub-shard, when a deeper level exists.
    Nested(ShardContent),
}

/// Decode a stored shard (`levels[0]`) completely, recursing into nested
/// levels. Verifies the crc32c and that every entry lies inside its
/// (sub-)shard and outside its index, like the read path. The chunks share one
/// copy of `bytes`; use [`unpack_shared`] to avoid even that copy.
pub fn unpack(bytes: &[u8], levels: &[ShardLevel]) -> Result<ShardContent, ZarrError> {
    unpack_shared(&Bytes::copy_from_slice(bytes), levels)
}

/// [`unpack`] without copying: the chunks are slices of `shard`.
pub fn unpack_shared(shard: &Bytes, levels: &[ShardLevel]) -> Result<ShardContent, ZarrError> {
    if levels.is_empty() {
        return Err(no_levels());
    }
    let depth = u64::try_from(levels.len()).unwrap_or(u64::MAX);
    let per_level = (shard.len() as u64 / 16).saturating_add(1);
    let mut budget = Budget {
        used: 0,
        limit: depth.saturating_mul(per_level),
    };
    unpack_level(shard, levels, &mut budget)
}

/// Bound on the index entries decoded by one [`unpack_shared`] call.
struct Budget {
    used: u64,
    limit: u64,
}

impl Budget {
    fn take(&mut self, n: u64) -> Result<(), ZarrError> {
        match self.used.checked_add(n) {
            Some(used) if used <= self.limit => {
                self.used = used;
                Ok(())
            }
            _ => Err(ZarrError::TooLarge {
                what: "index entries decoded from one shard",
                value: self.used.saturating_add(n),
                limit: self.limit,
            }),
        }
    }
}

fn unpack_level(shard: &Bytes, levels: &[ShardLevel], budget: &mut Budget) -> Result<ShardContent, ZarrError> {
    let Some((level, rest)) = levels.split_first() else {
        return Err(no_levels());
    };
    let len = shard.len() as u64;
    let index_start = level.index_offset(len)?;
    budget.take(level.num_chunks())?;
    let index_bytes = slice(shard, u64::MAX, index_start, level.index_size())?;
    let index = level.decode_index(&index_bytes, len)?;
    let mut content = ShardContent::default();
    for (chunk, range) in index.iter() {
        let Some(ChunkRange { offset, nbytes }) = range else {
            continue;
        };
        let bytes = slice(shard, chunk, offset, nbytes)?;
        if rest.is_empty() {
            content.chunks.insert(chunk, Packed::Bytes(bytes));
        } else {
            let sub = unpack_level(&bytes, rest, budget)?;
            if !sub.is_empty() {
                content.chunks.insert(chunk, Packed::Nested(sub));
            }
        }
    }
    Ok(content)
}

/// `shard[offset..offset + nbytes]` as a shared slice, or an error naming
/// `chunk` when the range is not inside `shard` (already checked by the index
/// decoder; this keeps the slicing panic-free regardless).
fn slice(shard: &Bytes, chunk: u64, offset: u64, nbytes: u64) -> Result<Bytes, ZarrError> {
    let out_of_bounds = || ZarrError::OutOfBounds {
        chunk,
        offset,
        nbytes,
        data_len: shard.len() as u64,
    };
    let start = usize::try_from(offset).map_err(|_| out_of_bounds())?;
    let end = offset
        .checked_add(nbytes)
        .and_then(|e| usize::try_from(e).ok())
        .ok_or_else(out_of_bounds)?;
    match shard.get(start..end) {
        Some(_) => Ok(shard.slice(start..end)),
        None => Err(out_of_bounds()),
    }
}

/// Encode a shard (`levels[0]`): chunks back to back in ascending chunk-index
/// order, the index at `levels[0].index_location` with offsets absolute within
/// the (sub-)shard, empty entries (2^64-1, 2^64-1), the crc32c when
/// configured; nested sub-shards encoded recursively with their own level.
/// Returns `None` when the shard holds no chunk at all (the caller erases
/// it); a nested sub-shard with no chunks is dropped (its entry empty).
///
/// Errors on a chunk index `>= num_chunks` of its level, on a
/// [`Packed::Bytes`] where a deeper level exists or a [`Packed::Nested`] at
/// the innermost level, and on sizes that overflow.
pub fn pack(content: &ShardContent, levels: &[ShardLevel]) -> Result<Option<Vec<u8>>, ZarrError> {
    let (level, rest) = levels.split_first().ok_or_else(no_levels)?;
    let n = level.num_chunks();
    let mut parts: Vec<(u64, Cow<'_, [u8]>)> = Vec::with_capacity(content.chunks.len());
    for (&chunk, packed) in &content.chunks {
        if chunk >= n {
            return Err(ZarrError::IndexOutOfRange { index: chunk, len: n });
        }
        let part = match (packed, rest.is_empty()) {
            (Packed::Bytes(b), true) => Cow::Borrowed(b.as_ref()),
            (Packed::Nested(sub), false) => match pack(sub, rest)? {
                Some(v) => Cow::Owned(v),
                None => continue,
            },
            (Packed::Bytes(_), false) => return Err(kind_mismatch(chunk, "encoded bytes", "a sub-shard")),
            (Packed::Nested(_), true) => return Err(kind_mismatch(chunk, "a sub-shard", "encoded bytes")),
        };
        parts.push((chunk, part));
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let sizes: Vec<(u64, u64)> = parts.iter().map(|(chunk, part)| (*chunk, part.len() as u64)).collect();
    let (index, total) = packed_layout(&sizes, level)?;
    let total = usize::try_from(total).map_err(|_| ZarrError::overflow("packed shard size"))?;
    let encoded_index = index.encode(level.index_codec);
    let mut out = Vec::with_capacity(total);
    if level.index_location == IndexLocation::Start {
        out.extend_from_slice(&encoded_index);
    }
    for (_, part) in &parts {
        out.extend_from_slice(part);
    }
    if level.index_location == IndexLocation::End {
        out.extend_from_slice(&encoded_index);
    }
    Ok(Some(out))
}

/// Where [`pack`] puts chunks of these sizes (`(chunk index, nbytes)`, ascending) at one level:
/// the shard's index and its total size. Lets a caller know what a packed shard will be (its
/// size, its index) before it has the chunks' bytes.
pub fn packed_layout(sizes: &[(u64, u64)], level: &ShardLevel) -> Result<(ShardIndex, u64), ZarrError> {
    let n = level.num_chunks();
    let index_size = ShardIndex::encoded_size(n, level.index_codec)?;
    let mut index = ShardIndex::empty(n)?;
    let mut pos = level.data_start();
    for &(chunk, nbytes) in sizes {
        index.set(chunk, Some(ChunkRange { offset: pos, nbytes }))?;
        pos = pos
            .checked_add(nbytes)
            .ok_or_else(|| ZarrError::overflow("packed shard size"))?;
    }
    let total = match level.index_location {
        IndexLocation::Start => Some(pos),
        IndexLocation::End => pos.checked_add(index_size),
    }
    .ok_or_else(|| ZarrError::overflow("packed shard size"))?;
    Ok((index, total))
}

impl ShardContent {
    /// Set (`Some`) or remove (`None`) the innermost chunk reached by
    /// `per_level_index` (one index per level, outermost first, as
    /// `InnerLocation::per_level_index`). Missing sub-shards are created;
    /// removing the last chunk of a nested sub-shard removes the sub-shard.
    /// Removing an absent chunk is a no-op.
    ///
    /// Errors, leaving `self` unchanged, on an empty path or when the path
    /// disagrees with the nesting already present (it reaches bytes where a
    /// sub-shard is needed or vice versa). Chunk indexes are not checked
    /// against the levels here — see [`set_checked`](Self::set_checked);
    /// [`pack`] rejects out-of-range ones.
    pub fn set(&mut self, per_level_index: &[u64], bytes: Option<Bytes>) -> Result<(), ZarrError> {
        let Some((&chunk, rest)) = per_level_index.split_first() else {
            return Err(ZarrError::invalid("per_level_index", "must not be empty"));
        };
        let want_nested = !rest.is_empty();
        // Entries of one level are all bytes or all sub-shards; check against
        // a sibling so a wrong path depth cannot mix them.
        let sibling = self.chunks.get(&chunk).or_else(|| self.chunks.values().next());
        if let Some(p) = sibling {
            match (p, want_nested) {
                (Packed::Bytes(_), true) => return Err(kind_mismatch(chunk, "encoded bytes", "a sub-shard")),
                (Packed::Nested(_), false) => return Err(kind_mismatch(chunk, "a sub-shard", "encoded bytes")),
                _ => {}
            }
        }
        if !want_nested {
            match bytes {
                Some(b) => self.chunks.insert(chunk, Packed::Bytes(b)),
                None => self.chunks.remove(&chunk),
            };
            return Ok(());
        }
        if bytes.is_none() && !self.chunks.contains_key(&chunk) {
            return Ok(());
        }
        let entry = self
            .chunks
            .entry(chunk)
            .or_insert_with(|| Packed::Nested(ShardContent::default()));
        match entry {
            Packed::Nested(sub) => {
                let r = sub.set(rest, bytes);
                if sub.is_empty() {
                    self.chunks.remove(&chunk);
                }
                r
            }
            // Excluded by the sibling check above.
            Packed::Bytes(_) => Err(kind_mismatch(chunk, "encoded bytes", "a sub-shard")),
        }
    }

    /// [`set`](Self::set), first checking that `per_level_index` has one
    /// index per level and each is below that level's `num_chunks`
    /// (`IndexOutOfRange` otherwise).
    pub fn set_checked(
        &mut self,
        levels: &[ShardLevel],
        per_level_index: &[u64],
        bytes: Option<Bytes>,
    ) -> Result<(), ZarrError> {
        if levels.is_empty() {
            return Err(no_levels());
        }
        if per_level_index.len() != levels.len() {
            return Err(ZarrError::invalid(
                "per_level_index",
                format!(
                    "has {} indexes for {} sharding levels",
                    per_level_index.len(),
                    levels.len()
                ),
            ));
        }
        for (&index, level) in per_level_index.iter().zip(levels) {
            let len = level.num_chunks();
            if index >= len {
                return Err(ZarrError::IndexOutOfRange { index, len });
            }
        }
        self.set(per_level_index, bytes)
    }

    /// The innermost chunk reached by `per_level_index`, if present.
    pub fn get(&self, per_level_index: &[u64]) -> Option<&Bytes> {
        let (chunk, rest) = per_level_index.split_first()?;
        match (self.chunks.get(chunk)?, rest.is_empty()) {
            (Packed::Bytes(b), true) => Some(b),
            (Packed::Nested(sub), false) => sub.get(rest),
            _ => None,
        }
    }

    /// True when no innermost chunk is present (empty sub-shards, which
    /// `set` and `unpack` never leave behind, do not count).
    pub fn is_empty(&self) -> bool {
        self.chunks.values().all(|p| match p {
            Packed::Bytes(_) => false,
            Packed::Nested(sub) => sub.is_empty(),
        })
    }

    /// Number of innermost chunks present.
    pub fn count(&self) -> u64 {
        self.chunks
            .values()
            .map(|p| match p {
                Packed::Bytes(_) => 1,
                Packed::Nested(sub) => sub.count(),
            })
            .fold(0u64, u64::saturating_add)
    }
}

fn no_levels() -> ZarrError {
    ZarrError::invalid("sharding levels", "at least one level is required")
}

fn kind_mismatch(chunk: u64, found: &str, expected: &str) -> ZarrError {
    ZarrError::invalid(
        "shard content",
        format!("chunk {chunk} holds {found} where the sharding levels need {expected}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::sharding::{Endian, IndexCodec};
    use proptest::prelude::*;

    const EMPTY: u64 = u64::MAX;

    fn codec(endian: Endian, crc32c: bool) -> IndexCodec {
        IndexCodec { endian, crc32c }
    }

    /// A level with the given chunks per shard (shapes only matter through
    /// `num_chunks` here).
    fn level(chunks_per_shard: &[u64], index_codec: IndexCodec, index_location: IndexLocation) -> ShardLevel {
        ShardLevel {
            shard_shape: chunks_per_shard.to_vec(),
            chunk_shape: vec![1; chunks_per_shard.len()],
            chunks_per_shard: chunks_per_shard.to_vec(),
            index_codec,
            index_location,
            index_order: None,
        }
    }

    fn le_crc() -> IndexCodec {
        codec(Endian::Little, true)
    }

    /// Index bytes built by hand (independent of `ShardIndex::encode`).
    fn manual_index(entries: &[(u64, u64)], c: IndexCodec) -> Vec<u8> {
        let mut out = Vec::new();
        for &(o, n) in entries {
            for v in [o, n] {
                out.extend_from_slice(&match c.endian {
                    Endian::Little => v.to_le_bytes(),
                    Endian::Big => v.to_be_bytes(),
                });
            }
        }
        if c.crc32c {
            out.extend_from_slice(&crc32c::crc32c(&out).to_le_bytes());
        }
        out
    }

    fn index_of(entries: &[Option<(u64, u64)>]) -> ShardIndex {
        let mut idx = ShardIndex::empty(entries.len() as u64).unwrap();
        for (i, e) in (0u64..).zip(entries) {
            idx.set(i, e.map(|(offset, nbytes)| ChunkRange { offset, nbytes }))
                .unwrap();
        }
        idx
    }

    fn content(entries: &[(&[u64], &[u8])]) -> ShardContent {
        let mut c = ShardContent::default();
        for (path, b) in entries {
            c.set(path, Some(Bytes::copy_from_slice(b))).unwrap();
        }
        c
    }

    #[test]
    fn pack_byte_exact_index_at_end() {
        let l = [level(&[2, 2], le_crc(), IndexLocation::End)];
        let c = content(&[(&[0], b"abc"), (&[2], b""), (&[3], b"xy")]);
        let out = pack(&c, &l).unwrap().unwrap();
        let mut expected = b"abcxy".to_vec();
        // (0,3) (empty) (3,0) (3,2), little endian, then the crc32c (LE).
        let entries: [u64; 8] = [0, 3, EMPTY, EMPTY, 3, 0, 3, 2];
        let mut idx = Vec::new();
        for v in entries {
            idx.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(idx.len(), 64);
        let crc = crc32c::crc32c(&idx);
        assert_eq!(
            crc, 0x804e_8694,
            "crc32c of the hand-built entries (checked with an independent bitwise CRC-32C)"
        );
        expected.extend_from_slice(&idx);
        expected.extend_from_slice(&[0x94, 0x86, 0x4e, 0x80]);
        assert_eq!(out.len(), 5 + 68);
        assert_eq!(out, expected);
        assert_eq!(unpack(&out, &l).unwrap(), c);
    }

    #[test]
    fn pack_byte_exact_index_at_start() {
        let l = [level(&[4], codec(Endian::Big, true), IndexLocation::Start)];
        let c = content(&[(&[3], b"xy"), (&[0], b"abc"), (&[2], b"")]);
        let out = pack(&c, &l).unwrap().unwrap();
        // Offsets start after the 68-byte index.
        let entries: [u64; 8] = [68, 3, EMPTY, EMPTY, 71, 0, 71, 2];
        let mut expected = Vec::new();
        for v in entries {
            expected.extend_from_slice(&v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&expected);
        assert_eq!(
            crc, 0xfad8_c301,
            "crc32c of the hand-built entries (checked with an independent bitwise CRC-32C)"
        );
        // The checksum is little endian even with big-endian entries.
        expected.extend_from_slice(&[0x01, 0xc3, 0xd8, 0xfa]);
        expected.extend_from_slice(b"abcxy");
        assert_eq!(out, expected);
        assert_eq!(unpack(&out, &l).unwrap(), c);

        // Without crc: 64-byte index, offsets from 64.
        let l = [level(&[4], codec(Endian::Little, false), IndexLocation::Start)];
        let out = pack(&c, &l).unwrap().unwrap();
        let mut expected = manual_index(&[(64, 3), (EMPTY, EMPTY), (67, 0), (67, 2)], l[0].index_codec);
        expected.extend_from_slice(b"abcxy");
        assert_eq!(out, expected);
    }

    #[test]
    fn pack_nested_byte_exact() {
        let inner = level(&[2], codec(Endian::Little, false), IndexLocation::End);
        let outer = level(&[2], codec(Endian::Little, false), IndexLocation::Start);
        let l = [outer, inner];
        let c = content(&[(&[1, 0], b"q"), (&[1, 1], b"rs")]);
        let out = pack(&c, &l).unwrap().unwrap();
        let mut sub = b"qrs".to_vec();
        sub.extend(manual_index(&[(0, 1), (1, 2)], l[1].index_codec));
        let mut expected = manual_index(&[(EMPTY, EMPTY), (32, sub.len() as u64)], l[0].index_codec);
        expected.extend_from_slice(&sub);
        assert_eq!(out, expected);
        assert_eq!(unpack(&out, &l).unwrap(), c);
    }

    #[test]
    fn pack_empty_is_none() {
        let l1 = [level(&[4], le_crc(), IndexLocation::End)];
        assert_eq!(pack(&ShardContent::default(), &l1).unwrap(), None);
        let l2 = [l1[0].clone(), level(&[3], le_crc(), IndexLocation::Start)];
        assert_eq!(pack(&ShardContent::default(), &l2).unwrap(), None);
        // Only empty sub-shards (built by hand): still nothing to store.
        let mut c = ShardContent::default();
        c.chunks.insert(1, Packed::Nested(ShardContent::default()));
        c.chunks.insert(2, Packed::Nested(ShardContent::default()));
        assert!(c.is_empty());
        assert_eq!(c.count(), 0);
        assert_eq!(pack(&c, &l2).unwrap(), None);
        // An empty sub-shard next to a real one gets an empty entry.
        c.set(&[3, 0], Some(Bytes::from_static(b"z"))).unwrap();
        let out = pack(&c, &l2).unwrap().unwrap();
        let back = unpack(&out, &l2).unwrap();
        assert_eq!(back.chunks.keys().copied().collect::<Vec<_>>(), vec![3]);
        assert_eq!(back.get(&[3, 0]).unwrap().as_ref(), b"z");
    }

    #[test]
    fn pack_rejects_bad_content() {
        let l1 = [level(&[4], le_crc(), IndexLocation::End)];
        let l2 = [l1[0].clone(), level(&[2], le_crc(), IndexLocation::End)];
        assert_eq!(
            pack(&content(&[(&[4], b"a")]), &l1),
            Err(ZarrError::IndexOutOfRange { index: 4, len: 4 })
        );
        assert_eq!(
            pack(&content(&[(&[0, 2], b"a")]), &l2),
            Err(ZarrError::IndexOutOfRange { index: 2, len: 2 })
        );
        assert!(pack(&content(&[(&[0], b"a")]), &l2).is_err());
        assert!(pack(&content(&[(&[0, 1], b"a")]), &l1).is_err());
        assert!(pack(&content(&[(&[0], b"a")]), &[]).is_err());
        assert!(unpack(b"", &[]).is_err());
    }

    #[test]
    fn unpack_hand_made_shard() {
        // Chunks out of order, with unused bytes between them, index at end.
        for c in [
            codec(Endian::Little, true),
            codec(Endian::Big, false),
            codec(Endian::Big, true),
        ] {
            let l = [level(&[2, 3], c, IndexLocation::End)];
            let data = b"..second..first!zz".to_vec();
            let idx = index_of(&[
                Some((10, 6)), // "first!"
                None,
                Some((2, 6)), // "second"
                Some((16, 0)),
                None,
                Some((0, 18)), // everything, overlapping the others
            ]);
            let mut shard = data.clone();
            shard.extend(idx.encode(c));
            let got = unpack(&shard, &l).unwrap();
            assert_eq!(got.count(), 4);
            assert_eq!(got.get(&[0]).unwrap().as_ref(), b"first!");
            assert_eq!(got.get(&[1]), None);
            assert_eq!(got.get(&[2]).unwrap().as_ref(), b"second");
            assert_eq!(got.get(&[3]).unwrap().as_ref(), b"");
            assert_eq!(got.get(&[5]).unwrap().as_ref(), &data[..]);
            assert_eq!(got.get(&[6]), None);
            assert_eq!(got.get(&[0, 0]), None);
            // Repacking is tight and in chunk order.
            let repacked = pack(&got, &l).unwrap().unwrap();
            assert_eq!(&repacked[..12], b"first!second");
            assert_eq!(repacked.len(), 6 + 6 + 18 + l[0].index_size() as usize);
            assert_eq!(unpack(&repacked, &l).unwrap(), got);
        }

        // Index at start: offsets are absolute, past the index.
        let c = codec(Endian::Little, false);
        let l = [level(&[2], c, IndexLocation::Start)];
        let mut shard = index_of(&[Some((36, 2)), Some((32, 3))]).encode(c);
        shard.extend_from_slice(b"bbb#aa");
        assert_eq!(shard.len(), 38);
        let got = unpack(&shard, &l).unwrap();
        assert_eq!(got.get(&[0]).unwrap().as_ref(), b"aa");
        assert_eq!(got.get(&[1]).unwrap().as_ref(), b"bbb");
        // An entry pointing into the start index is rejected, even zero-length.
        for bad in [(0, 2), (31, 1), (10, 0)] {
            let mut shard = index_of(&[Some(bad), None]).encode(c);
            shard.extend_from_slice(b"bbb#aa");
            assert!(unpack(&shard, &l).is_err(), "{bad:?}");
        }
        // With the index at the end, an entry may not reach into it.
        let l = [level(&[1], c, IndexLocation::End)];
        let mut shard = b"abcd".to_vec();
        shard.extend(index_of(&[Some((2, 3))]).encode(c));
        assert!(matches!(unpack(&shard, &l), Err(ZarrError::OutOfBounds { .. })));
    }

    #[test]
    fn unpack_hand_made_nested_shard() {
        let c = codec(Endian::Little, true);
        let inner = level(&[3], c, IndexLocation::Start);
        let outer = level(&[2], c, IndexLocation::End);
        let l = [outer, inner];
        // Sub-shard A: chunk 2 = "hello"; sub-shard B: no chunk at all.
        let mut a = index_of(&[None, None, Some((52, 5))]).encode(c);
        a.extend_from_slice(b"hello");
        let b = index_of(&[None, None, None]).encode(c);
        let mut shard = b.clone();
        shard.extend_from_slice(&a);
        let (b_len, a_len) = (b.len() as u64, a.len() as u64);
        shard.extend(index_of(&[Some((b_len, a_len)), Some((0, b_len))]).encode(c));
        let got = unpack(&shard, &l).unwrap();
        assert_eq!(got.count(), 1);
        assert_eq!(got.get(&[0, 2]).unwrap().as_ref(), b"hello");
        // The empty sub-shard is dropped.
        assert_eq!(got.chunks.len(), 1);
        // Sub-shard offsets are relative to the sub-shard: 0 would point into its index.
        let mut a_bad = index_of(&[None, None, Some((0, 5))]).encode(c);
        a_bad.extend_from_slice(b"hello");
        let mut shard = a_bad.clone();
        shard.extend(index_of(&[Some((0, a_bad.len() as u64)), None]).encode(c));
        assert!(unpack(&shard, &l).is_err());
        // A sub-shard too short for its index.
        let mut shard = b"xyz".to_vec();
        shard.extend(index_of(&[Some((0, 3)), None]).encode(c));
        assert!(matches!(unpack(&shard, &l), Err(ZarrError::Length { .. })));
    }

    #[test]
    fn repeated_sub_shard_entries_are_bounded() {
        // Every outer entry points at the same sub-shard: decoding work would
        // be (outer entries) x (inner entries); the budget stops it.
        let c = codec(Endian::Little, false);
        let inner = level(&[64], c, IndexLocation::End);
        let outer = level(&[64], c, IndexLocation::End);
        let l = [outer, inner];
        let mut sub = b"x".to_vec();
        sub.extend(index_of(&[Some((0, 1)); 64]).encode(c));
        let sub_len = sub.len() as u64;
        let mut shard = sub.clone();
        shard.extend(index_of(&[Some((0, sub_len)); 64]).encode(c));
        assert!(matches!(unpack(&shard, &l), Err(ZarrError::TooLarge { .. })));
        // Two entries sharing it are within the budget (and cost no copies).
        let mut shard = sub;
        let mut entries = [None; 64];
        entries[0] = Some((0, sub_len));
        entries[9] = Some((0, sub_len));
        shard.extend(index_of(&entries).encode(c));
        let got = unpack(&shard, &l).unwrap();
        assert_eq!(got.count(), 128);
        let shared = Bytes::from(shard);
        let got = unpack_shared(&shared, &l).unwrap();
        assert_eq!(got.get(&[9, 63]).unwrap().as_ptr(), shared.as_ptr());
    }

    #[test]
    fn unpack_rejects_crc_mismatch_and_truncation() {
        let l = [level(&[2, 2], le_crc(), IndexLocation::End)];
        let c = content(&[(&[0], b"abc"), (&[3], b"xy")]);
        let good = pack(&c, &l).unwrap().unwrap();
        // Any flipped bit in the index (entries or crc) is a checksum error.
        for i in 5..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert!(matches!(unpack(&bad, &l), Err(ZarrError::Checksum { .. })), "byte {i}");
        }
        for len in 0..good.len() {
            assert!(unpack(&good[..len], &l).is_err(), "truncated to {len}");
        }
        let ls = [level(&[2, 2], le_crc(), IndexLocation::Start)];
        let good = pack(&c, &ls).unwrap().unwrap();
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert!(matches!(unpack(&bad, &ls), Err(ZarrError::Checksum { .. })));
        // Truncating the data after a start index: chunks out of bounds.
        assert!(matches!(
            unpack(&good[..good.len() - 1], &ls),
            Err(ZarrError::OutOfBounds { .. })
        ));
        assert!(unpack(&[], &ls).is_err());
    }

    #[test]
    fn set_get_remove_nested() {
        let mut c = ShardContent::default();
        assert!(c.is_empty());
        c.set(&[1, 2], Some(Bytes::from_static(b"a"))).unwrap();
        c.set(&[1, 3], Some(Bytes::from_static(b"b"))).unwrap();
        c.set(&[0, 0], Some(Bytes::from_static(b""))).unwrap();
        assert_eq!(c.count(), 3);
        assert_eq!(c.get(&[1, 2]).unwrap().as_ref(), b"a");
        assert_eq!(c.get(&[0, 0]).unwrap().as_ref(), b"");
        assert_eq!(c.get(&[1]), None);
        assert_eq!(c.get(&[1, 2, 0]), None);
        assert_eq!(c.get(&[]), None);
        // Overwrite.
        c.set(&[1, 2], Some(Bytes::from_static(b"A"))).unwrap();
        assert_eq!(c.get(&[1, 2]).unwrap().as_ref(), b"A");
        assert_eq!(c.count(), 3);
        // Removing absent chunks is a no-op and creates nothing.
        let before = c.clone();
        c.set(&[5, 0], None).unwrap();
        c.set(&[1, 0], None).unwrap();
        assert_eq!(c, before);
        // Wrong depth for the existing nesting: error, unchanged.
        assert!(c.set(&[1], Some(Bytes::from_static(b"x"))).is_err());
        assert!(c.set(&[7], Some(Bytes::from_static(b"x"))).is_err());
        assert!(c.set(&[1], None).is_err());
        assert!(c.set(&[1, 2, 0], Some(Bytes::from_static(b"x"))).is_err());
        assert!(c.set(&[], None).is_err());
        assert_eq!(c, before);
        // Removing the last chunk of a sub-shard drops it.
        c.set(&[1, 2], None).unwrap();
        assert!(c.chunks.contains_key(&1));
        c.set(&[1, 3], None).unwrap();
        assert!(!c.chunks.contains_key(&1));
        assert_eq!(c.count(), 1);
        c.set(&[0, 0], None).unwrap();
        assert!(c.chunks.is_empty());
        assert!(c.is_empty());
        assert_eq!(c, ShardContent::default());
        // Three levels deep.
        c.set(&[1, 1, 1], Some(Bytes::from_static(b"d"))).unwrap();
        c.set(&[1, 1, 1], None).unwrap();
        assert_eq!(c, ShardContent::default());
    }

    #[test]
    fn set_checked_validates_against_levels() {
        let l = [
            level(&[2, 2], le_crc(), IndexLocation::End),
            level(&[3], le_crc(), IndexLocation::End),
        ];
        let mut c = ShardContent::default();
        let b = || Some(Bytes::from_static(b"x"));
        c.set_checked(&l, &[3, 2], b()).unwrap();
        assert_eq!(
            c.set_checked(&l, &[4, 0], b()),
            Err(ZarrError::IndexOutOfRange { index: 4, len: 4 })
        );
        assert_eq!(
            c.set_checked(&l, &[0, 3], None),
            Err(ZarrError::IndexOutOfRange { index: 3, len: 3 })
        );
        assert!(c.set_checked(&l, &[0], b()).is_err());
        assert!(c.set_checked(&l, &[0, 0, 0], b()).is_err());
        assert!(c.set_checked(&[], &[], b()).is_err());
        assert_eq!(c.count(), 1);
    }

    #[test]
    fn with_real_layout_and_locate() {
        use crate::zarr::sharding::tests::{array_meta, bytes_zstd, sharding};
        use crate::zarr::sharding::{analyse, Sharding};
        use serde_json::json;
        let inner = sharding(json!([2, 5]), bytes_zstd());
        let mid = sharding(json!([10, 10]), json!([inner]));
        let Sharding::Sharded(layout) = analyse(&array_meta(json!([100, 95]), json!([50, 50]), json!([mid]))) else {
            panic!()
        };
        let mut c = ShardContent::default();
        let mut expected = Vec::new();
        for (i, coords) in [[0u64, 0], [4, 1], [24, 9], [13, 7]].iter().enumerate() {
            let loc = layout.locate(coords).unwrap();
            assert_eq!(loc.shard_coords, vec![0, 0]);
            let b = Bytes::from(vec![i as u8; i * 7]);
            c.set_checked(&layout.levels, &loc.per_level_index, Some(b.clone()))
                .unwrap();
            expected.push((loc.per_level_index, b));
        }
        let shard = pack(&c, &layout.levels).unwrap().unwrap();
        let back = unpack(&shard, &layout.levels).unwrap();
        assert_eq!(back, c);
        for (path, b) in &expected {
            assert_eq!(back.get(path), Some(b));
        }
    }

    /// Check `shard` against the read path: decode each index region with
    /// `ShardIndex::decode` exactly as the shard layer does and compare every
    /// entry's bytes with `content`.
    fn cross_check(shard: &[u8], levels: &[ShardLevel], content: &ShardContent) -> Result<(), TestCaseError> {
        let (level, rest) = levels.split_first().unwrap();
        let len = shard.len() as u64;
        let index_size = level.index_size();
        let index_offset = level.index_offset(len).unwrap();
        let data_len = match level.index_location {
            IndexLocation::End => len - index_size,
            IndexLocation::Start => len,
        };
        let region = &shard[index_offset as usize..(index_offset + index_size) as usize];
        let idx = ShardIndex::decode(region, level.num_chunks(), level.index_codec, data_len).unwrap();
        prop_assert_eq!(idx.count_present(), content.chunks.len() as u64);
        let mut next = if level.index_location == IndexLocation::Start {
            index_size
        } else {
            0
        };
        for (chunk, range) in idx.iter() {
            let Some(r) = range else {
                prop_assert!(!content.chunks.contains_key(&chunk));
                continue;
            };
            // Tight, ascending layout.
            prop_assert_eq!(r.offset, next);
            next = r.end().unwrap();
            let bytes = &shard[r.offset as usize..r.end().unwrap() as usize];
            match content.chunks.get(&chunk) {
                Some(Packed::Bytes(b)) => prop_assert_eq!(bytes, b.as_ref()),
                Some(Packed::Nested(sub)) => cross_check(bytes, rest, sub)?,
                None => prop_assert!(false, "entry {chunk} not in content"),
            }
        }
        prop_assert_eq!(
            next + if level.index_location == IndexLocation::End {
                index_size
            } else {
                0
            },
            len
        );
        Ok(())
    }

    fn arb_level() -> impl Strategy<Value = ShardLevel> {
        (
            proptest::collection::vec(1u64..4, 1..3),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(cps, big, crc32c, start)| {
                let endian = if big { Endian::Big } else { Endian::Little };
                let loc = if start {
                    IndexLocation::Start
                } else {
                    IndexLocation::End
                };
                level(&cps, IndexCodec { endian, crc32c }, loc)
            })
    }

    fn arb_levels() -> impl Strategy<Value = Vec<ShardLevel>> {
        proptest::collection::vec(arb_level(), 1..=2)
    }

    proptest! {
        #[test]
        fn pack_unpack_round_trip(
            levels in arb_levels(),
            writes in proptest::collection::vec(
                (proptest::collection::vec(any::<u64>(), 2), proptest::option::weighted(0.8, proptest::collection::vec(any::<u8>(), 0..24))),
                0..40,
            ),
        ) {
            let mut c = ShardContent::default();
            let mut model = BTreeMap::new();
            for (raw, bytes) in writes {
                let path: Vec<u64> = levels.iter().zip(&raw).map(|(l, r)| r % l.num_chunks()).collect();
                c.set_checked(&levels, &path, bytes.clone().map(Bytes::from)).unwrap();
                match bytes {
                    Some(b) => model.insert(path, b),
                    None => model.remove(&path),
                };
            }
            prop_assert_eq!(c.count(), model.len() as u64);
            prop_assert_eq!(c.is_empty(), model.is_empty());
            for (path, b) in &model {
                prop_assert_eq!(c.get(path).map(|b| b.as_ref()), Some(b.as_slice()));
            }
            match pack(&c, &levels).unwrap() {
                None => prop_assert!(model.is_empty()),
                Some(shard) => {
                    prop_assert!(!model.is_empty());
                    let back = unpack(&shard, &levels).unwrap();
                    prop_assert_eq!(&back, &c);
                    cross_check(&shard, &levels, &c)?;
                    // Packing is deterministic and stable under repacking.
                    prop_assert_eq!(pack(&back, &levels).unwrap(), Some(shard));
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            levels in arb_levels(),
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            if let Ok(c) = unpack(&bytes, &levels) {
                // Whatever decodes re-encodes and decodes to the same content.
                let repacked = pack(&c, &levels).unwrap();
                match repacked {
                    None => prop_assert!(c.is_empty()),
                    Some(s) => prop_assert_eq!(unpack(&s, &levels).unwrap(), c),
                }
            }
        }

        #[test]
        fn corrupted_shards_never_panic(
            levels in arb_levels(),
            writes in proptest::collection::vec((any::<u64>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..16)), 1..12),
            flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..4),
            cut in any::<usize>(),
            truncate: bool,
        ) {
            let mut c = ShardContent::default();
            for (a, b, bytes) in writes {
                let path = [a % levels[0].num_chunks(), b % levels.last().unwrap().num_chunks()];
                c.set(&path[2 - levels.len()..], Some(Bytes::from(bytes))).unwrap();
            }
            let mut shard = pack(&c, &levels).unwrap().unwrap();
            if flips.is_empty() && !truncate {
                prop_assert_eq!(unpack(&shard, &levels).unwrap(), c);
            }
            for (at, x) in flips {
                let i = at % shard.len();
                shard[i] ^= x;
            }
            if truncate {
                shard.truncate(cut % shard.len());
            }
            let _ = unpack(&shard, &levels);
        }
    }
}
