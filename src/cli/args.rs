//! The command line's clap definitions: the commands, their arguments and help, and the
//! parsers of their values. `settings.rs` and `run.rs` turn them into plain structs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use super::mount_options::LongOption;

#[derive(Debug, Parser)]
#[command(
    name = "zarrfs",
    version,
    about = "Mount sharded Zarr hierarchies as plain, unsharded directory trees"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Shown after `zarrfs mount --help`.
const MOUNT_EXAMPLES: &str = "\
Examples:
  zarrfs mount /data/ds.zarr /mnt/ds                      a local directory
  zarrfs mount s3://bucket/ds.zarr /mnt/ds --read-only    S3 (credentials from the environment)
  zarrfs mount s3://bucket/ds.zarr /mnt/ds --no-sign-request --region us-west-2   public S3 data
  zarrfs mount s3://bucket/ds.zarr /mnt/ds --endpoint-url http://127.0.0.1:9000   S3-compatible server
  zarrfs mount gs://bucket/ds.zarr /mnt/ds                Google Cloud Storage
  zarrfs mount az://container/ds.zarr /mnt/ds             Azure Blob Storage
  zarrfs mount https://example.org/ds.zarr /mnt/ds        a web server (read-only)
  zarrfs mount /data/ds.zarr /mnt/ds -o ro,view=raw,cache_size=1G
  zarrfs /data/ds.zarr /mnt/ds -o ro,allow_other          the form mount(8) and /etc/fstab use
  mount -t fuse.zarrfs /data/ds.zarr /mnt/ds -o ro        the same, through the FUSE mount helper

-o NAME[=VALUE],... (repeatable): first the mount options ro, rw, allow_other, uid=N, gid=N (dev,
suid, exec, noatime, auto, user, defaults, _netdev, nofail, x-* and the like are accepted and
ignored); then every option above by its long name, with _ or - (view=raw, cache_size=1G,
endpoint_url=URL, write_back_delay=5, read_only); then, for remote sources, the object_store
client keys of the source's cloud (aws_virtual_hosted_style_request=true). Anything else is
refused, with the valid names.

Credentials come from each cloud's standard environment variables:
  S3     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION,
         AWS_ENDPOINT_URL, AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or the instance's role
  GCS    GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_SERVICE_ACCOUNT (a key file),
         GOOGLE_SERVICE_ACCOUNT_KEY (the key itself)
  Azure  AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN,
         or AZURE_STORAGE_CLIENT_ID, AZURE_STORAGE_CLIENT_SECRET, AZURE_STORAGE_TENANT_ID
Credentials are never logged.

