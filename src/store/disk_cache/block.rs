//! One cached block as a file: what it holds, and the checks that keep a torn or foreign file
//! from ever being served.
//!
//! Every integer is little-endian:
//!
//! ```text
//! magic "ZCB1" | key_len u32 | version_len u32 | block u64 | data_len u32 | key | version | data | crc32c u32
//! ```
//!
//! The CRC-32C covers everything before it. A file is written under a temporary name and
//! renamed into place, never synced: a crash can leave a file short or with garbage, which its
//! checksum then rejects. A block is served only when the key, the version and the block number
//! it records are the ones asked for (two blocks may share a file name), so a cached block of
//! another version of an object is never served for this one.

use bytes::Bytes;

const MAGIC: &[u8; 4] = b"ZCB1";
/// magic, key_len, version_len, block, data_len.
const HEADER: usize = 4 + 4 + 4 + 8 + 4;
/// Longest key or version a block records.
const MAX_NAME: usize = 64 << 10;

/// What a cached block is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockId {
    pub key: String,
    pub version: String,
    pub block: u64,
}

impl BlockId {
    /// The file it is cached in, relative to the cache's block directory: spread over 256
    /// subdirectories by a stable hash (the CRC-32C, not `std::hash`, whose output may change
    /// between builds and would strand what an earlier build cached).
    pub fn file_name(&self) -> String {
        let key = crc32c::crc32c(self.key.as_bytes());
        let version = crc32c::crc32c(self.version.as_bytes());
        format!("{:02x}/{key:08x}-{version:08x}-{:x}.zcb", key & 0xff, self.block)
    }
}

/// The size of the block file holding `len` bytes of data for `id`.
pub fn encoded_len(id: &BlockId, len: u64) -> u64 {
    (HEADER + id.key.len() + id.version.len() + 4) as u64 + len
}

/// The bytes of a block file holding `data` for `id`.
pub fn encode(id: &BlockId, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + id.key.len() + id.version.len() + data.len() + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(id.key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(id.version.len() as u32).to_le_bytes());
    out.extend_from_slice(&id.block.to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(id.key.as_bytes());
    out.extend_from_slice(id.version.as_bytes());
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Why a block file was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Short, malformed, or failing its checksum: torn by a crash, or damaged.
    Torn,
    /// Sound, but of another key, version or block (a file name shared by two blocks).
    Other,
}

/// The data of a block file's bytes, if they are sound and of `id`.
pub fn decode(bytes: &Bytes, id: &BlockId) -> Result<Bytes, Rejected> {
    let header = bytes.get(..HEADER).ok_or(Rejected::Torn)?;
    if &header[..4] != MAGIC {
        return Err(Rejected::Torn);
    }
    let u32_at = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]) as usize;
    let (key_len, version_len, data_len) = (u32_at(4), u32_at(8), u32_at(20));
    let mut block = [0u8; 8];
    block.copy_from_slice(&header[12..20]);
    if key_len > MAX_NAME || version_len > MAX_NAME {
        return Err(Rejected::Torn);
    }
    let body_end = HEADER + key_len + version_len + data_len;
    let whole = bytes.get(..body_end + 4).ok_or(Rejected::Torn)?;
    if bytes.len() != body_end + 4 {
        return Err(Rejected::Torn);
    }
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&whole[body_end..]);
    if crc32c::crc32c(&whole[..body_end]) != u32::from_le_bytes(crc) {
        return Err(Rejected::Torn);
    }
    let key = &whole[HEADER..HEADER + key_len];
    let version = &whole[HEADER + key_len..HEADER + key_len + version_len];
    if key != id.key.as_bytes() || version != id.version.as_bytes() || u64::from_le_bytes(block) != id.block {
        return Err(Rejected::Other);
    }
    Ok(bytes.slice(HEADER + key_len + version_len..body_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(key: &str, version: &str, block: u64) -> BlockId {
        BlockId {
            key: key.into(),
            version: version.into(),
            block,
        }
    }

    #[test]
    fn a_block_reads_back_only_as_what_it_is_of() {
        let a = id("arr/c/0/0", "\"etag-1\"", 3);
        let bytes = encode(&a, b"shard bytes");
        assert_eq!(
            decode(&Bytes::from(bytes.clone()), &a).unwrap(),
            Bytes::from_static(b"shard bytes")
        );
        assert_eq!(
            decode(&Bytes::from(bytes.clone()), &id("arr/c/0/0", "\"etag-2\"", 3)),
            Err(Rejected::Other)
        );
        assert_eq!(
            decode(&Bytes::from(bytes.clone()), &id("arr/c/0/1", "\"etag-1\"", 3)),
            Err(Rejected::Other)
        );
        assert_eq!(
            decode(&Bytes::from(bytes.clone()), &id("arr/c/0/0", "\"etag-1\"", 4)),
            Err(Rejected::Other)
        );
        assert_eq!(decode(&Bytes::from(encode(&a, b"")), &a).unwrap().len(), 0);
    }

    #[test]
    fn a_torn_or_damaged_block_is_rejected() {
        let a = id("k", "v", 0);
        let bytes = encode(&a, &[7u8; 1000]);
        for cut in [0, 3, HEADER, HEADER + 5, bytes.len() - 1] {
            assert_eq!(
                decode(&Bytes::copy_from_slice(&bytes[..cut]), &a),
                Err(Rejected::Torn),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&Bytes::from(longer), &a), Err(Rejected::Torn));
        for at in [0, 5, 13, HEADER + 1, bytes.len() - 500, bytes.len() - 2] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert_eq!(decode(&Bytes::from(flipped), &a), Err(Rejected::Torn), "flip at {at}");
        }
        // Lengths beyond the file are refused before anything is read or allocated.
        let mut huge = bytes;
        huge[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&Bytes::from(huge), &a), Err(Rejected::Torn));
    }

    #[test]
    fn file_names_are_stable_and_spread() {
        let a = id("arr/c/0/0", "v1", 2);
        assert_eq!(a.file_name(), a.clone().file_name());
        assert_ne!(a.file_name(), id("arr/c/0/0", "v2", 2).file_name());
        assert_ne!(a.file_name(), id("arr/c/0/0", "v1", 3).file_name());
        assert!(a.file_name().ends_with("-2.zcb"));
        assert_eq!(&a.file_name()[2..3], "/");
    }
}
