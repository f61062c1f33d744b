//! A mount's settings: `zarrfs mount`'s arguments validated once into the plain struct the
//! daemon runs from (sources parsed, defaults that depend on the source filled in: caches,
//! TTLs, and the write journal of remote sources with its directory).

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{mount_long_options, LogFormat, MountArgs, SourceSpec, V2CompressorArg, ViewArg};
use crate::store::remote::RemoteOptions;
use crate::view::ViewMode;

/// How long journaled files wait before their shards are committed, unless
/// --write-back-delay says otherwise: long enough to gather a copy's files of a shard into
/// one commit, short enough that other mounts see them soon.
pub const JOURNAL_DELAY: Duration = Duration::from_secs(1);

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
    /// What preparing the mount found worth a warning about the source (no Zarr in a local
    /// directory); said on stderr and in the log once logging runs.
    pub source_warning: Option<String>,
}

impl MountArgs {
    pub fn settings(self) -> Result<MountSettings, String> {
        let mut source = SourceSpec::parse(&self.source)?;
        if let SourceSpec::Remote { options, .. } = &mut source {
            *options = RemoteOptions {
                endpoint: self.endpoint_url.clone(),
                region: self.region.clone(),
                no_sign_request: self.no_sign_request,
                options: self.option.clone(),
            };
        } else if let Some((key, _)) = self.option.first() {
            return Err(crate::mount_options::unknown(key, &mount_long_options()));
        } else if self.endpoint_url.is_some() || self.region.is_some() || self.no_sign_request {
            return Err("--endpoint-url, --region and --no-sign-request apply to remote sources only".into());
        }
        let remote = matches!(source, SourceSpec::Remote { .. });
        let journal = match (&self.journal_dir, self.journal || remote) {
            _ if self.no_journal || self.read_only => None,
            (Some(dir), _) => Some(JournalDir::Named(dir.clone())),
            (None, true) => Some(JournalDir::Default),
            (None, false) => None,
        };
        let has_journal = journal.is_some();
        if self.cache.is_some() && !remote {
            return Err("--cache applies to remote sources (a local source is read from its own disk)".into());
        }
        Ok(MountSettings {
            journal,
            source,
            mountpoint: self.mountpoint,
            foreground: self.foreground,
            threads: self.threads.filter(|&n| n > 0),
            max_inodes: self.max_inodes.unwrap_or(crate::fuse::DEFAULT_MAX_INODES).max(1024),
            log_file: self.log_file,
            log_format: self.log_format,
            view: match self.view {
                ViewArg::Unsharded => ViewMode::Unsharded,
                ViewArg::Raw => ViewMode::Raw,
                ViewArg::V2 => ViewMode::V2,
            },
            writable: !self.read_only,
            write_back_delay: match self.write_back_delay {
                None if has_journal => Some(JOURNAL_DELAY),
                Some(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s.min(86_400.0))),
                Some(s) => {
                    return Err(format!(
                        "--write-back-delay {s}: must be a non-negative number of seconds"
                    ))
                }
                None => None,
            },
            allow_other: self.allow_other,
            uid: self.uid.unwrap_or_else(|| nix::unistd::getuid().as_raw()),
            gid: self.gid.unwrap_or_else(|| nix::unistd::getgid().as_raw()),
            cache_bytes: usize::try_from(self.cache_size.unwrap_or(if remote { 512 << 20 } else { 64 << 20 }))
                .unwrap_or(usize::MAX),
            prefetch_bytes: self.prefetch_size.unwrap_or(if remote { 8 << 20 } else { 0 }),
            write_buffer_bytes: usize::try_from(self.write_buffer_size).unwrap_or(usize::MAX),
            watch: !remote && self.metadata_ttl.is_none(),
            metadata_ttl: self
                .metadata_ttl
                .unwrap_or(Duration::from_secs(if remote { 60 } else { 1 })),
            disk_cache: self.cache.map(|dir| (dir, self.max_cache_size)),
            xattr: self.xattr,
            max_probe_shards: self.max_probe_shards.unwrap_or(crate::shard::DEFAULT_MAX_PROBE_SHARDS),
            v2_compressor: match self.v2_compressor {
                V2CompressorArg::Zstd => crate::zarr::transcode::V2Compressor::Zstd,
                V2CompressorArg::Gzip => crate::zarr::transcode::V2Compressor::Gzip,
                V2CompressorArg::None => crate::zarr::transcode::V2Compressor::None,
            },
            stack: self.stack,
            source_warning: None,
        })
    }
}
