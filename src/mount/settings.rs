//! A mount's settings: the plain, validated struct the daemon runs from (the source parsed into
//! a [`SourceSpec`], defaults that depend on it filled in: caches, TTLs, and the write journal
//! of remote sources with its directory). The command line builds it from `zarrfs mount`'s
//! arguments (`cli/settings.rs`); nothing here knows how they were spelt. A copy names its
//! source and destination with a [`SourceSpec`] too.

use std::path::PathBuf;
use std::time::Duration;

use super::logging::LogFormat;
use crate::store::remote::{is_remote_url, RemoteOptions};
use crate::view::ViewMode;

/// How long journaled files wait before their shards are committed, unless
/// --write-back-delay says otherwise: long enough to gather a copy's files of a shard into
/// one commit, short enough that other mounts see them soon.
pub const JOURNAL_DELAY: Duration = Duration::from_secs(1);

/// Where the data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    Local(PathBuf),
    /// An object store URL (`s3://`, `gs://`, `az://`, `http(s)://`, …) and how to reach it.
    Remote {
        url: String,
        options: RemoteOptions,
    },
}

impl SourceSpec {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.split_once("://") {
            None => Ok(SourceSpec::Local(PathBuf::from(s))),
            Some(("file", path)) if path.starts_with('/') => Ok(SourceSpec::Local(PathBuf::from(path))),
            Some(("file", _)) => Err(format!(
                "{s}: a file:// URL needs an absolute path (file:///data/x.zarr)"
            )),
            Some(_) if is_remote_url(s) => Ok(SourceSpec::Remote {
                url: s.to_string(),
                options: Default::default(),
            }),
            Some((scheme, _)) => Err(format!(
                "{s}: unsupported scheme {scheme}:// (use a path, file://, s3://, gs://, az://, http:// or https://)"
            )),
        }
    }
}

/// Where a mount's journal lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalDir {
    /// Named with --journal-dir.
    Named(PathBuf),
    /// One per source and mountpoint under the user's cache directory (`journal_dir`).
    Default,
}

impl JournalDir {
    /// The directory for a mount of `source` at `mountpoint` (absolute).
    pub fn resolve(&self, source: &str, mountpoint: &std::path::Path) -> PathBuf {
        match self {
            JournalDir::Named(dir) => dir.clone(),
            JournalDir::Default => {
                let cache = std::env::var_os("XDG_CACHE_HOME")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                    .unwrap_or_else(|| std::env::temp_dir().join(format!("zarrfs-{}", nix::unistd::getuid())));
                let named = format!("{source}\0{}", mountpoint.display());
                let slug: String = source
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let slug = slug.trim_matches('_');
                let slug = &slug[slug.len().saturating_sub(48)..];
                cache
                    .join("zarrfs")
                    .join("journal")
                    .join(format!("{slug}-{:08x}", crc32c::crc32c(named.as_bytes())))
            }
        }
    }
}

/// Everything a mount needs, validated.
#[derive(Debug, Clone)]
pub struct MountSettings {
    pub source: SourceSpec,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub threads: Option<usize>,
    /// Inodes kept at most before the kernel is asked to forget some (`fuse/pruning.rs`).
    pub max_inodes: usize,
    pub log_file: Option<PathBuf>,
    pub log_format: LogFormat,
    pub view: ViewMode,
    pub writable: bool,
    pub write_back_delay: Option<Duration>,
    /// Journal closed chunk files here (`fs/journaling.rs`); `None`: no journal.
    pub journal: Option<JournalDir>,
    pub allow_other: bool,
    pub uid: u32,
    pub gid: u32,
    pub cache_bytes: usize,
    pub prefetch_bytes: u64,
    pub write_buffer_bytes: usize,
    pub metadata_ttl: Duration,
    /// Watch a local source for changes instead of trusting it for `metadata_ttl` (no
    /// `--metadata-ttl` was given; see `store/local/watch.rs`).
    pub watch: bool,
    /// `--cache`: a disk cache of what reads fetch (remote sources), and its bound in bytes.
    pub disk_cache: Option<(PathBuf, u64)>,
    /// Serve the `user.zarrfs.*` extended attributes.
    pub xattr: bool,
    /// Most shard indexes read to list one chunk directory of a source that cannot be listed.
    pub max_probe_shards: u64,
    pub v2_compressor: crate::zarr::transcode::V2Compressor,
    /// Mount even where a mount point already is.
    pub stack: bool,
    /// `--metrics-address`: serve Prometheus metrics here (checked against loopback already).
    pub metrics_address: Option<std::net::SocketAddr>,
    /// What preparing the mount found worth a warning about the source (no Zarr in a local
    /// directory); said on stderr and in the log once logging runs.
    pub source_warning: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        assert_eq!(SourceSpec::parse("/a/b"), Ok(SourceSpec::Local("/a/b".into())));
        assert_eq!(SourceSpec::parse("file:///a/b"), Ok(SourceSpec::Local("/a/b".into())));
        assert!(matches!(
            SourceSpec::parse("s3://bucket/x"),
            Ok(SourceSpec::Remote { .. })
        ));
        assert!(SourceSpec::parse("ftp://host/x")
            .unwrap_err()
            .contains("unsupported scheme"));
        assert!(SourceSpec::parse("file://relative").is_err());
    }
}
