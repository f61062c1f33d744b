//! The single error type of the `zarr` module.
//!
//! Variants are structured so callers can react to the kind of failure (for
//! example map `Unsupported` to "show the array raw" and `Checksum` or
//! `OutOfBounds` to `EIO`), while still carrying a human-readable reason for
//! logs. The type is `Clone + PartialEq` so results can be cached and compared
//! in tests; therefore foreign error values (serde_json) are kept as text.

/// Everything that can go wrong while interpreting Zarr metadata or shard bytes.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ZarrError {
    /// The bytes are not a JSON document (or not a JSON object).
    #[error("not valid JSON: {reason}")]
    Json { reason: String },

    /// A field is missing or has the wrong type or value. `field` is a dotted
    /// path such as `codecs[0].configuration.chunk_shape`.
    #[error("invalid `{field}`: {reason}")]
    Invalid { field: String, reason: String },

    /// Well-formed, but uses a feature this implementation does not handle
    /// (another chunk grid, chunk key encoding, index codec, ...).
    #[error("unsupported {feature}: {reason}")]
    Unsupported { feature: String, reason: String },

    /// A size or index computation does not fit in 64 bits.
    #[error("arithmetic overflow computing {what}")]
    Overflow { what: String },

    /// A value exceeds a sanity limit that protects against absurd allocations.
    #[error("{what} is {value}, above the limit of {limit}")]
    TooLarge { what: &'static str, value: u64, limit: u64 },

    /// A byte buffer has the wrong length.
    #[error("{what}: expected {expected} bytes, got {actual}")]
    Length {
        what: &'static str,
        expected: u64,
        actual: u64,
    },

    /// A CRC32C checksum did not match.
    #[error("crc32c mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },

    /// A shard-index entry points outside the shard (or sub-shard) it belongs to.
    #[error("chunk {chunk}: offset {offset} + nbytes {nbytes} exceeds data length {data_len}")]
    OutOfBounds {
        chunk: u64,
        offset: u64,
        nbytes: u64,
        data_len: u64,
    },

    /// A chunk index outside `0..len` was used.
    #[error("chunk index {index} out of range for {len} chunks")]
    IndexOutOfRange { index: u64, len: u64 },
}

impl ZarrError {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ZarrError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn unsupported(feature: impl Into<String>, reason: impl Into<String>) -> Self {
        ZarrError::Unsupported {
            feature: feature.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn overflow(what: impl Into<String>) -> Self {
        ZarrError::Overflow { what: what.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_problem() {
        let e = ZarrError::invalid("shape", "must be an array");
        assert_eq!(e.to_string(), "invalid `shape`: must be an array");
        let e = ZarrError::OutOfBounds {
            chunk: 3,
            offset: 10,
            nbytes: 5,
            data_len: 12,
        };
        assert!(e.to_string().contains("chunk 3"));
        let e = ZarrError::Checksum { stored: 1, computed: 2 };
        assert!(e.to_string().contains("0x00000001"));
    }
}