Unmount with `zarrfs unmount MOUNTPOINT`, `umount MOUNTPOINT` (root) or `fusermount3 -u MOUNTPOINT`.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount SOURCE (a directory, file://, s3://, gs://, az:// or http(s):// URL) at MOUNTPOINT.
    #[command(after_long_help = MOUNT_EXAMPLES, after_help = "Examples, the -o rule and the credential variables: zarrfs mount --help")]
    Mount(Box<MountArgs>),
    /// Unmount a zarrfs mount (only a zarrfs mount, the one on top at MOUNTPOINT).
    Unmount {
        /// Where the zarrfs mount is.
        mountpoint: PathBuf,
    },
    /// Print a live mount's counters: store requests and bytes, HTTP requests, failures and
    /// retries, cache hits, shard commits and conflicts.
    Stats {
        /// Where the zarrfs mount is.
        mountpoint: PathBuf,
        /// Machine-readable output (one JSON object).
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Refresh a table every --interval: rates per second and p50/p99 per operation.
        #[arg(long)]
        watch: bool,
        /// Seconds between refreshes of --watch.
        #[arg(long, value_name = "SECONDS", default_value_t = 1.0, requires = "watch")]
        interval: f64,
    },
    /// Copy the unsharded view of SOURCE to DEST (a directory, s3://, gs:// or az://), byte
    /// for byte what `cp -r` of a mount gives, without mounting (--unshard), or pack SOURCE
    /// into shards (--shard); split over machines with --part; a rerun skips what DEST already
    /// holds. Remote sources and destinations take
    /// their credentials and endpoint from the environment, as listed in `zarrfs mount --help`.
    Copy {
        /// What to copy: a directory, file://, s3://, gs://, az:// or http(s):// URL.
        source: String,
        /// Where to: a directory (created if missing) or an object store URL. It may hold an
        /// earlier or concurrent copy of the same source (what it holds in full is skipped),
        /// but no other hierarchy.
        dest: String,
        /// Write the unsharded view (every inner chunk its own object, metadata rewritten).
        #[arg(long, required_unless_present = "shard", conflicts_with = "shard")]
        unshard: bool,
        /// Pack into shards of SHAPE elements (e.g. 1024,1024; a multiple of the chunk shape):
        /// every v3 array without sharding that has as many dimensions is stored sharded
        /// (inner chunks as they are, index at the end with a CRC-32C), the rest as it is. An
        /// array DEST already holds sharded is packed as it is there (with no SHAPE, only
        /// those are packed). `auto`: each array of any dimensions in a shape of its own, as
        /// many chunks as fit in --shard-size.
        #[arg(long, value_name = "SHAPE|auto", value_parser = parse_shape, num_args = 0..=1, default_missing_value = "")]
        shard: Option<ShardShape>,
        /// With --shard auto: the stored bytes a shard holds at most (from the mean size of the
        /// array's chunks as stored), the same number of chunks along every dimension that has
        /// enough. An array whose shard would hold a single chunk is copied as it is. [default:
        /// 64M]
        #[arg(long, value_name = "BYTES", value_parser = parse_size)]
        shard_size: Option<u64>,
        /// Files copied at once.
        #[arg(long, value_name = "N", default_value_t = crate::copy::DEFAULT_JOBS)]
        jobs: usize,
        /// Copy only part K of N (K from 0 to N-1): whole shards, balanced by bytes, the same
        /// on every machine, so N machines with K = 0..N-1 copy the whole together (a Slurm
        /// job array, a Kubernetes Indexed Job).
        #[arg(long, value_name = "K/N", value_parser = crate::copy::Part::parse)]
        part: Option<crate::copy::Part>,
        /// Compare bytes, not sizes: files DEST holds are read and compared (and rewritten if
        /// they differ), and every file written is read back.
        #[arg(long)]
        verify: bool,
        /// Print the summary as one JSON object on stdout.
        #[arg(long)]
        json: bool,
        /// On a source that cannot be listed (a web server without WebDAV or index pages), the
        /// most shards of an array whose indexes are read to find those stored; an array with
        /// more is an error (as for `zarrfs mount`).
        #[arg(long, value_name = "N")]
        max_probe_shards: Option<u64>,
        /// Seconds between progress lines when stderr is not a terminal (on a terminal, a
        /// progress bar).
        #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
        progress_every: f64,
    },
    /// Print the hierarchy: arrays, sharding, shard and chunk counts, and problems found.
    Inspect {
        /// What to inspect: a directory, file://, s3://, gs://, az:// or http(s):// URL
        /// (remote sources take their credentials and endpoint from the environment, as
        /// listed in `zarrfs mount --help`).
        source: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// How log lines are written (`mount::logging::LogFormat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// One line of text per event (colour only on a terminal).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ViewArg {
    /// Sharded arrays appear unsharded: one file per inner chunk.
    Unsharded,
    /// The store exactly as it is.
    Raw,
    /// Every array as Zarr v2, for readers that know only v2 (read-only).
    V2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum V2CompressorArg {
    /// zstd, level 1.
    Zstd,
    /// gzip, level 1 (for readers without zstd).
    Gzip,
    /// No compressor.
    None,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    /// The hierarchy: a local directory, file:///path, s3://bucket/path, gs://bucket/path,
    /// az://container/path, or an http(s):// URL.
    pub source: String,
    /// An existing directory to mount on (not already a mount point, unless --stack).
    pub mountpoint: PathBuf,

    /// Stay in the foreground and log to stderr (for systemd and debugging).
    #[arg(short, long, help_heading = "Process")]
    pub foreground: bool,
    /// FUSE worker threads (default: two per core, at least 4, at most 16).
    #[arg(long, value_name = "N", help_heading = "Process")]
    pub threads: Option<usize>,
    /// Object store endpoint (e.g. an S3-compatible server: http://127.0.0.1:9000).
    #[arg(long, value_name = "URL", help_heading = "Remote sources")]
    pub endpoint_url: Option<String>,
    /// Object store region.
    #[arg(long, value_name = "REGION", help_heading = "Remote sources")]
    pub region: Option<String>,
    /// Anonymous access (public datasets): requests are not signed.
    #[arg(long, help_heading = "Remote sources")]
    pub no_sign_request: bool,
    /// Web servers that list no directory: the most shards (or chunk keys of unsharded
    /// arrays) one chunk directory's listing asks for (default 4096); beyond it, see docs/remote.md.
    #[arg(long, value_name = "N", help_heading = "Remote sources")]
    pub max_probe_shards: Option<u64>,
    /// NAME[=VALUE],...: mount options (ro, allow_other, uid=N, ...), the options here by name
    /// (view=raw, cache_size=1G) and object_store client keys; the rule is in --help.
    #[arg(short = 'o', value_name = "OPTIONS", value_parser = parse_key_value, help_heading = "Process")]
    pub option: Vec<(String, String)>,
    /// Mount on top of a directory that is already a mount point (refused otherwise: what is
    /// mounted there would be hidden).
    #[arg(long, help_heading = "Process")]
    pub stack: bool,
    /// Append log lines to this file (default: stderr in the foreground, nowhere otherwise).
    #[arg(long, value_name = "PATH", help_heading = "Process")]
    pub log_file: Option<PathBuf>,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text, help_heading = "Process")]
    pub log_format: LogFormatArg,
    /// Serve Prometheus metrics at http://ADDRESS/metrics: a PORT alone listens on 127.0.0.1;
    /// HOST:PORT beyond loopback needs --metrics-allow-remote (docs/metrics.md).
    #[arg(long, value_name = "[HOST:]PORT", help_heading = "Process")]
    pub metrics_address: Option<String>,
    /// Let --metrics-address listen beyond loopback (e.g. 0.0.0.0:9464 in a pod).
    #[arg(long, help_heading = "Process", requires = "metrics_address")]
    pub metrics_allow_remote: bool,

    /// Refuse every change (mounts are writable by default when the source is).
    #[arg(long, help_heading = "View", conflicts_with = "writable")]
    pub read_only: bool,
    /// Allow writes (the default; accepted for scripts that say so).
    #[arg(long, help_heading = "View", hide = true)]
    pub writable: bool,
    /// Opt-in write-back: commit closed chunk files per shard after this many seconds (or when
    /// a shard is complete, on fsync, unmount, SIGTERM) instead of at every close.
    #[arg(long, value_name = "SECONDS", help_heading = "View")]
    pub write_back_delay: Option<f64>,
    /// Make each closed chunk file durable in a journal on local disk (fsynced before close
    /// returns) and commit shards in batches after --write-back-delay (default 1 s); after a
    /// crash the next mount commits what the journal holds. The default for remote sources.
    #[arg(long, help_heading = "View", conflicts_with = "no_journal")]
    pub journal: bool,
    /// Remote sources: commit every closed chunk file to the store before close returns (or,
    /// with --write-back-delay, hold closed files in memory only) instead of journaling them.
    #[arg(long, help_heading = "View")]
    pub no_journal: bool,
    /// Where the journal lives (implies --journal); default: a directory per source and
    /// mountpoint under $XDG_CACHE_HOME/zarrfs/journal (~/.cache/zarrfs/journal).
    #[arg(long, value_name = "DIR", help_heading = "View", conflicts_with = "no_journal")]
    pub journal_dir: Option<PathBuf>,
    /// How sharded arrays are shown.
    #[arg(long, value_enum, default_value_t = ViewArg::Unsharded, help_heading = "View")]
    pub view: ViewArg,
    /// The v2 view: the compressor of chunks whose codecs v2 cannot name, which it transcodes.
    #[arg(long, value_enum, default_value_t = V2CompressorArg::Zstd, help_heading = "View")]
    pub v2_compressor: V2CompressorArg,
    /// Serve the extended attributes `user.zarrfs.source` (where a file's bytes live) and
    /// `user.zarrfs.stats`. Off by default: without them `ls -l` costs no round trips for
    /// attributes (`zarrfs stats` works either way).
    #[arg(long, help_heading = "View")]
    pub xattr: bool,

    /// Let other users access the mount.
    #[arg(long, help_heading = "Access")]
    pub allow_other: bool,
    /// Owner shown for every file (default: the user running zarrfs).
    #[arg(long, value_name = "N", help_heading = "Access")]
    pub uid: Option<u32>,
    /// Group shown for every file (default: the group running zarrfs).
    #[arg(long, value_name = "N", help_heading = "Access")]
    pub gid: Option<u32>,

    /// Memory for decoded shard indexes and, for remote sources, cached shard bytes (suffixes
    /// K, M, G allowed; default 64M for local sources, 512M for remote ones). As much again,
    /// at most, for the chunks held by files open for reading (beyond it they read range by
    /// range).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = "Caching")]
    pub cache_size: Option<u64>,
    /// Bytes read along with a shard's index, so that a shard that fits costs one request, and
    /// the read-ahead window of large stored files (default 8M for remote sources, 0 for local
    /// ones).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = "Caching")]
    pub prefetch_size: Option<u64>,
    /// The most inodes the daemon keeps for files and directories the kernel has seen (about 70
    /// to 79 bytes each); beyond it the kernel is asked to forget the directories walked
    /// longest ago (default 1048576, and never more than fit in 36 MiB and the part of
    /// --cache-size that shard indexes do not take). A walk of more files than this (du, ls -l,
    /// rsync of millions of chunk files) then keeps memory bounded, and a walk again looks them
    /// up anew. At least 1024.
    #[arg(long, value_name = "N", help_heading = "Caching")]
    pub max_inodes: Option<usize>,
    /// Memory for the content of files being written, in bytes (suffixes K, M, G); beyond it
    /// they spill to unlinked files in the temporary directory ($TMPDIR). With the journal,
    /// also the most that may wait in it: beyond that a close first commits what is pending.
    #[arg(long, value_name = "BYTES", default_value = "256M", value_parser = parse_size, help_heading = "Caching")]
    pub write_buffer_size: u64,
    /// Seconds for which metadata, shard indexes and (remote) listings are trusted before being
    /// checked again, or `indefinite`. Default: a local source on a local filesystem is
    /// watched instead (trusted until it changes; changes show at once); other local sources
    /// 1, remote ones 60. Giving a TTL turns the watch off.
    #[arg(long, value_name = "SECONDS|indefinite", value_parser = parse_ttl, help_heading = "Caching")]
    pub metadata_ttl: Option<Duration>,
    /// Remote sources: keep the shard bytes, indexes and metadata that reads fetch in this
    /// directory, by object version, and read them from there (also after a remount) while
    /// the version is confirmed within --metadata-ttl. One mount at a time per directory.
    #[arg(long, value_name = "DIR", help_heading = "Caching")]
    pub cache: Option<PathBuf>,
    /// The most disk the --cache directory may hold (suffixes K, M, G); the least recently
    /// used blocks go first.
    #[arg(long, value_name = "BYTES", default_value = "5G", value_parser = parse_size, help_heading = "Caching")]
    pub max_cache_size: u64,
}

