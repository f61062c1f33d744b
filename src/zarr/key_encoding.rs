//! Chunk key encodings: chunk grid coordinates <-> store keys.
//!
//! Two encodings are defined by the Zarr v3 spec:
//! - `default`: prefix `c`, then `<sep><coord>` per dimension (`c/1/2`, `c.1.2`;
//!   just `c` for a 0-d array); separator defaults to `/`.
//! - `v2`: coordinates joined by the separator (`1.2`, `1/2`; `0` for a 0-d
//!   array); separator defaults to `.`.
//!
//! The v3 drafts of 2020 and 2022 spell keys a third way: `c` directly followed by the
//! coordinates joined by the separator (`c1/2`, `c1.2`; `c` for a 0-d array), so that with `/`
//! the first directory level is named `c1`, the next ones `2`.
//!
//! Decoding is canonical-only: a key is accepted only if `encode` would have
//! produced exactly that string. This makes the key <-> coordinates mapping a
//! bijection, so the filesystem never shows two names for one chunk and never
//! mistakes `c/01` or `c/+1` for chunk 1. `classify` additionally recognises the
//! intermediate directories that `/`-separated keys create.

use serde_json::Value;

use crate::zarr::{json, ZarrError};

/// The character between coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Separator {
    Slash,
    Dot,
}

impl Separator {
    pub fn as_char(self) -> char {
        match self {
            Separator::Slash => '/',
            Separator::Dot => '.',
        }
    }

    pub fn from_json(v: &Value, field: &str) -> Result<Self, ZarrError> {
        match json::string(v, field)? {
            "/" => Ok(Separator::Slash),
            "." => Ok(Separator::Dot),
            other => Err(ZarrError::invalid(
                field,
                format!("separator must be \"/\" or \".\", got {other:?}"),
            )),
        }
    }
}

/// A supported `chunk_key_encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKeyEncoding {
    Default(Separator),
    V2(Separator),
    /// The v3 drafts' `c1/2` (the separator from the draft's `chunk_grid`).
    Draft(Separator),
}

/// What a path relative to the array directory denotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkPath {
    /// A directory that can contain chunk keys; carries the coordinates its
    /// path fixes (a prefix of the full coordinates, possibly empty).
    Dir(Vec<u64>),
    /// A complete chunk key.
    Chunk(Vec<u64>),
    /// Anything else (metadata, stray files, non-canonical names).
    Other,
}

impl Default for ChunkKeyEncoding {
    /// The encoding assumed when `chunk_key_encoding` is absent.
    fn default() -> Self {
        ChunkKeyEncoding::Default(Separator::Slash)
    }
}

impl ChunkKeyEncoding {
    /// Parse a `chunk_key_encoding` value: an object `{"name", "configuration"?}`
    /// or a bare name string. Unknown names are `Unsupported`.
    pub fn from_json(v: &Value) -> Result<Self, ZarrError> {
        const FIELD: &str = "chunk_key_encoding";
        let (name, config) = match v {
            Value::String(name) => (name.as_str(), None),
            Value::Object(obj) => {
                let name = json::string(
                    json::required(obj, "name", "chunk_key_encoding.name")?,
                    "chunk_key_encoding.name",
                )?;
                let config = match obj.get("configuration") {
                    None => None,
                    Some(c) => Some(json::object(c, "chunk_key_encoding.configuration")?),
                };
                (name, config)
            }
            _ => return Err(ZarrError::invalid(FIELD, "must be an object or a name string")),
        };
        let separator = |default: Separator| match config.and_then(|c| c.get("separator")) {
            None => Ok(default),
            Some(s) => Separator::from_json(s, "chunk_key_encoding.configuration.separator"),
        };
        match name {
            "default" => Ok(ChunkKeyEncoding::Default(separator(Separator::Slash)?)),
            "v2" => Ok(ChunkKeyEncoding::V2(separator(Separator::Dot)?)),
            other => Err(ZarrError::unsupported(
                FIELD,
                format!("unknown chunk key encoding {other:?}"),
            )),
        }
    }

    pub fn separator(&self) -> char {
        match self {
            ChunkKeyEncoding::Default(s) | ChunkKeyEncoding::V2(s) | ChunkKeyEncoding::Draft(s) => s.as_char(),
        }
    }

