//! Store keys: `/`-separated, no leading or trailing slash, no empty, `.` or `..` segments,
//! no NUL. Validation here is what keeps every backend inside its root: the local store only
//! ever joins validated keys onto its root directory.

use super::StoreError;

/// Check that `key` is a valid store key (see module docs).
pub fn validate(key: &str) -> Result<(), StoreError> {
    let bad = |reason| {
        Err(StoreError::InvalidKey {
            key: key.to_string(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("empty key");
    }
    if key.contains('\0') {
        return bad("contains NUL");
    }
    for segment in key.split('/') {
        match segment {
            "" => return bad("empty path segment"),
            "." | ".." => return bad("relative path segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Check a directory prefix: empty (the root) or a valid key followed by `/`.
pub fn validate_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.is_empty() {
        return Ok(());
    }
    match prefix.strip_suffix('/') {
        Some(dir) => validate(dir),
        None => Err(StoreError::InvalidKey {
            key: prefix.to_string(),
            reason: "prefix must end with '/'",
        }),
    }
}

/// The prefix form of a directory key: `""` stays `""`, `"a/b"` becomes `"a/b/"`.
pub fn dir_prefix(dir: &str) -> String {
    if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    }
}

/// The keys of `cache` that start with `prefix`, to drop them (the `lru` crate has no
/// `retain`): what the caches that forget everything under a prefix share.
pub fn keys_under<V>(cache: &lru::LruCache<String, V>, prefix: &str) -> Vec<String> {
    cache
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(k, _)| k.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_escapes_and_oddities() {
        for bad in ["", "/a", "a/", "a//b", "../x", "a/../b", "./a", "a\0b", ".."] {
            assert!(validate(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "a/b", "c/0/1", ".zarray", "x..y", "a/.hidden"] {
            assert!(validate(good).is_ok(), "{good:?} rejected");
        }
    }

    #[test]
    fn prefixes() {
        assert!(validate_prefix("").is_ok());
        assert!(validate_prefix("a/b/").is_ok());
        assert!(validate_prefix("a/b").is_err());
        assert!(validate_prefix("/").is_err());
        assert_eq!(dir_prefix("a"), "a/");
    }
}
