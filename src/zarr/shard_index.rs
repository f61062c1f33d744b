//! The binary shard index of the `sharding_indexed` codec.
//!
//! An index is `n` pairs of `u64` (`offset`, `nbytes`), one per inner chunk in
//! C order, encoded by the `bytes` codec in little or big endian and optionally
//! followed by a CRC32C of those `16 * n` bytes, stored little endian (the
//! `crc32c` codec). The pair (2^64-1, 2^64-1) marks an empty chunk.
//!
//! Decoding verifies the length, the checksum and that every present chunk
//! lies inside the shard (or nested sub-shard) the index belongs to, so that
//! later reads can slice without further checks. Entries are kept as
//! `Option<ChunkRange>`, which makes the empty sentinel impossible to misuse.

use crate::zarr::sharding::{Endian, IndexCodec};
use crate::zarr::ZarrError;

/// Largest number of chunks per shard accepted when building an index in
/// memory (64 Mi chunks = a 1 GiB index); protects against absurd metadata.
pub const MAX_CHUNKS_PER_SHARD: u64 = 1 << 26;

const EMPTY: u64 = u64::MAX;
const ENTRY_BYTES: u64 = 16;
const CRC_BYTES: u64 = 4;

/// Where an inner chunk's encoded bytes lie, relative to the start of the
/// shard (or sub-shard) that holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRange {
    pub offset: u64,
    pub nbytes: u64,
}

impl ChunkRange {
    /// One past the last byte, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.nbytes)
    }
}

/// A decoded shard index: one optional range per inner chunk, in C order.
///
/// Kept as the pairs the format stores, an empty chunk as the format's sentinel (both words
/// all ones, which no range `set` accepts can be): 16 bytes a chunk, where `Option` would
/// take 24. Indexes are what a mount of millions of chunks holds most of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    entries: Vec<ChunkRange>,
}

/// The entry of an empty chunk.
const ABSENT: ChunkRange = ChunkRange {
    offset: EMPTY,
    nbytes: EMPTY,
};

fn present(entry: ChunkRange) -> Option<ChunkRange> {
    (entry != ABSENT).then_some(entry)
}

impl ShardIndex {
    /// An index with `num_chunks` empty entries.
    pub fn empty(num_chunks: u64) -> Result<Self, ZarrError> {
        if num_chunks > MAX_CHUNKS_PER_SHARD {
            return Err(ZarrError::TooLarge {
                what: "chunks per shard",
                value: num_chunks,
                limit: MAX_CHUNKS_PER_SHARD,
            });
        }
        let n = usize::try_from(num_chunks).map_err(|_| ZarrError::overflow("number of chunks as usize"))?;
        Ok(ShardIndex {
            entries: vec![ABSENT; n],
        })
    }

    pub fn num_chunks(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Encoded size: `16 * n`, plus 4 with crc32c.
    pub fn encoded_size(num_chunks: u64, codec: IndexCodec) -> Result<u64, ZarrError> {
        num_chunks
            .checked_mul(ENTRY_BYTES)
            .and_then(|s| s.checked_add(if codec.crc32c { CRC_BYTES } else { 0 }))
            .ok_or_else(|| ZarrError::overflow(format!("index size for {num_chunks} chunks")))
    }

    /// Decode and verify an index of `num_chunks` entries for a shard (or
    /// sub-shard) of `data_len` bytes.
    pub fn decode(bytes: &[u8], num_chunks: u64, codec: IndexCodec, data_len: u64) -> Result<Self, ZarrError> {
        let expected = Self::encoded_size(num_chunks, codec)?;
        if bytes.len() as u64 != expected {
            return Err(ZarrError::Length {
                what: "shard index",
                expected,
                actual: bytes.len() as u64,
            });
        }
        let length_error = ZarrError::Length {
            what: "shard index",
            expected,
            actual: bytes.len() as u64,
        };
        let entry_len = num_chunks
            .checked_mul(ENTRY_BYTES)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| ZarrError::overflow("index size as usize"))?;
        let (entry_bytes, crc_bytes) = bytes.split_at_checked(entry_len).ok_or(length_error)?;
        if codec.crc32c {
            let stored = crc_bytes
                .first_chunk::<4>()
                .map(|b| u32::from_le_bytes(*b))
                .ok_or(ZarrError::Length {
                    what: "shard index checksum",
                    expected: CRC_BYTES,
                    actual: crc_bytes.len() as u64,
                })?;
            let computed = crc32c::crc32c(entry_bytes);
            if stored != computed {
                return Err(ZarrError::Checksum { stored, computed });
            }
        }
        // Whole 8-byte words, grouped as (offset, nbytes) pairs; the length
        // check above guarantees there is no remainder.
        let (words, _) = entry_bytes.as_chunks::<8>();
        let (pairs, _) = words.as_chunks::<2>();
        let entries = (0u64..)
            .zip(pairs)
            .map(|(chunk, [offset, nbytes])| {
                let read = |w: &[u8; 8]| match codec.endian {
                    Endian::Little => u64::from_le_bytes(*w),
                    Endian::Big => u64::from_be_bytes(*w),
                };
                decode_entry(chunk, read(offset), read(nbytes), data_len)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShardIndex { entries })
    }

    /// Encode in the given codec (entries, then the crc32c if enabled).
    pub fn encode(&self, codec: IndexCodec) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len().saturating_mul(16).saturating_add(4));
        for entry in &self.entries {
            for v in [entry.offset, entry.nbytes] {
                out.extend_from_slice(&match codec.endian {
                    Endian::Little => v.to_le_bytes(),
                    Endian::Big => v.to_be_bytes(),
                });
            }
        }
        if codec.crc32c {
            let crc = crc32c::crc32c(&out);
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out
    }