    /// The key of the chunk at `coords`, relative to the array.
    pub fn encode(&self, coords: &[u64]) -> String {
        let sep = self.separator();
        let mut key = String::new();
        match self {
            ChunkKeyEncoding::Default(_) => {
                key.push('c');
                for c in coords {
                    key.push(sep);
                    key.push_str(&c.to_string());
                }
            }
            ChunkKeyEncoding::Draft(_) => {
                key.push('c');
                for (i, c) in coords.iter().enumerate() {
                    if i > 0 {
                        key.push(sep);
                    }
                    key.push_str(&c.to_string());
                }
            }
            ChunkKeyEncoding::V2(_) => {
                if coords.is_empty() {
                    key.push('0');
                }
                for (i, c) in coords.iter().enumerate() {
                    if i > 0 {
                        key.push(sep);
                    }
                    key.push_str(&c.to_string());
                }
            }
        }
        key
    }

    /// The directory (relative to the array, ending in `/`, or empty) that holds the keys of
    /// chunks whose leading coordinates are `prefix`: `c/1/2/` (default) or `1/2/` (v2). Only
    /// `/` separators make directories; with `.` every key sits in the array's directory.
    pub fn dir_of(&self, prefix: &[u64]) -> String {
        let mut dir = String::new();
        if self.separator() != '/' {
            return dir;
        }
        if let Some(top) = self.top_dir() {
            dir.push_str(top);
            dir.push('/');
        }
        for (level, &c) in prefix.iter().enumerate() {
            dir.push_str(&self.level_name(level, c));
            dir.push('/');
        }
        dir
    }

    /// The name, at `level` of the chunk tree (0: in the array's directory or its top
    /// directory), of the entry for coordinate `c`: `c1` at the first level of the drafts'
    /// keys, `1` everywhere else.
    pub fn level_name(&self, level: usize, c: u64) -> String {
        match self {
            ChunkKeyEncoding::Draft(_) if level == 0 => format!("c{c}"),
            _ => c.to_string(),
        }
    }

    /// A key that sorts coordinates as the names [`level_name`](Self::level_name) gives them
    /// at one level sort (as strings: "10" before "9"), with no string made: a listing of a
    /// million chunk files sorts their coordinates, then names them. The coordinate's digits
    /// are left-aligned in 20 places (a name that is a prefix of another sorts first, by its
    /// length in the low bits): the key takes at most 72 bits.
    pub fn level_name_key(c: u64) -> u128 {
        let digits = c.checked_ilog10().unwrap_or(0) + 1;
        (u128::from(c) * 10u128.pow(20 - digits)) << 5 | u128::from(digits)
    }

    /// The coordinate an entry named `name` at `level` of the chunk tree stands for.
    pub fn parse_level(&self, level: usize, name: &str) -> Option<u64> {
        match self {
            ChunkKeyEncoding::Draft(_) if level == 0 => parse_coord(name.strip_prefix('c')?),
            _ => parse_coord(name),
        }
    }

