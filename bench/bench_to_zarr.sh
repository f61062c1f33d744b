#!/usr/bin/env bash
# Writing new unsharded data into an S3 mount, against the same write straight to the bucket.
# xarray:
# `to_zarr(mode="w")` of a small dataset (2 variables and 3 coordinates of one chunk each, and
# their group: 11 files, unsharded, zarr-python's defaults) into an empty prefix of a fresh
# mount (default options: journal), then again over it, then read back with `open_zarr` and
# compared ("ok"). The reference row `direct` is zarr-python's `ObjectStore` (obstore) on the
# same bucket. moto runs on 127.0.0.1 (a private instance of scripts/servers.sh, port
# TOZARR_S3_PORT) behind zarrfs-delay-proxy at each round trip of LATENCIES; rows are
# interleaved, the fastest of RUNS kept. The mount rows show the daemon's store requests (zarrfs stats: get/head/put/erase/list).
# cp -r: an unsharded array of 100 chunk files of 8 KiB and its zarr.json copied into the mount
# (then `sync DIR` inside it, until the store holds them: column "stored"), against
# `rclone copy` of the same tree to the bucket (its defaults: 4 transfers). The to_zarr rows
# of the mount also show the time until the store holds what was written.
#
# Usage: bench/bench_to_zarr.sh
# Env:   ZARRFS_BIN         binary (default target/release/zarrfs)
#        ZARRFS_BIN_BEFORE  a second binary, measured in the same rounds (row "before")
#        ZARRFS_PROXY_BIN   the delaying proxy (default: beside ZARRFS_BIN, else built once)
#        LATENCIES          round trips in ms (default "0 20")
#        RUNS               rounds (default 2)
#        TOZARR_S3_PORT     port of the private moto (default 9391)
#        BENCH_DIR          work directory (default: a new one under ${TMPDIR:-/var/tmp}, removed after)
# The client runs in .venv-zarr34 (zarr 3.4) when it is there, else .venv; obstore is
# pip-installed into it when missing.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
source "$REPO/bench/bench_lib.sh" bench-to-zarr
find_delay_proxy
PY="$REPO/.venv/bin/python"
[ -x "$REPO/.venv-zarr34/bin/python" ] && PY="$REPO/.venv-zarr34/bin/python"
if ! "$PY" -c 'import obstore' 2>/dev/null; then
    say "installing obstore (pip, into $("$PY" -c 'import sys; print(sys.prefix)'))"
    "$PY" -m pip install -q --disable-pip-version-check obstore >&2
fi
full_cleanup() {
    end_work_processes
    ZARRFS_SERVERS_DIR="$WORK/servers" ZARRFS_S3_PORT="${TOZARR_S3_PORT:-9391}" \
        bash "$REPO/scripts/servers.sh" stop s3 >/dev/null 2>&1 || true
    cleanup
}
trap full_cleanup EXIT
ensure_rclone_and_aiohttp
ARGS=(--bin "$BIN" --proxy "$PROXY" --rclone "$REPO/.venv/bin/rclone")
[ -n "${ZARRFS_BIN_BEFORE:-}" ] && ARGS+=(--before "$ZARRFS_BIN_BEFORE")
TOZARR_PYTHON="$PY" "$PY" "$REPO/bench/bench_to_zarr.py" run "$WORK" "${ARGS[@]}"
