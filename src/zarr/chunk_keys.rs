//! The chunk keys an array's grid can hold, and which of them lie below one of its
//! directories. Where a store cannot be listed, what exists is found by asking for each
//! possible key, so the possible keys have to be known: from a v3 `zarr.json` (its chunk grid
//! and chunk key encoding; for a sharded array, the shards) or a v2 `.zarray` (`shape`,
//! `chunks`, `dimension_separator`, `.` when absent). Counts saturate; nothing here panics on
//! absurd metadata.

use serde_json::Value;

use crate::zarr::grid::{box_coords, grid_shape};
use crate::zarr::key_encoding::{ChunkKeyEncoding, ChunkPath, Separator};
use crate::zarr::metadata::ArrayMetadata;
use crate::zarr::{json, ZarrError};

/// An array's chunk grid and how its chunk keys are spelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGrid {
    pub encoding: ChunkKeyEncoding,
    /// Chunks along each dimension.
    pub grid: Vec<u64>,
}

/// What a directory of an array is in its key space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDir {
    /// The array's own directory.
    Array,
    /// A directory of chunk keys (`/` separators) inside the grid: the leading coordinates its
    /// path fixes (empty for the default encoding's `c/`).
    Chunks(Vec<u64>),
    /// Anything else: a chunk key, a name outside the grid, not a key's path.
    Other,
}

impl KeyGrid {
    pub fn from_v3(meta: &ArrayMetadata) -> Result<Self, ZarrError> {
        Ok(KeyGrid {
            encoding: meta.chunk_key_encoding,
            grid: meta.grid_shape()?,
        })
    }

    /// The grid of a Zarr v2 `.zarray` document.
    pub fn from_zarray(doc: &Value) -> Result<Self, ZarrError> {
        let obj = json::object(doc, ".zarray")?;
        let shape = json::u64_array(json::required(obj, "shape", "shape")?, "shape")?;
        let chunks = json::positive_u64_array(json::required(obj, "chunks", "chunks")?, "chunks")?;
        let separator = match obj.get("dimension_separator") {
            None | Some(Value::Null) => Separator::Dot,
            Some(s) => Separator::from_json(s, "dimension_separator")?,
        };
        Ok(KeyGrid {
            encoding: ChunkKeyEncoding::V2(separator),
            grid: grid_shape(&shape, &chunks)?,
        })
    }

    pub fn ndim(&self) -> usize {
        self.grid.len()
    }

    /// Whether every chunk key sits in the array's directory itself (no `/` in keys).
    pub fn flat(&self) -> bool {
        self.ndim() == 0 || self.encoding.separator() != '/'
    }

    /// What the directory at `rel` (relative to the array, no trailing `/`; `""` for the
    /// array's own) is.
    pub fn place(&self, rel: &str) -> KeyDir {
        if rel.is_empty() {
            return KeyDir::Array;
        }
        match self.encoding.classify(rel, self.ndim()) {
            ChunkPath::Dir(prefix) if prefix.iter().zip(&self.grid).all(|(c, g)| c < g) => KeyDir::Chunks(prefix),
            _ => KeyDir::Other,
        }
    }

    /// How many chunks of the grid have leading coordinates `prefix` (saturating).
    pub fn count_below(&self, prefix: &[u64]) -> u64 {
        self.grid
            .iter()
            .skip(prefix.len())
            .fold(1u64, |n, &g| n.saturating_mul(g))
    }

    /// The keys (relative to the array) of every chunk with leading coordinates `prefix`, in
    /// C order. Callers bound the count first ([`count_below`](Self::count_below)).
    pub fn keys_below(&self, prefix: &[u64]) -> Vec<String> {
        let lo: Vec<u64> = prefix
            .iter()
            .copied()
            .chain(self.grid.iter().skip(prefix.len()).map(|_| 0))
            .collect();
        let hi: Vec<u64> = prefix
            .iter()
            .map(|c| c.saturating_add(1))
            .chain(self.grid.iter().skip(prefix.len()).copied())
            .collect();
        box_coords(&lo, &hi)
            .iter()
            .map(|coords| self.encoding.encode(coords))
            .collect()
    }

