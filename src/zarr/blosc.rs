//! Decoding of the `blosc` codec, for the v2 view's transcoding (nothing here writes blosc).
//!
//! c-blosc is compiled into the binary by the `blosc-src` crate (with its lz4, zstd, zlib and
//! snappy compressors), which exposes only its C functions; this module is the small safe
//! interface over the two that decoding needs. The header is checked first
//! (`blosc_cbuffer_validate`: the sizes it declares against the buffer's length), which is what
//! c-blosc requires before it decompresses untrusted bytes, and the output is bounded before
//! anything is allocated. `blosc_decompress_ctx` keeps no global state, so any thread may call
//! it at any time, without `blosc_init`.

use std::ffi::c_void;

use crate::zarr::ZarrError;

/// The decoded length `data`'s header declares, checked against its length.
fn decoded_len(data: &[u8]) -> Option<usize> {
    let mut len = 0usize;
    // SAFETY: c-blosc reads at most `data.len()` bytes of `data` and writes one `usize`.
    let status = unsafe { blosc_src::blosc_cbuffer_validate(data.as_ptr().cast::<c_void>(), data.len(), &mut len) };
    (status == 0).then_some(len)
}

/// Decode one blosc buffer, failing if it is not one or decodes to more than `max_len` bytes
/// (`too_large` makes that error, so it reads as the caller's other bounds do).
pub fn decode(data: &[u8], max_len: usize, too_large: impl FnOnce() -> ZarrError) -> Result<Vec<u8>, ZarrError> {
    let len = decoded_len(data).ok_or_else(|| ZarrError::invalid("blosc", "not a valid blosc buffer"))?;
    if len > max_len {
        return Err(too_large());
    }
    let mut out = vec![0u8; len];
    // SAFETY: the header was validated against `data.len()` above, and `out` has room for the
    // `len` bytes it declares, which is the `destsize` c-blosc will not write past.
    let written = unsafe {
        blosc_src::blosc_decompress_ctx(
            data.as_ptr().cast::<c_void>(),
            out.as_mut_ptr().cast::<c_void>(),
            len,
            1,
        )
    };
    if written < 0 || written as usize != len {
        return Err(ZarrError::invalid("blosc", "cannot be decoded"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compress with the same c-blosc, as numcodecs would (`cname`, byte shuffle).
    fn compress(data: &[u8], cname: &str) -> Vec<u8> {
        let mut out = vec![0u8; data.len() + 16];
        let cname = std::ffi::CString::new(cname).unwrap();
        // SAFETY: `out` has the room c-blosc asks for (input + its 16-byte header).
        let n = unsafe {
            blosc_src::blosc_compress_ctx(
                5,
                1,
                4,
                data.len(),
                data.as_ptr().cast(),
                out.as_mut_ptr().cast(),
                out.len(),
                cname.as_ptr(),
                0,
                1,
            )
        };
        assert!(n > 0, "{cname:?}: compressed to {n}");
        out.truncate(n as usize);
        out
    }

    fn big() -> ZarrError {
        ZarrError::TooLarge {
            what: "decoded bytes",
            value: 0,
            limit: 0,
        }
    }

    #[test]
    fn every_compressor_compiled_in_round_trips() {
        let data: Vec<u8> = (0..40_000u32).flat_map(|i| (i / 7).to_le_bytes()).collect();
        for cname in ["blosclz", "lz4", "lz4hc", "zlib", "zstd", "snappy"] {
            let stored = compress(&data, cname);
            assert!(stored.len() < data.len() / 2, "{cname}: {} bytes", stored.len());
            assert_eq!(decode(&stored, data.len(), big).unwrap(), data, "{cname}");
            assert!(
                matches!(decode(&stored, data.len() - 1, big), Err(ZarrError::TooLarge { .. })),
                "{cname}"
            );
        }
    }

    #[test]
    fn stored_bytes_that_are_not_blosc_are_an_error() {
        assert!(decode(b"x", 10, big).is_err());
        // A header declaring more compressed bytes than there are.
        assert!(decode(&[2, 1, 0x21, 4, 16, 0, 0, 0, 16, 0, 0, 0, 32, 0, 0, 0], 100, big).is_err());
        let mut stored = compress(&vec![7u8; 4096], "lz4");
        let last = stored.len() - 1;
        stored.truncate(last);
        assert!(decode(&stored, 4096, big).is_err());
    }
}