    /// The one directory of the array's own directory that holds every chunk key of an array
    /// with dimensions (`c` for the default encoding with `/`), if there is one.
    pub fn top_dir(&self) -> Option<&'static str> {
        matches!(self, ChunkKeyEncoding::Default(Separator::Slash)).then_some("c")
    }

    /// Coordinates of `key` for an array of `ndim` dimensions, if `key` is
    /// exactly what [`encode`](Self::encode) produces for them.
    pub fn decode(&self, key: &str, ndim: usize) -> Option<Vec<u64>> {
        let sep = self.separator();
        match self {
            ChunkKeyEncoding::Default(_) => {
                let rest = key.strip_prefix('c')?;
                if ndim == 0 {
                    return rest.is_empty().then(Vec::new);
                }
                parse_coords(rest.strip_prefix(sep)?, sep, ndim)
            }
            ChunkKeyEncoding::V2(_) => {
                if ndim == 0 {
                    return (key == "0").then(Vec::new);
                }
                parse_coords(key, sep, ndim)
            }
            ChunkKeyEncoding::Draft(_) => {
                let rest = key.strip_prefix('c')?;
                if ndim == 0 {
                    return rest.is_empty().then(Vec::new);
                }
                parse_coords(rest, sep, ndim)
            }
        }
    }

    /// Classify a `/`-separated path relative to the array directory.
    ///
    /// The empty path (the array directory itself) is `Other`: callers know it
    /// is the array. With a `.` separator there are no chunk directories.
    pub fn classify(&self, rel: &str, ndim: usize) -> ChunkPath {
        if let Some(coords) = self.decode(rel, ndim) {
            return ChunkPath::Chunk(coords);
        }
        if self.separator() != '/' || rel.is_empty() {
            return ChunkPath::Other;
        }
        // Components that must be coordinates, and the fewest a directory has.
        let (coord_part, min_prefix) = match self {
            ChunkKeyEncoding::Default(_) => match rel.strip_prefix('c') {
                Some("") => return dir_if(Vec::new(), ndim),
                Some(rest) => match rest.strip_prefix('/') {
                    Some(rest) => (rest, 1),
                    None => return ChunkPath::Other,
                },
                None => return ChunkPath::Other,
            },
            ChunkKeyEncoding::V2(_) => (rel, 1),
            ChunkKeyEncoding::Draft(_) => match rel.strip_prefix('c') {
                Some(rest) if !rest.is_empty() => (rest, 1),
                _ => return ChunkPath::Other,
            },
        };
        let mut coords = Vec::new();
        for part in coord_part.split('/') {
            // Stop early: a directory prefix has fewer than ndim coordinates.
            if coords.len() >= ndim {
                return ChunkPath::Other;
            }
            match parse_coord(part) {
                Some(c) => coords.push(c),
                None => return ChunkPath::Other,
            }
        }
        if coords.len() < min_prefix {
            return ChunkPath::Other;
        }
        dir_if(coords, ndim)
    }
}

/// `Dir(prefix)` when the prefix is strictly shorter than a full key.
fn dir_if(prefix: Vec<u64>, ndim: usize) -> ChunkPath {
    if prefix.len() < ndim {
        ChunkPath::Dir(prefix)
    } else {
        ChunkPath::Other
    }
}

/// Exactly `ndim` canonical coordinates separated by `sep`.
fn parse_coords(s: &str, sep: char, ndim: usize) -> Option<Vec<u64>> {
    let mut coords = Vec::with_capacity(ndim.min(64));
    for part in s.split(sep) {
        if coords.len() == ndim {
            return None;
        }
        coords.push(parse_coord(part)?);
    }
    (coords.len() == ndim).then_some(coords)
}