    /// The directory (relative to the array, ending in `/`, or empty) of the chunks with
    /// leading coordinates `prefix`: where a search of them is remembered.
    pub fn dir_of(&self, prefix: &[u64]) -> String {
        self.encoding.dir_of(prefix)
    }

    /// The coordinates of a chunk key (relative to the array), if it is one of the grid's.
    pub fn chunk_of(&self, rel: &str) -> Option<Vec<u64>> {
        self.encoding
            .decode(rel, self.ndim())
            .filter(|coords| coords.iter().zip(&self.grid).all(|(c, g)| c < g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v2(sep: Separator, grid: &[u64]) -> KeyGrid {
        KeyGrid {
            encoding: ChunkKeyEncoding::V2(sep),
            grid: grid.to_vec(),
        }
    }

    #[test]
    fn zarray_grids() {
        let doc = json!({"zarr_format": 2, "shape": [6, 5], "chunks": [4, 4], "dtype": "<i4"});
        assert_eq!(KeyGrid::from_zarray(&doc).unwrap(), v2(Separator::Dot, &[2, 2]));
        let doc = json!({"shape": [5], "chunks": [2], "dimension_separator": "/"});
        assert_eq!(KeyGrid::from_zarray(&doc).unwrap(), v2(Separator::Slash, &[3]));
        let doc = json!({"shape": [], "chunks": [], "dimension_separator": null});
        assert_eq!(KeyGrid::from_zarray(&doc).unwrap(), v2(Separator::Dot, &[]));
        for bad in [
            json!({"shape": [5], "chunks": [0]}),
            json!({"shape": [5, 1], "chunks": [2]}),
            json!({"shape": [5], "chunks": [2], "dimension_separator": "-"}),
            json!({"shape": "5", "chunks": [2]}),
            json!([1]),
        ] {
            assert!(KeyGrid::from_zarray(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_below_a_directory() {
        let g = KeyGrid {
            encoding: ChunkKeyEncoding::Default(Separator::Slash),
            grid: vec![2, 3],
        };
        assert_eq!(g.place(""), KeyDir::Array);
        assert_eq!(g.place("c"), KeyDir::Chunks(vec![]));
        assert_eq!(g.place("c/1"), KeyDir::Chunks(vec![1]));
        assert_eq!(g.place("c/2"), KeyDir::Other, "outside the grid");
        assert_eq!(g.place("c/1/2"), KeyDir::Other, "a chunk key");
        assert_eq!(g.count_below(&[]), 6);
        assert_eq!(g.count_below(&[1]), 3);
        assert_eq!(g.keys_below(&[1]), ["c/1/0", "c/1/1", "c/1/2"]);
        assert_eq!(g.keys_below(&[]).len(), 6);
        assert_eq!(g.dir_of(&[1]), "c/1/");
        assert_eq!(g.chunk_of("c/1/2"), Some(vec![1, 2]));
        assert_eq!(g.chunk_of("c/1/3"), None);
        let flat = v2(Separator::Dot, &[2, 2]);
        assert!(flat.flat());
        assert_eq!(flat.keys_below(&[]), ["0.0", "0.1", "1.0", "1.1"]);
        assert_eq!(flat.dir_of(&[]), "");
        let scalar = KeyGrid {
            encoding: ChunkKeyEncoding::Default(Separator::Slash),
            grid: vec![],
        };
        assert!(scalar.flat());
        assert_eq!(scalar.keys_below(&[]), ["c"]);
        let huge = v2(Separator::Slash, &[u64::MAX, u64::MAX]);
        assert_eq!(huge.count_below(&[]), u64::MAX);
        assert_eq!(huge.count_below(&[3]), u64::MAX);
    }
}