    /// The range of `chunk`; `None` when it is empty or out of range.
    pub fn get(&self, chunk: u64) -> Option<ChunkRange> {
        let i = usize::try_from(chunk).ok()?;
        self.entries.get(i).copied().and_then(present)
    }

    /// Set or clear (`None`) the range of `chunk`. A range that would encode
    /// as the empty sentinel or whose end overflows `u64` is rejected.
    pub fn set(&mut self, chunk: u64, range: Option<ChunkRange>) -> Result<(), ZarrError> {
        let len = self.num_chunks();
        let slot = usize::try_from(chunk)
            .ok()
            .and_then(|i| self.entries.get_mut(i))
            .ok_or(ZarrError::IndexOutOfRange { index: chunk, len })?;
        if let Some(r) = range {
            if r.end().is_none() {
                return Err(ZarrError::OutOfBounds {
                    chunk,
                    offset: r.offset,
                    nbytes: r.nbytes,
                    data_len: u64::MAX,
                });
            }
        }
        *slot = range.unwrap_or(ABSENT);
        Ok(())
    }

    /// All entries in C order with their chunk index.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Option<ChunkRange>)> + '_ {
        (0u64..).zip(self.entries.iter().map(|e| present(*e)))
    }

    /// Number of non-empty entries.
    pub fn count_present(&self) -> u64 {
        self.entries.iter().filter(|e| **e != ABSENT).count() as u64
    }
}

