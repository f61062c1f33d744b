//! Running a parsed command line: each command handed to the folder that does it (`mount/`,
//! `copy/`, `inspect/`) with plain settings built from its arguments. Exit codes are decided
//! here and nowhere else.

use anyhow::{bail, Result};
use clap::Parser;

use super::args::{Cli, Command, ShardShape};
use crate::copy::{CopyOptions, Part, Shaping, DEFAULT_SHARD_BYTES};
use crate::mount::logging::message;
use crate::mount::settings::{MountSettings, SourceSpec};
use crate::mount::source::open_store;
use crate::store::object::SearchOptions;

/// Run a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Mount(args) => match args.settings() {
            Ok(settings) => crate::mount::launch::mount(settings),
            Err(message) => Err(anyhow::anyhow!(message)),
        },
        Command::Unmount { mountpoint } => crate::mount::unmount::unmount(&mountpoint),
        Command::Stats {
            mountpoint,
            watch: true,
            interval,
            ..
        } if interval.is_finite() && (0.1..=3600.0).contains(&interval) => {
            crate::mount::stats_watch::run(&mountpoint, std::time::Duration::from_secs_f64(interval))
        }
        Command::Stats {
            watch: true, interval, ..
        } => Err(anyhow::anyhow!("--interval {interval}: between 0.1 and 3600 seconds")),
        Command::Stats { mountpoint, json, .. } => crate::mount::stats::print(&mountpoint, json),
        Command::Inspect { source, json } => inspect(&source, json),
        Command::Copy {
            shard_size: Some(_),
            shard,
            ..
        } if shard != Some(ShardShape::Auto) => Err(anyhow::anyhow!(
            "--shard-size goes with --shard auto (with --shard SHAPE, SHAPE sets the shards' size)"
        )),
        Command::Copy {
            source,
            dest,
            jobs,
            part,
            verify,
            json,
            progress_every,
            shard,
            shard_size,
            max_probe_shards,
            ..
        } => read_settings(&source, max_probe_shards).and_then(|read| {
            crate::copy::run(&CopyOptions {
                source,
                read,
                dest,
                jobs,
                part: part.unwrap_or(Part::WHOLE),
                verify,
                json,
                progress_every: std::time::Duration::try_from_secs_f64(progress_every.clamp(0.1, 1e6))
                    .unwrap_or(std::time::Duration::from_secs(10)),
                shard: shard.map(|s| match s {
                    ShardShape::Given(shape) => Shaping::Shape(shape),
                    ShardShape::Auto => Shaping::Auto {
                        bytes: shard_size.unwrap_or(DEFAULT_SHARD_BYTES),
                    },
                }),
            })
            .map(drop)
        }),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("zarrfs: {}", message(&e));
            1
        }
    }
}

/// The settings a read-only mount of `source` with the default options would run from, for a
/// copy to read the source exactly as such a mount reads it (its caches, prefetch window, TTL).
pub fn read_settings(source: &str, max_probe_shards: Option<u64>) -> Result<MountSettings> {
    let mut argv = vec![
        "zarrfs".to_string(),
        "mount".into(),
        source.into(),
        "/".into(),
        "--read-only".into(),
    ];
    if let Some(n) = max_probe_shards {
        argv.extend(["--max-probe-shards".into(), n.to_string()]);
    }
    let cli = Cli::try_parse_from(argv)?;
    let Command::Mount(args) = cli.command else {
        bail!("{source}: not a source");
    };
    args.settings().map_err(|m| anyhow::anyhow!(m))
}

fn inspect(source: &str, json: bool) -> Result<()> {
    let spec = SourceSpec::parse(source).map_err(|m| anyhow::anyhow!(m))?;
    let (store, _) = open_store(&spec, false, SearchOptions::default(), None)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = runtime.block_on(crate::inspect::inspect(store.clone()))?;
    if report.groups.is_empty() && report.arrays.is_empty() && report.problems.is_empty() {
        let v2 = [".zgroup", ".zarray", ".zmetadata"]
            .into_iter()
            .find(|key| runtime.block_on(store.head(key)).is_ok_and(|found| found.is_some()));
        match v2 {
            Some(key) => bail!(
                "no Zarr v3 hierarchy found at {source}: it holds Zarr v2 metadata ({key}), which \
                 zarrfs shows as stored (v2 has no sharding to undo)"
            ),
            None => bail!("no Zarr hierarchy found at {source}: no zarr.json in it or below it"),
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}
