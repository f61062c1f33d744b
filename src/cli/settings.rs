//! `zarrfs mount`'s arguments validated once into the plain [`MountSettings`] the daemon runs
//! from: the source parsed, and the defaults that depend on it filled in (caches, TTLs, the
//! write journal of remote sources with its directory).

use std::time::Duration;

use super::args::{mount_long_options, LogFormatArg, MountArgs, V2CompressorArg, ViewArg};
use crate::mount::logging::LogFormat;
use crate::mount::settings::{JournalDir, MountSettings, SourceSpec, JOURNAL_DELAY};
use crate::store::remote::RemoteOptions;
use crate::view::ViewMode;

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
            return Err(super::mount_options::unknown(key, &mount_long_options()));
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
        let metrics_address = match &self.metrics_address {
            Some(text) => Some(crate::metrics::address::parse(text, self.metrics_allow_remote)?),
            None => None,
        };
        Ok(MountSettings {
            metrics_address,
            journal,
            source,
            mountpoint: self.mountpoint,
            foreground: self.foreground,
            threads: self.threads.filter(|&n| n > 0),
            max_inodes: self.max_inodes.unwrap_or(crate::fuse::DEFAULT_MAX_INODES).max(1024),
            log_file: self.log_file,
            log_format: match self.log_format {
                LogFormatArg::Text => LogFormat::Text,
                LogFormatArg::Json => LogFormat::Json,
            },
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
