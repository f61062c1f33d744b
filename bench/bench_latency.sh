#!/usr/bin/env bash
# Latency benchmark of zarrfs (issue 23): the unsharded view against the tools a user would
# otherwise use, at cloud round trips, side by side in one run. Every server runs on 127.0.0.1
# behind zarrfs-delay-proxy (this kernel has no netem), which adds the round trip (half each way,
# one more for a new connection) and logs what clients send, so that the round trips of wall
# time ("waves") a workload took can be counted. For each round trip of LATENCIES and each inner
# chunk size of SIZES (8 KiB, 128 KiB; 4096x4096 uint16 arrays of 16 shards written by xarray
# with consolidated metadata), rows:
#   a  rclone copy :http: of the stored shards, 16 transfers (the reference: the same bytes)
#   b  cp -r of the array from a fresh zarrfs mount of the URL (unsharded view), vs a
#   c  rclone copy (local, 16 transfers) from the view, vs a
#   d  zarr-python 3 and xarray (defaults) through the view vs directly over HTTP (fsspec)
#   e  tensorstore reading the sharded array over HTTP, writing an unsharded copy, vs b
#   f  cat of the first chunk file right after the mount: seconds, requests, round trips
#   g  a cold find, ls -lR and du -s of the root (3 arrays, 48 shards)
#   h  S3 (moto): rclone's raw copy, cp -r of the view, f and g
#   x  zarrfs copy URL DEST --unshard of the dataset to local disk (issue 26; no mount), vs a
#      and, when e is measured too, vs e (tensorstore's unshard of the same array)
#   y  zarrfs copy URL s3://... --unshard of the dataset from HTTP to S3 (moto; both behind the
#      proxy, a fresh prefix each run), vs rclone uploading row n's unsharded copy (16 transfers);
#      both uploads checked against that copy (listing, ETags, a sample read back)
#   k  cp -r of the view from a remount with the --cache of a mount that copied it once (issue
#      25), within the metadata TTL and after it, vs the native cp -r of row n
# and once per size, before the latency loops, with no network and no FUSE:
#   n  the clients of b, c and d (cp -r, rclone copy local, zarr-python, xarray) on an unsharded
#      copy of the view on local disk under the work directory (cp -r of the view's dataset from a
#      0 ms mount, checked): the client's own cost per file, a floor for b, c and d, which the
#      table shows next to them as "vs floor" (zarrfs seconds / n seconds of the same client);
#      with y and without n, only the copy is made (y uploads it)
# Every copy and read is checked against the written data. The table shows, next to each
# zarrfs row, the daemon's http_requests, get, get_bytes and requests_in_flight_peak.
#
# nginx (WebDAV on LAT_HTTP_PORT, index pages on the next port) and moto (LAT_S3_PORT) are
# private instances of scripts/servers.sh under the work directory: the tests' servers on the
# default ports are neither disturbed nor used. Mounts, proxies and servers of this run are
# ended on exit; the binaries are copied into the work directory first.
#
# Usage: bench/bench_latency.sh
#        ZARRFS_BIN=/var/tmp/zarrfs-before bench/bench_latency.sh   (another binary)
#        LATENCIES="50" SIZES=small ROWS=bfg bench/bench_latency.sh (a part of it)
# Env:   ZARRFS_BIN        binary (default target/release/zarrfs)
#        ZARRFS_PROXY_BIN  the delaying proxy (default: zarrfs-delay-proxy beside ZARRFS_BIN,
#                          else target/release/zarrfs-delay-proxy, built once if missing)
#        LATENCIES         round trips in ms (default "0 20 50")
#        SIZES             "small large" (default both: 8 KiB and 128 KiB inner chunks)
#        ROWS              letters of the rows above (default abcdefghknxy; b is measured for e too)
#        RUNS              timed runs per measurement, the fastest is kept (default 1)
#        FLOOR_RUNS        timed runs of each row n, the fastest is kept (default: RUNS, at least 2)
#        CLIENT_CAP        seconds after which a Python client row (d, e) is stopped and shown
#                          as a lower bound (default 120: xarray's defaults over HTTP at 50 ms)
#        BENCH_DIR         work directory (default: a new one under ${TMPDIR:-/var/tmp}, removed after)
#        LAT_S3_PORT       port of the private moto (default 9290)
#        LAT_HTTP_PORT     port of the private nginx (default 9291; the next four are taken too)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$REPO/.venv/bin/python"
SERVERS="$REPO/scripts/servers.sh"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"

source "$REPO/bench/bench_lib.sh" bench-latency
find_delay_proxy

# Ends only what this run started: mounts under $WORK, pids it recorded whose command line
# names $WORK, and the servers whose pid files are under $WORK/servers.
full_cleanup() {
    end_work_processes
    if [ -d "$WORK/servers" ]; then
        ZARRFS_SERVERS_DIR="$WORK/servers" bash "$SERVERS" stop http s3 >/dev/null 2>&1 || true
    fi
    cleanup
}
trap full_cleanup EXIT

ensure_rclone_and_aiohttp

"$PY" "$REPO/bench/bench_latency.py" run "$WORK" --bin "$BIN" --proxy "$PROXY"
