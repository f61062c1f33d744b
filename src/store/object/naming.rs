//! Naming in object stores: a key's object path under the source prefix (and back), and an
//! object's [`Version`] (its ETag, or its generation on GCS) and how preconditions name it.

use object_store::path::Path;
use object_store::UpdateVersion;

use super::{Flavor, ObjectBackend};
use crate::store::key::validate;
use crate::store::{ObjectMeta, StoreResult, Version};

impl ObjectBackend {
    pub(super) fn path(&self, key: &str) -> StoreResult<Path> {
        validate(key)?;
        Ok(self.raw_path(key))
    }

    /// The object path of a key: taken as stored (`Path::parse`), because keys written by
    /// other clients (spaces, non-ASCII names) come back from listings as they are, and an
    /// encoding `Path::from` would name another object.
    pub(super) fn raw_path(&self, rel: &str) -> Path {
        let rel = rel.trim_end_matches('/');
        let full = match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{rel}", self.prefix),
        };
        Path::parse(&full).unwrap_or_else(|_| Path::from(full.as_str()))
    }

    /// The key of a listed object (its path without the source prefix).
    pub(super) fn key_of(&self, path: &Path) -> Option<String> {
        let full = path.as_ref();
        if self.prefix.is_empty() {
            return Some(full.to_string());
        }
        full.strip_prefix(self.prefix.as_str())?
            .strip_prefix('/')
            .map(str::to_string)
    }

    pub(super) fn meta_of(&self, meta: &object_store::ObjectMeta) -> ObjectMeta {
        ObjectMeta {
            size: meta.size,
            version: version_of(meta, self.flavor),
            mtime_ns: Some(mtime_ns(meta.last_modified.timestamp(), &version_of(meta, self.flavor))),
        }
    }
}

/// The time shown for an object: its last modification to the second, with a sub-second part
/// taken from its version. Object stores give times to the second (and listings to the
/// millisecond), so two versions written within one second would otherwise show one time, and
/// a read-only mount, whose files the kernel reads without opening them and keeps until their
/// time or size changes (`fs/unopened.rs`), would keep the first version's pages. With the
/// version in it, every new version shows a new time, the same in a listing and in a read.
pub(super) fn mtime_ns(seconds: i64, version: &Version) -> i128 {
    i128::from(seconds) * 1_000_000_000 + i128::from(crc32c::crc32c(version.0.as_bytes()) % 1_000_000_000)
}

/// Our version of an object: on GCS its generation (what its preconditions name), elsewhere
/// its ETag; failing those the other one, else its mtime and size.
pub(super) fn version_of(meta: &object_store::ObjectMeta, flavor: Flavor) -> Version {
    let generation = meta.version.as_ref().map(|g| Version(format!("g:{g}")));
    let etag = meta.e_tag.as_ref().map(|e| Version(e.clone()));
    let preferred = if flavor == Flavor::Gcs {
        generation.or(etag)
    } else {
        etag.or(generation)
    };
    preferred.unwrap_or_else(|| {
        Version(format!(
            "m:{}:{}",
            meta.last_modified.timestamp_nanos_opt().unwrap_or(0),
            meta.size
        ))
    })
}

/// The version as preconditions want it (ETag, or GCS generation).
pub(super) fn update_version(v: &Version) -> UpdateVersion {
    match v.0.strip_prefix("g:") {
        Some(generation) => UpdateVersion {
            e_tag: None,
            version: Some(generation.to_string()),
        },
        None => UpdateVersion {
            e_tag: Some(v.0.clone()),
            version: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_shows_its_own_time_within_its_second() {
        let v1 = Version("\"etag-1\"".into());
        let v2 = Version("\"etag-2\"".into());
        assert_ne!(mtime_ns(100, &v1), mtime_ns(100, &v2));
        assert_eq!(mtime_ns(100, &v1), mtime_ns(100, &v1.clone()));
        for v in [&v1, &v2] {
            let t = mtime_ns(100, v);
            assert!(
                (100_000_000_000..101_000_000_000).contains(&t),
                "{t} not within its second"
            );
        }
    }
}