/// A canonical decimal `u64`: ASCII digits only, no sign, no leading zeros.
pub fn parse_coord(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    match bytes {
        [] => return None,
        [b'0', _, ..] => return None,
        _ => {}
    }
    bytes.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_of_coordinates_sort_as_strings() {
        let mut coords: Vec<u64> = (0..2000)
            .chain([9_999_999, 10_000_000, u64::MAX, u64::MAX - 1, 1 << 40])
            .collect();
        let mut by_name = coords.clone();
        by_name.sort_by_key(|c| c.to_string());
        coords.sort_by_key(|c| super::ChunkKeyEncoding::level_name_key(*c));
        assert_eq!(coords, by_name);
    }

    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const ALL: [ChunkKeyEncoding; 6] = [
        ChunkKeyEncoding::Default(Separator::Slash),
        ChunkKeyEncoding::Default(Separator::Dot),
        ChunkKeyEncoding::V2(Separator::Slash),
        ChunkKeyEncoding::V2(Separator::Dot),
        ChunkKeyEncoding::Draft(Separator::Slash),
        ChunkKeyEncoding::Draft(Separator::Dot),
    ];
    const DEF_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::Default(Separator::Slash);

    #[test]
    fn chunk_directories_hold_the_keys_they_name() {
        for e in ALL {
            for prefix in [vec![], vec![3], vec![3, 0]] {
                let dir = e.dir_of(&prefix);
                let key = e.encode(&[prefix.clone(), vec![7, 1, 2]].concat()[..3]);
                assert!(key.starts_with(&dir), "{e:?} {prefix:?}: {key} not under {dir:?}");
                if e.separator() == '.' {
                    assert_eq!(dir, "");
                }
            }
        }
        assert_eq!(DEF_SLASH.dir_of(&[4, 5]), "c/4/5/");
        assert_eq!(ChunkKeyEncoding::V2(Separator::Slash).dir_of(&[4]), "4/");
        assert_eq!(DEF_SLASH.top_dir(), Some("c"));
        assert_eq!(ChunkKeyEncoding::Default(Separator::Dot).top_dir(), None);
        assert_eq!(ChunkKeyEncoding::V2(Separator::Slash).top_dir(), None);
    }
    const DEF_DOT: ChunkKeyEncoding = ChunkKeyEncoding::Default(Separator::Dot);
    const V2_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::V2(Separator::Slash);
    const V2_DOT: ChunkKeyEncoding = ChunkKeyEncoding::V2(Separator::Dot);

    #[test]
    fn from_json_defaults_and_forms() {
        let p = |v: Value| ChunkKeyEncoding::from_json(&v);
        assert_eq!(p(json!({"name": "default"})), Ok(DEF_SLASH));
        assert_eq!(p(json!("default")), Ok(DEF_SLASH));
        assert_eq!(
            p(json!({"name": "default", "configuration": {"separator": "."}})),
            Ok(DEF_DOT)
        );
        assert_eq!(p(json!({"name": "v2"})), Ok(V2_DOT));
        assert_eq!(p(json!("v2")), Ok(V2_DOT));
        assert_eq!(
            p(json!({"name": "v2", "configuration": {"separator": "/"}})),
            Ok(V2_SLASH)
        );
        assert_eq!(p(json!({"name": "v2", "configuration": {}})), Ok(V2_DOT));
        assert!(matches!(
            p(json!({"name": "fancy"})),
            Err(ZarrError::Unsupported { .. })
        ));
        assert!(matches!(
            p(json!({"name": "default", "configuration": {"separator": "-"}})),
            Err(ZarrError::Invalid { .. })
        ));
        assert!(p(json!({"name": "default", "configuration": {"separator": 1}})).is_err());
        assert!(p(json!({"name": "default", "configuration": []})).is_err());
        assert!(p(json!({"configuration": {}})).is_err());
        assert!(p(json!(7)).is_err());
    }

    #[test]
    fn the_drafts_keys() {
        let slash = ChunkKeyEncoding::Draft(Separator::Slash);
        let dot = ChunkKeyEncoding::Draft(Separator::Dot);
        assert_eq!(slash.encode(&[1, 23, 45]), "c1/23/45");
        assert_eq!(dot.encode(&[1, 23]), "c1.23");
        assert_eq!(slash.encode(&[]), "c");
        assert_eq!(slash.decode("c1/23/45", 3), Some(vec![1, 23, 45]));
        assert_eq!(slash.decode("c", 0), Some(vec![]));
        for bad in ["c/1/2", "c01/2", "1/2", "c1/2/", "c1.2"] {
            assert_eq!(slash.decode(bad, 2), None, "{bad}");
        }
        assert_eq!(slash.dir_of(&[4, 5]), "c4/5/");
        assert_eq!(slash.top_dir(), None);
        assert_eq!(slash.classify("c4", 3), ChunkPath::Dir(vec![4]));
        assert_eq!(slash.classify("c4/5", 3), ChunkPath::Dir(vec![4, 5]));
        assert_eq!(slash.classify("c4/5/6", 3), ChunkPath::Chunk(vec![4, 5, 6]));
        assert_eq!(slash.classify("c", 3), ChunkPath::Other);
        assert_eq!(slash.classify("c4", 1), ChunkPath::Chunk(vec![4]));
        assert_eq!(dot.classify("c4", 2), ChunkPath::Other);
        assert_eq!(
            (slash.level_name(0, 3), slash.level_name(1, 3)),
            ("c3".into(), "3".into())
        );
        assert_eq!(slash.parse_level(0, "c3"), Some(3));
        assert_eq!(slash.parse_level(0, "3"), None);
        assert_eq!(slash.parse_level(1, "3"), Some(3));
    }

    #[test]
    fn encode_examples() {
        assert_eq!(DEF_SLASH.encode(&[1, 23, 45]), "c/1/23/45");
        assert_eq!(DEF_DOT.encode(&[1, 23, 45]), "c.1.23.45");
        assert_eq!(V2_DOT.encode(&[1, 23, 45]), "1.23.45");
        assert_eq!(V2_SLASH.encode(&[1, 23, 45]), "1/23/45");
        assert_eq!(DEF_SLASH.encode(&[]), "c");
        assert_eq!(DEF_DOT.encode(&[]), "c");
        assert_eq!(V2_DOT.encode(&[]), "0");
        assert_eq!(V2_SLASH.encode(&[]), "0");
        assert_eq!(V2_DOT.encode(&[u64::MAX]), "18446744073709551615");
    }

    #[test]
    fn decode_accepts_canonical() {
        assert_eq!(DEF_SLASH.decode("c/1/2", 2), Some(vec![1, 2]));
        assert_eq!(DEF_SLASH.decode("c/0/10", 2), Some(vec![0, 10]));
        assert_eq!(DEF_DOT.decode("c.1.2", 2), Some(vec![1, 2]));
        assert_eq!(V2_DOT.decode("1.2", 2), Some(vec![1, 2]));
        assert_eq!(V2_SLASH.decode("1/2", 2), Some(vec![1, 2]));
        assert_eq!(DEF_SLASH.decode("c", 0), Some(vec![]));
        assert_eq!(V2_DOT.decode("0", 0), Some(vec![]));
        assert_eq!(DEF_SLASH.decode("c/18446744073709551615", 1), Some(vec![u64::MAX]));
    }

    #[test]
    fn decode_rejects_non_canonical() {
        let bad_default_slash = [
            ("c/01/2", 2),
            ("c/1//2", 2),
            ("c//1", 1),
            ("c/-1", 1),
            ("c/+1", 1),
            ("c/ 1", 1),
            ("c/1/2/", 2),
            ("/c/1/2", 2),
            ("c/1/2/3", 2),
            ("c/1", 2),
            ("c", 1),
            ("c/", 1),
            ("c/1", 0),
            ("c.1", 1),
            ("d/1", 1),
            ("C/1", 1),
            ("c/99999999999999999999", 1),
            ("c/18446744073709551616", 1),
            ("c/1a", 1),
            ("c/١", 1),
            ("", 0),
            ("", 1),
        ];
        for (key, ndim) in bad_default_slash {
            assert_eq!(DEF_SLASH.decode(key, ndim), None, "{key:?} ndim {ndim}");
        }
        assert_eq!(DEF_DOT.decode("c.1", 2), None);
        assert_eq!(DEF_DOT.decode("c/1/2", 2), None);
        assert_eq!(DEF_DOT.decode("c.1.2.", 2), None);
        assert_eq!(DEF_DOT.decode("c..1", 1), None);
        assert_eq!(V2_DOT.decode("1", 2), None);
        assert_eq!(V2_DOT.decode("1.2.3", 2), None);
        assert_eq!(V2_DOT.decode("01.2", 2), None);
        assert_eq!(V2_DOT.decode("", 1), None);
        assert_eq!(V2_DOT.decode("1", 0), None);
        assert_eq!(V2_DOT.decode("c.1", 1), None);
        assert_eq!(V2_SLASH.decode("1.2", 2), None);
        assert_eq!(V2_SLASH.decode("1/2/", 2), None);
    }

    #[test]
    fn classify_default_slash() {
        let e = DEF_SLASH;
        assert_eq!(e.classify("c", 3), ChunkPath::Dir(vec![]));
        assert_eq!(e.classify("c/3", 3), ChunkPath::Dir(vec![3]));
        assert_eq!(e.classify("c/3/4", 3), ChunkPath::Dir(vec![3, 4]));
        assert_eq!(e.classify("c/3/4/5", 3), ChunkPath::Chunk(vec![3, 4, 5]));
        assert_eq!(e.classify("c/3/4/5/6", 3), ChunkPath::Other);
        assert_eq!(e.classify("c/3", 1), ChunkPath::Chunk(vec![3]));
        assert_eq!(e.classify("c", 1), ChunkPath::Dir(vec![]));
        assert_eq!(e.classify("c", 0), ChunkPath::Chunk(vec![]));
        assert_eq!(e.classify("c/0", 0), ChunkPath::Other);
        for other in [
            "",
            "zarr.json",
            "notes.txt",
            "c/x",
            "c/01",
            "c/",
            "c//3",
            "cc",
            "c/3/",
            "x/1",
        ] {
            assert_eq!(e.classify(other, 3), ChunkPath::Other, "{other:?}");
        }
    }

    #[test]
    fn classify_v2_slash() {
        let e = V2_SLASH;
        assert_eq!(e.classify("3", 2), ChunkPath::Dir(vec![3]));
        assert_eq!(e.classify("3/4", 2), ChunkPath::Chunk(vec![3, 4]));
        assert_eq!(e.classify("3/4", 3), ChunkPath::Dir(vec![3, 4]));
        assert_eq!(e.classify("3", 1), ChunkPath::Chunk(vec![3]));
        assert_eq!(e.classify("0", 0), ChunkPath::Chunk(vec![]));
        assert_eq!(e.classify("1", 0), ChunkPath::Other);
        for other in ["", "zarr.json", "c", "03", "3/", "3//4", "3/4/5"] {
            assert_eq!(e.classify(other, 2), ChunkPath::Other, "{other:?}");
        }
    }

    #[test]
    fn classify_dot_separators_have_no_dirs() {
        assert_eq!(DEF_DOT.classify("c", 2), ChunkPath::Other);
        assert_eq!(DEF_DOT.classify("c.1", 2), ChunkPath::Other);
        assert_eq!(DEF_DOT.classify("c.1.2", 2), ChunkPath::Chunk(vec![1, 2]));
        assert_eq!(DEF_DOT.classify("c/1", 2), ChunkPath::Other);
        assert_eq!(V2_DOT.classify("1", 2), ChunkPath::Other);
        assert_eq!(V2_DOT.classify("1.2", 2), ChunkPath::Chunk(vec![1, 2]));
        assert_eq!(V2_DOT.classify("zarr.json", 2), ChunkPath::Other);
    }

    fn coords_strategy() -> impl Strategy<Value = Vec<u64>> {
        proptest::collection::vec(prop_oneof![0u64..20, any::<u64>(), Just(u64::MAX)], 0..=5)
    }

    proptest! {
        #[test]
        fn round_trip_all_encodings(coords in coords_strategy()) {
            for enc in ALL {
                let key = enc.encode(&coords);
                prop_assert_eq!(enc.decode(&key, coords.len()), Some(coords.clone()), "{:?} {}", enc, key);
                prop_assert_eq!(enc.classify(&key, coords.len()), ChunkPath::Chunk(coords.clone()));
                // The same key never decodes for another dimensionality
                // (except v2 "0": ndim 0 and the 1-d chunk 0 share it).
                for other in 0..=6usize {
                    if other != coords.len() && !(matches!(enc, ChunkKeyEncoding::V2(_)) && key == "0") {
                        prop_assert_eq!(enc.decode(&key, other), None);
                    }
                }
            }
        }

        #[test]
        fn prefixes_of_slash_keys_are_dirs(coords in proptest::collection::vec(0u64..1000, 1..=5)) {
            let ndim = coords.len();
            for k in 0..ndim {
                let def = DEF_SLASH.encode(&coords[..k]);
                prop_assert_eq!(DEF_SLASH.classify(&def, ndim), ChunkPath::Dir(coords[..k].to_vec()));
                if k > 0 {
                    let v2 = V2_SLASH.encode(&coords[..k]);
                    prop_assert_eq!(V2_SLASH.classify(&v2, ndim), ChunkPath::Dir(coords[..k].to_vec()));
                }
            }
        }

        #[test]
        fn decode_is_canonical(key in "[c0-9./+-]{0,12}", ndim in 0usize..5) {
            for enc in ALL {
                if let Some(coords) = enc.decode(&key, ndim) {
                    prop_assert_eq!(enc.encode(&coords), key.clone());
                }
                let _ = enc.classify(&key, ndim);
            }
        }
    }
}
