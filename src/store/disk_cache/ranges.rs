//! How the disk cache cuts objects into blocks: which blocks a byte range touches, and how a
//! read is widened to whole blocks so that what it brings can be kept.

use crate::store::ByteRange;

/// Bytes per cached block: large enough that a shard is a handful of files, small enough that
/// widening a small read to whole blocks costs little at a cloud round trip.
pub const BLOCK: u64 = 256 << 10;

/// The blocks overlapping `[start, end)` of an object of `size` bytes: (block, its start, its
/// end), clamped to the object.
pub fn blocks_of(start: u64, end: u64, size: u64) -> impl Iterator<Item = (u64, u64, u64)> {
    let end = end.min(size);
    let first = start / BLOCK;
    let last = if end > start { (end - 1) / BLOCK + 1 } else { first };
    (first..last).map(move |n| (n, n * BLOCK, ((n + 1) * BLOCK).min(size)))
}

/// `want` widened to whole blocks (a suffix of an object of unknown size cannot be).
pub fn widen(want: ByteRange, size: Option<u64>) -> ByteRange {
    let down = |o: u64| o / BLOCK * BLOCK;
    let up = |o: u64| o.div_ceil(BLOCK).saturating_mul(BLOCK);
    match (want, size) {
        (ByteRange::Full, _) => ByteRange::Full,
        (_, Some(size)) => {
            let (start, end) = want.resolve(size);
            let (start, end) = (down(start), up(end).min(size));
            if start == 0 && end == size {
                ByteRange::Full
            } else {
                ByteRange::Range {
                    offset: start,
                    length: end - start,
                }
            }
        }
        (ByteRange::Range { offset, length }, None) => ByteRange::Range {
            offset: down(offset),
            length: up(offset.saturating_add(length)) - down(offset),
        },
        (ByteRange::From(offset), None) => ByteRange::From(down(offset)),
        (ByteRange::Suffix(n), None) => ByteRange::Suffix(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_widening() {
        let b = BLOCK;
        let all: Vec<_> = blocks_of(0, 3 * b + 5, 3 * b + 5).collect();
        assert_eq!(
            all,
            vec![(0, 0, b), (1, b, 2 * b), (2, 2 * b, 3 * b), (3, 3 * b, 3 * b + 5)]
        );
        assert_eq!(blocks_of(b - 1, b + 1, 10 * b).count(), 2);
        assert_eq!(blocks_of(5, 5, 10 * b).count(), 0);
        assert_eq!(blocks_of(0, 100, 50).collect::<Vec<_>>(), vec![(0, 0, 50)]);
        let range = |offset, length| ByteRange::Range { offset, length };
        assert_eq!(widen(range(10, 20), None), range(0, b));
        assert_eq!(widen(range(b + 1, b), None), range(b, 2 * b));
        assert_eq!(widen(ByteRange::Suffix(7), None), ByteRange::Suffix(7));
        assert_eq!(widen(ByteRange::Suffix(7), Some(b + 100)), range(b, 100));
        assert_eq!(widen(ByteRange::Suffix(7), Some(100)), ByteRange::Full);
        assert_eq!(widen(ByteRange::From(b + 3), None), ByteRange::From(b));
    }
}