/// Interpret one (offset, nbytes) pair of the chunk with C-order index `chunk`.
fn decode_entry(chunk: u64, offset: u64, nbytes: u64, data_len: u64) -> Result<ChunkRange, ZarrError> {
    if offset == EMPTY && nbytes == EMPTY {
        return Ok(ABSENT);
    }
    match offset.checked_add(nbytes) {
        Some(end) if end <= data_len => Ok(ChunkRange { offset, nbytes }),
        _ => Err(ZarrError::OutOfBounds {
            chunk,
            offset,
            nbytes,
            data_len,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_chunk_takes_the_16_bytes_it_is_stored_in() {
        // What the index cache counts per chunk (`shard/index_cache.rs`): the bound on a
        // mount's memory at millions of chunks holds only if it is so.
        let mut index = ShardIndex::empty(1 << 16).unwrap();
        index.set(5, Some(ChunkRange { offset: 0, nbytes: 3 })).unwrap();
        assert_eq!(std::mem::size_of_val(index.entries.as_slice()), 16 << 16);
        assert_eq!(index.get(5), Some(ChunkRange { offset: 0, nbytes: 3 }));
        assert_eq!((index.get(4), index.count_present()), (None, 1));
        index.set(5, None).unwrap();
        assert_eq!((index.get(5), index.count_present()), (None, 0));
    }

    const LE_CRC: IndexCodec = IndexCodec {
        endian: Endian::Little,
        crc32c: true,
    };
    const LE: IndexCodec = IndexCodec {
        endian: Endian::Little,
        crc32c: false,
    };
    const BE_CRC: IndexCodec = IndexCodec {
        endian: Endian::Big,
        crc32c: true,
    };
    const BE: IndexCodec = IndexCodec {
        endian: Endian::Big,
        crc32c: false,
    };

    /// Hand-built index bytes, independent of `encode`.
    fn manual(entries: &[(u64, u64)], codec: IndexCodec) -> Vec<u8> {
        let mut out = Vec::new();
        for &(o, n) in entries {
            for v in [o, n] {
                match codec.endian {
                    Endian::Little => out.extend_from_slice(&v.to_le_bytes()),
                    Endian::Big => out.extend_from_slice(&v.to_be_bytes()),
                }
            }
        }
        if codec.crc32c {
            let crc = crc32c::crc32c(&out);
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out
    }

    #[test]
    fn sizes() {
        assert_eq!(ShardIndex::encoded_size(4, LE_CRC).unwrap(), 68);
        assert_eq!(ShardIndex::encoded_size(4, LE).unwrap(), 64);
        assert_eq!(ShardIndex::encoded_size(0, LE_CRC).unwrap(), 4);
        assert!(ShardIndex::encoded_size(u64::MAX / 8, LE).is_err());
        assert_eq!(ShardIndex::encoded_size(u64::MAX / 16, LE_CRC).unwrap(), u64::MAX - 11);
        assert!(ShardIndex::encoded_size(u64::MAX / 16 + 1, LE_CRC).is_err());
    }

    #[test]
    fn decode_all_codecs() {
        let entries = [(0, 10), (u64::MAX, u64::MAX), (10, 0), (90, 10)];
        for codec in [LE, LE_CRC, BE, BE_CRC] {
            let idx = ShardIndex::decode(&manual(&entries, codec), 4, codec, 100).unwrap();
            assert_eq!(idx.num_chunks(), 4);
            assert_eq!(idx.get(0), Some(ChunkRange { offset: 0, nbytes: 10 }));
            assert_eq!(idx.get(1), None);
            assert_eq!(idx.get(2), Some(ChunkRange { offset: 10, nbytes: 0 }));
            assert_eq!(idx.get(3), Some(ChunkRange { offset: 90, nbytes: 10 }));
            assert_eq!(idx.get(4), None);
            assert_eq!(idx.get(u64::MAX), None);
            assert_eq!(idx.count_present(), 3);
            assert_eq!(idx.encode(codec), manual(&entries, codec));
        }
    }

    #[test]
    fn endianness_matters() {
        let bytes = manual(&[(1, 2)], LE);
        let idx = ShardIndex::decode(&bytes, 1, BE, u64::MAX).unwrap();
        assert_eq!(
            idx.get(0),
            Some(ChunkRange {
                offset: 1 << 56,
                nbytes: 2 << 56
            })
        );
    }

    #[test]
    fn crc_known_value_and_mismatch() {
        // Standard CRC-32C check value.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let mut bytes = manual(&[(0, 10)], LE_CRC);
        assert!(ShardIndex::decode(&bytes, 1, LE_CRC, 10).is_ok());
        bytes[3] ^= 1;
        assert!(matches!(
            ShardIndex::decode(&bytes, 1, LE_CRC, u64::MAX),
            Err(ZarrError::Checksum { .. })
        ));
        let mut bytes = manual(&[(0, 10)], LE_CRC);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x80;
        assert!(matches!(
            ShardIndex::decode(&bytes, 1, LE_CRC, 10),
            Err(ZarrError::Checksum { .. })
        ));
        // The checksum is stored little endian even for big-endian entries.
        let be = manual(&[(0, 10)], BE_CRC);
        let crc = crc32c::crc32c(&be[..16]);
        assert_eq!(&be[16..], &crc.to_le_bytes());
    }

    #[test]
    fn out_of_bounds_names_the_chunk() {
        let bytes = manual(&[(0, 10), (5, 96)], LE);
        assert_eq!(
            ShardIndex::decode(&bytes, 2, LE, 100),
            Err(ZarrError::OutOfBounds {
                chunk: 1,
                offset: 5,
                nbytes: 96,
                data_len: 100
            })
        );
        assert!(ShardIndex::decode(&bytes, 2, LE, 101).is_ok());
        // Overflowing end, and a half-empty sentinel.
        for bad in [(u64::MAX - 1, 2), (u64::MAX, 0), (0, u64::MAX)] {
            let bytes = manual(&[bad], LE);
            assert!(
                matches!(
                    ShardIndex::decode(&bytes, 1, LE, 1000),
                    Err(ZarrError::OutOfBounds { chunk: 0, .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn wrong_length_is_an_error() {
        let bytes = manual(&[(0, 1), (1, 1)], LE_CRC);
        for len in [0, 1, 16, 32, 35, 33] {
            assert!(matches!(
                ShardIndex::decode(&bytes[..len], 2, LE_CRC, 100),
                Err(ZarrError::Length { .. })
            ));
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(ShardIndex::decode(&longer, 2, LE_CRC, 100).is_err());
        assert!(ShardIndex::decode(&bytes, u64::MAX, LE_CRC, 100).is_err());
    }

    #[test]
    fn empty_set_and_limits() {
        let mut idx = ShardIndex::empty(3).unwrap();
        assert_eq!(idx.count_present(), 0);
        assert_eq!(idx.encode(LE), manual(&[(u64::MAX, u64::MAX); 3], LE));
        idx.set(1, Some(ChunkRange { offset: 4, nbytes: 4 })).unwrap();
        assert_eq!(idx.count_present(), 1);
        assert_eq!(
            idx.iter().collect::<Vec<_>>(),
            vec![(0, None), (1, Some(ChunkRange { offset: 4, nbytes: 4 })), (2, None)]
        );
        idx.set(1, None).unwrap();
        assert_eq!(idx.get(1), None);
        assert_eq!(idx.set(3, None), Err(ZarrError::IndexOutOfRange { index: 3, len: 3 }));
        assert!(idx
            .set(
                0,
                Some(ChunkRange {
                    offset: u64::MAX,
                    nbytes: u64::MAX
                })
            )
            .is_err());
        assert!(idx
            .set(
                0,
                Some(ChunkRange {
                    offset: u64::MAX,
                    nbytes: 0
                })
            )
            .is_ok());
        assert!(matches!(ShardIndex::empty(u64::MAX), Err(ZarrError::TooLarge { .. })));
        assert_eq!(ShardIndex::empty(0).unwrap().encode(LE_CRC).len(), 4);
    }

    fn arb_codec() -> impl Strategy<Value = IndexCodec> {
        (any::<bool>(), any::<bool>()).prop_map(|(big, crc32c)| IndexCodec {
            endian: if big { Endian::Big } else { Endian::Little },
            crc32c,
        })
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            entries in proptest::collection::vec(proptest::option::of((0u64..1 << 40, 0u64..1 << 20)), 0..64),
            codec in arb_codec(),
        ) {
            let n = entries.len() as u64;
            let mut idx = ShardIndex::empty(n).unwrap();
            for (i, e) in (0u64..).zip(&entries) {
                idx.set(i, e.map(|(offset, nbytes)| ChunkRange { offset, nbytes })).unwrap();
            }
            let bytes = idx.encode(codec);
            prop_assert_eq!(bytes.len() as u64, ShardIndex::encoded_size(n, codec).unwrap());
            let back = ShardIndex::decode(&bytes, n, codec, 1 << 41).unwrap();
            prop_assert_eq!(&back, &idx);
            prop_assert_eq!(back.count_present(), entries.iter().filter(|e| e.is_some()).count() as u64);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            codec in arb_codec(),
            data_len: u64,
            fudge in 0u64..3,
        ) {
            // Mostly matching lengths, sometimes off by one chunk.
            let n = (bytes.len() as u64 / 16 + fudge).saturating_sub(1);
            if let Ok(idx) = ShardIndex::decode(&bytes, n, codec, data_len) {
                for (_, r) in idx.iter() {
                    if let Some(r) = r {
                        prop_assert!(r.end().is_some_and(|e| e <= data_len));
                    }
                }
            }
            let _ = ShardIndex::decode(&bytes, u64::MAX, codec, data_len);
        }
    }
}