/// The long options of `zarrfs mount`, for `-o NAME=VALUE` (see `mount_options`).
pub fn mount_long_options() -> Vec<LongOption> {
    let command = Cli::command();
    let Some(mount) = command.find_subcommand("mount") else {
        return Vec::new();
    };
    mount
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter_map(|a| {
            let name = a.get_long()?;
            (name != "help").then(|| LongOption {
                name: name.to_string(),
                takes_value: a.get_action().takes_values(),
            })
        })
        .collect()
}

/// Seconds (fractions allowed) or `indefinite`.
fn parse_ttl(s: &str) -> Result<Duration, String> {
    if s.eq_ignore_ascii_case("indefinite") {
        return Ok(crate::fs::INDEFINITE_TTL);
    }
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(Duration::from_secs_f64(secs.min(1e9))),
        _ => Err(format!("{s:?}: a non-negative number of seconds, or indefinite")),
    }
}

/// `key=value`.
fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?}: expected key=value")),
    }
}

/// `123`, `64K`, `64M`, `2G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 10),
        Some((i, 'm' | 'M')) => (&s[..i], 20),
        Some((i, 'g' | 'G')) => (&s[..i], 30),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|_| format!("not a size: {s:?}"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size too large: {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}

/// What `--shard` packs into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardShape {
    /// Shards of this shape in elements (empty: only the shapes DEST holds).
    Given(Vec<u64>),
    /// A shape for each array (`--shard auto`).
    Auto,
}

/// `--shard SHAPE`: positive integers separated by commas; `auto`; none (`--shard` alone): the
/// shapes DEST holds.
fn parse_shape(s: &str) -> Result<ShardShape, String> {
    if s.is_empty() {
        return Ok(ShardShape::Given(Vec::new()));
    }
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(ShardShape::Auto);
    }
    let shape: Option<Vec<u64>> = s.split(',').map(|d| d.trim().parse().ok().filter(|&d| d > 0)).collect();
    shape
        .filter(|shape| !shape.is_empty())
        .map(ShardShape::Given)
        .ok_or_else(|| {
            format!(
                "{s:?}: expected a shard shape in elements, positive integers separated by commas (e.g. 1024,1024), \
             or auto"
            )
        })
}
